"""The state directory's check at start and the reading of a failed write mid-run."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from pipeline.state_dir import StateDirError, check_state_dir, state_write_error
from runtime.cli_errors import EX_CANTCREAT


def test_a_writable_directory_passes_and_keeps_no_probe(tmp_path: Path) -> None:
    state = tmp_path / "a" / "state"
    check_state_dir(state)
    assert state.is_dir() and list(state.iterdir()) == []


def test_a_file_in_the_way_names_the_directory_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a directory")
    with pytest.raises(StateDirError) as got:
        check_state_dir(tmp_path / "state" / "inner")
    err = got.value
    assert err.exit_code == EX_CANTCREAT and err.retriable is True
    assert err.errno == errno.ENOTDIR
    assert str(tmp_path / "state" / "inner") in str(err)
    assert "LAGPILOT_STATE_DIR" in str(err) and "not a directory" in str(err)


def test_rocksdb_io_error_on_the_state_dir_is_said_with_its_cause(tmp_path: Path) -> None:
    # RocksDB's words when its filesystem filled up; the directory has room again when the
    # error is read, so the error's own words name the fault
    rocks = Exception(
        f"IO error: No space left on device: While appending to file: {tmp_path}/g/0/000004.log: "
        "No space left on device"
    )
    wrapped = RuntimeError("checkpoint failed")
    wrapped.__cause__ = rocks
    err = state_write_error(wrapped, tmp_path)
    assert err is not None and err.errno == errno.ENOSPC
    assert f"the state directory {tmp_path} cannot be written" in str(err)
    assert "filesystem is full" in str(err)


def test_an_os_error_on_a_file_in_the_state_dir_is_read_as_one(tmp_path: Path) -> None:
    exc = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "g" / "LOCK"))
    err = state_write_error(exc, tmp_path)
    assert err is not None and err.errno == errno.EROFS and "read-only" in str(err)


def test_other_errors_are_not_the_state_dirs(tmp_path: Path) -> None:
    assert state_write_error(RuntimeError("IO error: elsewhere /var/x"), tmp_path) is None
    assert state_write_error(OSError(errno.ENOSPC, "full", "/elsewhere/f"), tmp_path) is None
    assert state_write_error(ValueError("bad"), tmp_path) is None
