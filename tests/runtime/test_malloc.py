"""runtime.malloc: after keep_freed_memory() a freed NumPy temporary stays in the heap for the next
one (glibc's own counters say so); without it, glibc hands it back to the kernel. The switch and the
user's own glibc settings are respected."""
import subprocess
import sys

import pytest

PROBE = """
import ctypes, os, sys
import numpy as np
from hpcsuite.runtime.malloc import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
on = keep_freed_memory()
for _ in range(3):                      # temporaries larger than glibc's largest dynamic threshold
    a = np.ones((40 << 20) // 8)
    b = a * 2.0
    del a, b
print(on, libc.mallinfo2().fordblks)
"""


def _probe(env_extra):
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    on, free = p.stdout.split()
    return on == "True", int(free)


def test_freed_temporaries_stay_for_reuse_only_when_asked():
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        pytest.skip("not glibc >= 2.33")
    on, kept = _probe({})
    assert on and kept >= 40 << 20, kept                # the 40 MiB blocks are still in the heap
    off, returned = _probe({"HPCSUITE_MALLOC_TUNING": "0"})
    assert not off and returned < 40 << 20, returned    # glibc's defaults gave them back
    user, _ = _probe({"MALLOC_TRIM_THRESHOLD_": "1000000"})
    assert not user                                      # the user's own setting is left alone
