"""Child processes that end with their parent.

Quix Streams runs each source in a child process (``multiprocessing``, spawn). When the
pipeline is stopped with SIGKILL (the OOM killer, ``kill -9`` of its PID, a supervisor
that signals only the main PID) that child is re-parented and would run on: sampling,
producing watermarks and holding ``__consumer_offsets`` partitions in the pipeline's
consumer group, so a restarted pipeline would share them with a ghost. Each source calls
``die_with_parent()`` when it starts.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time

log = logging.getLogger(__name__)

_watching = threading.Lock()
_started = False


def die_with_parent(poll_s: float = 0.5) -> bool:
    """In a ``multiprocessing`` child: a daemon thread kills this process (SIGKILL: nothing
    here may outlive the parent, and a replay from the last committed offsets is safe)
    within ``poll_s`` of the parent's end. Polls ``getppid()`` rather than using Linux's
    PR_SET_PDEATHSIG, which fires when the *thread* that forked exits and does not exist
    elsewhere. Once per process; False (nothing to watch) outside a child."""
    global _started
    if multiprocessing.parent_process() is None:
        return False
    with _watching:
        if _started:
            return True
        _started = True
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        log.error("parent process %d is gone; this child (%d) ends too", parent, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()
    return True
