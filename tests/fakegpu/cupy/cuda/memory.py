"""``cupy.cuda.memory`` of the stand-in: allocations that CUDA IPC can export, for real, between
processes.

``Memory(size)`` (CuPy: one ``cudaMalloc``) is a POSIX shared-memory file (``/dev/shm``) mapped into
this process, so :func:`cupy.cuda.runtime.ipcGetMemHandle` can name it and
:func:`~cupy.cuda.runtime.ipcOpenMemHandle` can map the same bytes into another process (another
MPI rank): the ranks then alias the same memory, as CUDA IPC makes them alias the same device
memory, and a missing synchronisation or a wrong offset shows up as wrong data. The file is removed
when its ``Memory`` is collected (and at exit; files of processes that died without exiting, e.g.
by an MPI abort, are removed at the next import); a mapping opened in a peer stays valid until
closed, as on CUDA.

``MemoryPointer(mem, offset)`` and ``UnownedMemory(ptr, size, owner)`` as in CuPy. Importing this
module also lets the stand-in's ``cupy.ndarray`` be made over such memory, as CuPy's is:
``cupy.ndarray(shape, dtype, memptr, strides)`` (the stand-in's ``ndarray(a)`` otherwise takes a NumPy
array; see ``_install_ndarray_over_memory``).
"""
from __future__ import annotations

import atexit
import bisect
import itertools
import mmap
import os
import weakref

import numpy as np

from .. import _core

__all__ = ["Memory", "MemoryPointer", "UnownedMemory", "BaseMemory", "region_of"]

_SHM_DIR = "/dev/shm"
_counter = itertools.count()

# every mapped region of this process: sorted bases, and base -> (size, weak reference to the
# mapping, shm name or None). A mapping lives as long as a Memory or any array over it.
_bases: list[int] = []
_regions: dict[int, tuple] = {}
# files this process created and has not removed yet (removed at exit at the latest)
_created: set[str] = set()


class _Mapping(mmap.mmap):
    """An mmap that can be referred to weakly and carries its finaliser."""


def _register(base: int, size: int, mm, name: str | None) -> None:
    bisect.insort(_bases, base)
    _regions[base] = (size, weakref.ref(mm), name)


def _unregister(base: int) -> None:
    if base in _regions:
        del _regions[base]
        _bases.remove(base)


def region_of(ptr: int) -> tuple[int, int, object, str | None] | None:
    """``(base, size, mmap, shm name)`` of the mapped region holding ``ptr``, else None."""
    i = bisect.bisect_right(_bases, ptr) - 1
    if i < 0:
        return None
    base = _bases[i]
    size, ref, name = _regions[base]
    mm = ref()
    if mm is not None and ptr < base + max(size, 1):
        return base, size, mm, name
    return None


def _address(mm) -> int:
    """The address of an mmap's first byte (through a NumPy view, released at once)."""
    view = np.frombuffer(mm, dtype=np.uint8, count=1)
    addr = view.ctypes.data
    del view
    return addr


def _unlink(name: str) -> None:
    _created.discard(name)
    try:
        os.unlink(os.path.join(_SHM_DIR, name))
    except FileNotFoundError:
        pass


class BaseMemory:
    ptr: int = 0
    size: int = 0
    device_id: int = 0


class Memory(BaseMemory):
    """One device allocation of ``size`` bytes (CuPy: ``cudaMalloc``), zero-filled; here a POSIX
    shared-memory file mapped into this process, exportable with CUDA IPC."""

    def __init__(self, size: int):
        self.size = int(size)
        self.device_id = 0
        self.name = None
        self._mm = None
        if self.size == 0:
            self.ptr = 0
            return
        name = f"hpcsuite-fakegpu-{os.getpid()}-{next(_counter)}"
        fd = os.open(os.path.join(_SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        _created.add(name)
        try:
            os.ftruncate(fd, self.size)
            self._mm = _Mapping(fd, self.size)
        finally:
            os.close(fd)
        self.name = name
        self.ptr = _address(self._mm)
        _register(self.ptr, self.size, self._mm, name)
        # the file goes with the last user of the mapping (this Memory or an array over it)
        weakref.finalize(self._mm, _release, self.ptr, name)


def _release(base: int, name: str) -> None:
    _unregister(base)
    _unlink(name)


class UnownedMemory(BaseMemory):
    """Memory allocated elsewhere (a peer's allocation opened with CUDA IPC); ``owner`` is kept
    alive as long as this object."""

    def __init__(self, ptr: int, size: int, owner, device_id: int | None = None):
        self.ptr, self.size, self.owner = int(ptr), int(size), owner
        self.device_id = 0 if device_id is None else int(device_id)


class MemoryPointer:
    """A pointer into a :class:`Memory` (or :class:`UnownedMemory`): ``mem.ptr + offset``."""

    def __init__(self, mem: BaseMemory, offset: int):
        self.mem, self.offset = mem, int(offset)
        self.ptr = mem.ptr + self.offset
        self.device_id = mem.device_id

    def __int__(self) -> int:
        return self.ptr


def _host_view(memptr: MemoryPointer, shape, dtype, strides) -> np.ndarray:
    """A NumPy array over the stand-in device memory at ``memptr`` (which must be mapped here)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0 or memptr.ptr == 0:
        return np.empty(shape, dtype=dtype)
    reg = region_of(memptr.ptr)
    if reg is None:
        raise ValueError(f"stand-in: pointer {memptr.ptr:#x} is in no mapped device allocation")
    base, size, mm, _ = reg
    off = memptr.ptr - base
    return np.ndarray(shape, dtype=dtype, buffer=mm, offset=off, strides=strides)


def _install_ndarray_over_memory() -> None:
    """Let ``cupy.ndarray(shape, dtype, memptr, strides)`` work on the stand-in, as in CuPy.

    The shim wraps the stand-in ndarray's constructor from outside ``_core`` (owned elsewhere):
    ``ndarray(a)`` with a NumPy array behaves as before; a shape with ``memptr=`` makes a view of
    the stand-in device memory there. Folding this into ``_core.ndarray.__init__`` would remove it.
    """
    cls = _core.ndarray
    if getattr(cls.__init__, "_over_memory", False):
        return
    plain = cls.__init__

    def __init__(self, a, dtype=None, memptr=None, strides=None, order="C"):
        if memptr is None and dtype is None:        # the stand-in's own ndarray(NumPy array)
            plain(self, a)
            return
        shape = (int(a),) if np.isscalar(a) else tuple(int(n) for n in a)
        dt = np.dtype(float if dtype is None else dtype)
        if memptr is None:                           # cupy.ndarray(shape, dtype): a new allocation
            arr = np.zeros(shape, dtype=dt, order=order)
        else:
            arr = _host_view(memptr, shape, dt, strides)
        plain(self, arr)
    __init__._over_memory = True
    cls.__init__ = __init__


_install_ndarray_over_memory()


@atexit.register
def _remove_files() -> None:
    for name in list(_created):
        _unlink(name)


def _remove_orphans() -> None:
    """Remove the files of stand-in processes that are gone without their exit handlers (an MPI
    abort kills the ranks): names carry the creating process's id."""
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:
        return
    for name in names:
        if not name.startswith("hpcsuite-fakegpu-"):
            continue
        try:
            pid = int(name.split("-")[2])
            os.kill(pid, 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(_SHM_DIR, name))
            except OSError:
                pass
        except (ValueError, IndexError, PermissionError):
            pass


_remove_orphans()
