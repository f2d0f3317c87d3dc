"""The pipeline's state directory (Quix Streams' RocksDB stores): checked before the run,
and named with its fix when a write to it fails mid-run.

RocksDB reports a failed write as a bare ``Exception("IO error: No space left on device:
While appending to file: <path>")``; without this module the pipeline ended on "unexpected
error" and the operator had to guess that the state directory was the cause. The run stops
either way (a store that cannot be written cannot checkpoint), but with one sentence saying
which directory, why and what to change; its supervisor's restart is clean once the
directory is writable again: the offsets of the unwritten checkpoint were not committed, so
the input since the last one is read again, and RocksDB recovers its write-ahead log.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path

from runtime.cli_errors import EX_CANTCREAT, CommandError

#: bytes written (and fsynced) by the check at start: enough that a filesystem with only
#: crumbs left fails here, not at the first checkpoint
PROBE_BYTES = 64 * 1024

_WHERE = "or set LAGPILOT_STATE_DIR (--state-dir) to a writable directory"
#: per errno: why the directory cannot be written, and what to change
_FIX: dict[int, str] = {
    errno.ENOSPC: f"its filesystem is full: free space there {_WHERE} with room",
    errno.EDQUOT: f"the disk quota of lagpilot's user is used up: raise it {_WHERE}",
    errno.EFBIG: f"a file there hit the process's file size limit (ulimit -f): lift it {_WHERE}",
    errno.EROFS: f"its filesystem is read-only: mount it read-write {_WHERE}",
    errno.EACCES: f"lagpilot's user may not write there: give it write permission {_WHERE}",
    errno.EPERM: f"lagpilot's user may not write there: give it write permission {_WHERE}",
    errno.ENOTDIR: f"a part of the path is a file, not a directory: move the file {_WHERE}",
    errno.EEXIST: f"the path exists and is not a directory: move it away {_WHERE}",
}
#: RocksDB's words for the errnos above (its IO errors carry the strerror text only)
_WORDS = {os.strerror(code): code for code in _FIX}


class StateDirError(CommandError):
    """The state directory cannot be written. Retriable: the same run succeeds once the
    directory is writable again (space freed, mounted read-write), with no change to lagpilot."""

    retriable = True

    def __init__(self, path: str | Path, code: int | None, detail: str) -> None:
        fix = _FIX.get(code or 0, f"make it writable {_WHERE}")
        super().__init__(
            f"the state directory {path} cannot be written ({detail}): {fix}; the state "
            "already there is kept and the run resumes from it",
            EX_CANTCREAT,
        )
        self.path = str(path)
        self.errno = code


def check_state_dir(path: str | Path) -> None:
    """Create ``path`` if needed and write, fsync and remove a probe file of PROBE_BYTES in
    it; raise StateDirError naming the directory and the fix when any step fails."""
    where = Path(path)
    probe = where / f".lagpilot-write-check-{uuid.uuid4().hex[:8]}"
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StateDirError(where, exc.errno, exc.strerror or str(exc)) from exc
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def state_write_error(exc: BaseException, path: str | Path) -> StateDirError | None:
    """The StateDirError behind ``exc`` when it is a failed write to the state directory (an
    OSError on a path in it, or RocksDB's "IO error"), else None. The directory is checked
    again first: its current fault names the fix best; when the check passes (the fault has
    gone meanwhile) the error's own words name it."""
    root = str(Path(path).resolve())
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for e in chain:
        text = str(e)
        on_state = isinstance(e, OSError) and str(Path(e.filename or "/").resolve()).startswith(
            root
        )
        if not on_state and not ("IO error" in text and root in text):
            continue
        try:
            check_state_dir(path)
        except StateDirError as now:
            return now
        if isinstance(e, OSError):
            return StateDirError(path, e.errno, e.strerror or text)
        code = next((c for words, c in _WORDS.items() if words in text), None)
        return StateDirError(path, code, text[:200])
    return None
