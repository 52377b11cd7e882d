"""``cupy.cuda.runtime`` of the stand-in: device queries, and CUDA IPC between processes for real.

IPC: :func:`ipcGetMemHandle` names the allocation holding a pointer (only ``cupy.cuda.memory.Memory``
allocations, which live in POSIX shared memory; CUDA likewise names whole ``cudaMalloc``
allocations, and :func:`ipcOpenMemHandle` returns the allocation's base). :func:`ipcOpenMemHandle`
maps that memory into this process (another MPI rank), so both processes alias the same bytes;
opening a handle of one's own process fails, as on CUDA. :func:`memcpy` / :func:`memcpyAsync`
copy between any two stand-in pointers (device memory here is host memory).
"""
from __future__ import annotations

import ctypes
import os

from . import memory as _memory
from . import runtime as _r          # the package's object (before this module replaced it)
from .. import _core

getDeviceCount = _r.getDeviceCount
getDeviceProperties = _r.getDeviceProperties
deviceSynchronize = _r.deviceSynchronize

memcpyHostToHost, memcpyHostToDevice, memcpyDeviceToHost, memcpyDeviceToDevice, memcpyDefault = 0, 1, 2, 3, 4
cudaIpcMemLazyEnablePeerAccess = 1

_HANDLE_BYTES = 64              # sizeof(cudaIpcMemHandle_t)


class CUDARuntimeError(RuntimeError):
    """A CUDA runtime error (CuPy's ``cupy.cuda.runtime.CUDARuntimeError``)."""

    def __init__(self, status: int, msg: str):
        self.status = status
        super().__init__(msg)


def getDevice() -> int:
    return 0


def ipcGetMemHandle(ptr: int) -> bytes:
    """A handle naming the device allocation that holds ``ptr`` (64 bytes, as CUDA's)."""
    reg = _memory.region_of(int(ptr))
    if reg is None or reg[3] is None:
        raise CUDARuntimeError(1, "cudaErrorInvalidValue: stand-in CUDA IPC exports only memory from "
                                  "cupy.cuda.memory.Memory (POSIX shared memory)")
    base, size, _, name = reg
    text = f"{name}:{size}:{os.getpid()}".encode()
    if len(text) > _HANDLE_BYTES:
        raise CUDARuntimeError(1, "cudaErrorInvalidValue: stand-in handle name too long")
    return text.ljust(_HANDLE_BYTES, b"\0")


def _parse(handle) -> tuple[str, int, int]:
    name, size, pid = bytes(handle).rstrip(b"\0").decode().split(":")
    return name, int(size), int(pid)


def ipcOpenMemHandle(handle, flags: int = cudaIpcMemLazyEnablePeerAccess) -> int:
    """Map the allocation named by ``handle`` into this process; returns its base pointer."""
    name, size, pid = _parse(handle)
    if pid == os.getpid():
        raise CUDARuntimeError(201, "cudaErrorDeviceUninitialized: a process cannot open its own "
                                    "CUDA IPC handle")
    try:
        fd = os.open(os.path.join(_memory._SHM_DIR, name), os.O_RDWR)
    except FileNotFoundError:
        raise CUDARuntimeError(400, f"cudaErrorInvalidResourceHandle: no allocation {name!r} "
                                    "(freed by its owner?)") from None
    try:
        mm = _memory._Mapping(fd, size)
    finally:
        os.close(fd)
    base = _memory._address(mm)
    _memory._register(base, size, mm, None)
    _opened[base] = mm
    return base


_opened: dict = {}          # base -> mapping, for the handles opened here and not yet closed


def ipcCloseMemHandle(ptr: int) -> None:
    """Unmap an allocation opened with :func:`ipcOpenMemHandle` (arrays over it must be gone)."""
    mm = _opened.pop(int(ptr), None)
    if mm is None:
        raise CUDARuntimeError(1, f"cudaErrorInvalidValue: {int(ptr):#x} was not opened by ipcOpenMemHandle")
    _memory._unregister(int(ptr))
    try:
        mm.close()
    except BufferError:          # an array over it is still alive: unmapped when that goes
        pass


def memcpy(dst: int, src: int, size: int, kind: int) -> None:
    """Copy ``size`` bytes between two stand-in pointers (counted as a copy on the device)."""
    if size:
        _core._launched("memcpy")
        ctypes.memmove(int(dst), int(src), int(size))


def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int = 0) -> None:
    memcpy(dst, src, size, kind)
