"""Fault row 8c: the pipeline's state directory unwritable, then full.

The state directory is a tmpfs of the benchmark's own (``STATE_FS_BYTES``), mounted for
the row: it needs root and a kernel that lets it mount (``mount -t tmpfs``); without them the
row says so and is not measured.

- Unwritable: the tmpfs mounted read-only, ``lagpilot run`` started on it. It must exit at
  once with the directory, the cause and the fix in one line (exit 73), no traceback.
- Full: the tmpfs read-write under row 1's load (``bench.support.fault_load``); 10 s in, a
  file fills what is left of it. The running pipeline's next checkpoint fails: it must exit
  with the same kind of line (the run stops: a store that cannot be written cannot
  checkpoint). The file is removed (the fault clears) and the pipeline restarted on the same
  state, as its supervisor would: it must open its stores (no corruption) and model again;
  recovery is measured from the restart, as in row 1.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from bench.support.fault_load import Scene, under_load
from bench.support.harness import PipelineProcess

STATE_FS_BYTES = 64 * 1024 * 1024
EXIT_TIMEOUT_S = 60.0
#: words in a pipeline's log that would say its state is damaged
CORRUPT_WORDS = ("Corruption", "corrupt", "Traceback")


class CannotMount(RuntimeError):
    """No tmpfs of our own here (not root, or mounting is not allowed)."""


def _mount(where: Path, *options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    opts = ",".join((f"size={STATE_FS_BYTES}", *options))
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                         capture_output=True, text=True)  # fmt: skip
    if got.returncode != 0:
        raise CannotMount(f"mount -t tmpfs failed: {got.stderr.strip()[:200]}")


def _umount(where: Path) -> None:
    subprocess.run(["umount", str(where)], capture_output=True)


def _fill(where: Path) -> int:
    """Write zeros into ``where/filler`` until the filesystem refuses; the bytes written."""
    written = 0
    with (where / "filler").open("wb", buffering=0) as f:
        chunk = b"\0" * (1 << 20)
        while True:
            try:
                written += f.write(chunk) or 0
            except OSError:
                break
        # what is left below a whole chunk
        for size in (1 << 16, 1 << 12, 1 << 9):
            try:
                while True:
                    written += f.write(chunk[:size]) or 0
            except OSError:
                continue
    return written


def _last_line(pipe: PipelineProcess) -> str:
    lines = [ln for ln in pipe.log_tail(20).splitlines() if ln.startswith("lagpilot run:")]
    return lines[-1] if lines else ""


def _wait_exit(pipe: PipelineProcess, timeout_s: float) -> int | None:
    assert pipe.proc is not None
    try:
        return pipe.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None


def read_only_at_start(bootstrap: str, workdir: Path) -> dict[str, Any]:
    where = workdir / "state-ro"
    _mount(where, "ro")
    try:
        pipe = PipelineProcess(bootstrap, "nothing-at-all$", where).start()
        started = time.monotonic()
        code = _wait_exit(pipe, EXIT_TIMEOUT_S)
        took_s = round(time.monotonic() - started, 2)
        if code is None:
            pipe.kill()
        said = _last_line(pipe)
        tail = pipe.log_tail(20)
    finally:
        _umount(where)
    return {
        "exit_code": code,
        "exited_after_s": took_s,
        "said": said,
        "names_the_directory": str(where) in said,
        "names_the_fix": "LAGPILOT_STATE_DIR" in said and "read-only" in said,
        "traceback": "Traceback" in tail,
    }


def full_mid_run(bootstrap: str, workdir: Path, run_s: float = 45.0) -> dict[str, Any]:
    where = workdir / "state-fs"
    _mount(where)
    info: dict[str, Any] = {}

    def fault(scene: Scene) -> None:
        filled = time.monotonic()
        info["filler_bytes"] = _fill(where)
        code = _wait_exit(scene.pipe, EXIT_TIMEOUT_S)
        info["exit_code"] = code
        info["exited_after_s"] = round(time.monotonic() - filled, 2)
        info["said"] = _last_line(scene.pipe)
        (where / "filler").unlink()
        scene.replace_pipeline()  # its supervisor's restart, on the same state
        scene.cleared("the state directory has room again; the pipeline restarted")

    try:
        got = under_load(bootstrap, workdir, fault, run_s=run_s, state_dir=where)
    finally:
        _umount(where)
    said = info.get("said", "")
    log = (workdir / f"{where.name}.log").read_text(errors="replace")
    after_restart = log.split(said, 1)[-1] if said else log
    return (
        got
        | info
        | {
            "names_the_directory": str(where) in said,
            "names_the_fix": "LAGPILOT_STATE_DIR" in said and "full" in said,
            "corrupt_words_after_restart": [w for w in CORRUPT_WORDS if w in after_restart],
            "state_fs_bytes": STATE_FS_BYTES,
        }
    )
