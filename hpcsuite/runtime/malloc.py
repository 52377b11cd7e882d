"""Keeping freed memory for reuse, so that NumPy's large temporaries do not page-fault every time.

glibc returns a freed block of more than ``M_MMAP_THRESHOLD`` bytes (128 KiB at first, raised
dynamically up to the largest block freed) straight to the kernel, and trims the top of the heap
once more than ``M_TRIM_THRESHOLD`` is free. A solver that makes a dozen field-sized temporaries
per operator (the LES on NumPy: 2-3 MB each on a 64 x 64 x 80 block) then gets fresh pages for
each of them, zeroed by the kernel on first touch. Measured on the BOMEX-like LES step at 1 rank:
0.294 s per step with glibc's defaults, 0.209 s with the thresholds below (``bench/les_step.py``).

:func:`keep_freed_memory` raises both thresholds with ``mallopt``: blocks up to 64 MiB come from the
heap and up to 512 MiB of freed heap stays with the process. The applications call it at start
(``hpcsuite run``); library users may call it themselves. ``HPCSUITE_MALLOC_TUNING=0`` turns it off;
so do glibc's own settings (``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` or
``GLIBC_TUNABLES``), which it leaves alone. Not glibc (musl, macOS): nothing happens.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3          # <malloc.h>
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 512 << 20
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once). Local. Returns whether the
    settings are in effect (``False``: turned off, set by the user, or not glibc)."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if os.environ.get("HPCSUITE_MALLOC_TUNING") == "0":
        return False
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")) or \
            "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False                     # the user's own settings win
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
