"""``lagpilot keys new --role decide|operator|worker --out DIR``: make an Ed25519 key pair.

Writes ``DIR/<key_id>.key`` (the private key, mode 0600: for the one process that signs as
that role, ``LAGPILOT_PRIVATE_KEY_FILE``) and ``DIR/<key_id>.pub`` (the public key: copy it
into the ``LAGPILOT_TRUSTED_KEYS`` folder of every actuator, worker and pipeline host).
Rotation and the migration from the shared HMAC key: docs/runbook.md, "Role keys".
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from runtime.cli import EX_FAILED, EX_USAGE
from schemas.keys import ROLES, SigningKey


def new_pair(role: str, out: Path) -> tuple[SigningKey, Path, Path]:
    """Make a key pair for ``role`` and write both files into ``out`` (created if missing)."""
    key = SigningKey.generate(role)
    out.mkdir(parents=True, exist_ok=True)
    private, public = out / f"{key.key_id}.key", out / f"{key.key_id}.pub"
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.to_json())
    public.write_bytes(key.public().to_json())
    return key, private, public


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lagpilot keys", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="command", required=True)
    n = sub.add_parser("new", help="make an Ed25519 key pair for one role")
    n.add_argument("--role", required=True, choices=ROLES,
                   help="decide (the pipeline's policy), operator (halt, resume, manual "
                   "actions) or worker (signs no action)")  # fmt: skip
    n.add_argument("--out", required=True, type=Path, help="folder for <key_id>.key and .pub")
    try:
        args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return EX_USAGE if exc.code else 0
    try:
        key, private, public = new_pair(args.role, args.out)
    except OSError as exc:
        print(f"lagpilot keys: cannot write into {args.out}: {exc.strerror}; "
              "pick a writable folder (an existing key is never overwritten)",
              file=sys.stderr)  # fmt: skip
        return EX_FAILED
    print(f"{key.role} key {key.key_id}\n  private: {private} (mode 0600; "
          f"LAGPILOT_PRIVATE_KEY_FILE of the {key.role} process only)\n  public:  {public} "
          "(copy into every verifier's LAGPILOT_TRUSTED_KEYS folder)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
