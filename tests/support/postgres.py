"""A real PostgreSQL server for the tests: Debian's server binaries (``initdb``, ``pg_ctl``)
on a free 127.0.0.1 port, with a throwaway data folder.

``make install`` installs Debian's ``postgresql`` package when the binaries are missing; a
test that needs them fails with that fix instead of skipping. PostgreSQL refuses to run as
root: as root, the server runs as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

HOW_TO_INSTALL = (
    "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: run `make install` "
    "(as root it installs Debian's `postgresql` package), or "
    "`sudo apt-get install -y --no-install-recommends postgresql`"
)


def bindir() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``; AssertionError with the fix if missing."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))  # fmt: skip
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise AssertionError(HOW_TO_INSTALL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server, yield its DSN (user ``lagpilot``, trust auth, database ``postgres``),
    stop it and delete its data at the end. ``fsync=off``: a test server, crash-safety of the
    host is not under test (a killed *client* still is)."""
    bin_ = bindir()
    root = Path(tempfile.mkdtemp(prefix="lagpilot-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")  # made by the Debian package
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=120)

    try:
        run(str(bin_ / "initdb"), "-D", str(data), "-U", "lagpilot", "--auth=trust", "-E",
            "UTF8", "--no-sync")  # fmt: skip
        opts = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c max_connections=200 -c synchronous_commit=off")  # fmt: skip
        run(str(bin_ / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w",
            "-t", "60", "start")  # fmt: skip
    except subprocess.CalledProcessError as exc:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise AssertionError(f"PostgreSQL did not start: {exc.stderr!r} {log[-2000:]}") from None
    try:
        yield f"postgresql://lagpilot@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            run(str(bin_ / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
