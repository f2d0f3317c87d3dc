"""A source's child process ends when the pipeline is killed with SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from runtime.procs import die_with_parent

ROOT = Path(__file__).resolve().parents[3]

#: a "pipeline" that spawns a "source" child (as Quix does), prints the child's pid, waits
PARENT = """
import multiprocessing as mp, sys, time

def source(poll_s):
    from runtime.procs import die_with_parent
    assert die_with_parent(poll_s)
    assert die_with_parent(poll_s)  # once per process: a second call is a no-op
    while True:
        time.sleep(0.05)

if __name__ == "__main__":
    child = mp.get_context("spawn").Process(target=source, args=(0.1,))
    child.start()
    print(child.pid, flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (not reaped yet) counts as gone
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_the_child_of_a_killed_parent_ends_within_a_second(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(1.0)
        assert _alive(child)  # it runs while its parent does
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the source child outlived the killed pipeline"
    finally:
        parent.kill()


def test_nothing_to_watch_outside_a_child_process():
    assert die_with_parent() is False
