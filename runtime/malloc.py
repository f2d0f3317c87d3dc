"""glibc's allocator held to a few arenas, and freed pages handed back (Linux only).

glibc gives each thread that allocates under contention an arena of its own, up to eight
per core, and keeps what was freed in them for reuse. A reader with librdkafka's fetch and
broker threads allocating fast (a backlog read at full speed) spreads its transient memory
over many arenas and keeps it all: the process holds its peak, not what it uses. Two
arenas bound that; ``trim`` returns what is free once a burst is over. Elsewhere (musl,
macOS) both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from typing import Any

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h
ARENAS = 2


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap this process's malloc arenas (before its client threads start); True if set."""
    libc = _libc()
    ok = bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1)
    log.debug("malloc arenas capped at %d: %s", arenas, ok)
    return ok


def trim() -> bool:
    """Hand the allocator's free pages back to the system; True if any were."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
