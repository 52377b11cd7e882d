"""Where arrays live: ``"cpu"`` (NumPy) or ``"gpu"`` (CuPy).

The same solver source runs on both; the device decides the array namespace (``device.xp``) and
where new arrays are created. Asking for a GPU on a machine without a usable one fails at once with
a message that says why (no CuPy installed, or CuPy sees no CUDA device), never later in a kernel.

Examples
--------
>>> dev = get_device("cpu")
>>> dev.xp.__name__
'numpy'
>>> dev.to_host(dev.xp.arange(3))
array([0, 1, 2])
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from .errors import InputError

__all__ = ["Device", "get_device", "gpu_status", "gpu_aware_mpi", "to_host", "concat", "strict_device_of",
           "DEVICES"]

DEVICES = ("cpu", "gpu")


@functools.lru_cache(maxsize=None)
def gpu_status() -> tuple[bool, str]:
    """``(usable, reason)``: whether CuPy is importable and sees a CUDA device. Local, cached."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA library
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc}); install hpcsuite[gpu]"
    try:
        if not cupy.is_available():
            return False, "CuPy is installed but sees no CUDA device (cupy.is_available() is False)"
        n = cupy.cuda.runtime.getDeviceCount()
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception as exc:  # noqa: BLE001 - driver errors surface here
        return False, f"CuPy cannot use the GPU ({type(exc).__name__}: {exc})"
    return True, f"{n} CUDA device(s), device 0 is {name}"


@functools.lru_cache(maxsize=None)
def gpu_aware_mpi() -> bool:
    """Whether the MPI library takes CUDA device buffers (CUDA-aware MPI). Local, cached.

    ``$HPCSUITE_GPU_AWARE_MPI`` = ``1`` / ``0`` decides; otherwise the library is asked: MPICH's
    ``MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA)``, else Open MPI's ``MPIX_Query_cuda_support()``
    (looked up with ctypes: mpi4py wraps neither). Unknown means no: device data is then staged
    through host buffers, which works with any MPI.
    """
    forced = os.environ.get("HPCSUITE_GPU_AWARE_MPI")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        import ctypes

        from mpi4py import MPI
        lib = ctypes.CDLL(MPI.__file__)             # dlsym also searches the MPI library it links
        query = getattr(lib, "MPIX_GPU_query_support", None)
        if query is not None:
            query.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
            ok = ctypes.c_int(0)
            return query(0, ctypes.byref(ok)) == 0 and ok.value == 1     # 0: MPIX_GPU_SUPPORT_CUDA
        query = getattr(lib, "MPIX_Query_cuda_support", None)
        return query is not None and query() == 1
    except Exception:  # noqa: BLE001 - an MPI without the extension, or no MPI: stage through the host
        return False


def to_host(a):
    """``a`` as a host NumPy array, whatever array library holds it. Local.

    NumPy arrays and scalars come back as they are; CuPy arrays by one device-to-host copy
    (``.get()``); ``array_api_strict`` arrays through its CPU device (on any of its devices); any
    other array by ``numpy.asarray``. Unlike :meth:`Device.to_host` it needs no :class:`Device`: for
    code that is handed arrays of an array namespace (the LES terms).

    Examples
    --------
    >>> to_host(np.arange(3))
    array([0, 1, 2])
    """
    if isinstance(a, np.ndarray) or np.isscalar(a):
        return a
    if hasattr(a, "get"):
        return a.get()
    if type(a).__module__.startswith("array_api_strict"):
        import array_api_strict as xs
        return np.from_dlpack(xs.asarray(a, device=xs.Device("CPU_DEVICE"), copy=True))
    return np.asarray(a)


def concat(xp):
    """The array-API ``concat`` of namespace ``xp`` (NumPy 2, array_api_strict), or ``concatenate``
    where it has none (CuPy). Local.

    Examples
    --------
    >>> concat(np)([np.zeros(1), np.ones(1)])
    array([0., 1.])
    """
    return getattr(xp, "concat", None) or xp.concatenate


def strict_device_of(xp, arrays):
    """The device of the first of ``arrays`` under ``array_api_strict`` (which needs it named when
    creating arrays beside them); None for every other namespace (NumPy and CuPy create arrays on
    the current device) or without arrays. Local."""
    if not getattr(xp, "__name__", "").startswith("array_api_strict"):
        return None
    for a in arrays:
        return a.device
    return None


@dataclass(frozen=True)
class Device:
    """A place for arrays: its name, its array module and (on GPU) the CUDA device id."""

    name: str
    xp: ModuleType
    device_id: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    def asarray(self, a, dtype=None):
        """``a`` as an array on this device (copies host data to the GPU when needed)."""
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        """``a`` as a NumPy array (one device-to-host copy on GPU; no copy on CPU)."""
        if self.is_gpu:
            return self.xp.asnumpy(a)
        return np.asarray(a)

    def synchronize(self) -> None:
        """Wait for queued GPU work (no-op on CPU), e.g. before stopping a timer."""
        if self.is_gpu:
            self.xp.cuda.runtime.deviceSynchronize()


def get_device(name: str | Device = "cpu", local_rank: int = 0) -> Device:
    """The :class:`Device` called ``name`` (``"cpu"`` or ``"gpu"``). Local.

    Parameters
    ----------
    name : {"cpu", "gpu"} or Device
    local_rank : int
        This rank's index on its node; ranks on one node are spread round-robin over its GPUs.

    Raises
    ------
    InputError
        ``name`` is not a known device, or ``"gpu"`` was asked for and no GPU is usable.
    """
    if isinstance(name, Device):
        return name
    if name not in DEVICES:
        raise InputError(f"device must be one of {', '.join(map(repr, DEVICES))}, got {name!r}")
    if name == "cpu":
        return Device("cpu", np)
    ok, why = gpu_status()
    if not ok:
        raise InputError(f"device 'gpu' requested but no GPU is usable: {why}")
    import cupy
    dev_id = local_rank % cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(dev_id).use()
    return Device("gpu", cupy, dev_id)
