"""Where arrays live: ``"cpu"`` (NumPy), ``"gpu"`` (CuPy) or ``"strict"`` (a portability checker).

The one device abstraction of the suite (pgas arrays, the solvers through ``accel.Backend``, the
LES): the same source runs on every device; the device decides the array module (``device.xp``),
the array-API namespace (``device.namespace``), where new arrays are created and how data moves
between host and device. The OpenACC model it follows: arrays are created *on the device* once
(``!$acc data``), kernels run where the data is, and host copies happen only when asked
(``!$acc update host``); :meth:`Device.data_region` counts the copies made through the device
inside a block, so a test can assert that an iteration loop makes none.

Asking for a GPU on a machine without a usable one fails at once with a message that says why (no
CuPy installed, or CuPy sees no CUDA device), never later in a kernel. :meth:`Device.strict` runs
the same code on ``array_api_strict`` arrays placed on a non-CPU device (``device1``): any
NumPy-only call or implicit host conversion raises, so code that would fail on CuPy is caught on a
CPU-only machine. The CUDA kernels are compiled by :mod:`hpcsuite.runtime.cuda_modules`.

Helpers for code that is handed arrays rather than a device (the LES terms): :func:`to_host`,
:func:`concat`, :func:`strict_device_of`. All functions here are local.

Examples
--------
>>> dev = get_device("cpu")
>>> dev.xp.__name__
'numpy'
>>> dev.to_host(dev.xp.arange(3))
array([0, 1, 2])
>>> with dev.data_region() as region:
...     y = dev.namespace.sum(dev.zeros((3,)) * 2.0)
>>> region.transfers
0
"""
from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from .errors import InputError

__all__ = ["Device", "DataRegion", "get_device", "gpu_status", "gpu_aware_mpi", "to_host", "concat",
           "strict_device_of", "DEVICES"]

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


@dataclass
class DataRegion:
    """Host<->device copies counted while the region is open (:meth:`Device.data_region`). Local.

    ``to_device`` and ``to_host`` count the copies, ``bytes`` their size, ``log`` holds one
    ``(kind, nbytes)`` per copy in order (``kind``: ``"to_device"`` or ``"to_host"``).
    """

    to_device: int = 0
    to_host: int = 0
    bytes: int = 0
    log: list = field(default_factory=list)

    @property
    def transfers(self) -> int:
        """All copies, both ways."""
        return self.to_device + self.to_host

    def add(self, kind: str, nbytes: int) -> None:
        """Count one copy of ``nbytes`` bytes (``kind``: ``"to_device"`` or ``"to_host"``)."""
        setattr(self, kind, getattr(self, kind) + 1)
        self.bytes += nbytes
        self.log.append((kind, nbytes))


@dataclass(frozen=True)
class Device:
    """A place for arrays: its name, its array module and (on GPU) the CUDA device id. Local.

    Parameters
    ----------
    name : {"cpu", "gpu", "strict"}
        ``"cpu"``: NumPy; ``"gpu"``: CuPy on CUDA device ``device_id``; ``"strict"``:
        ``array_api_strict`` on its ``device1`` (made by :meth:`strict`).
    xp : module
        The array module (``numpy``, ``cupy``, ``array_api_strict``): what pgas and kernels call,
        e.g. ``cupy.cuda``. The array-API namespace is :attr:`namespace`.
    device_id : int, optional
        The CUDA device (``"gpu"`` only).

    Devices compare equal by these three fields. The copies made through :meth:`asarray`,
    :meth:`to_host` and :meth:`scalar` are counted by the data regions open on this object.
    """

    name: str
    xp: ModuleType
    device_id: int | None = None
    _regions: list = field(default_factory=list, init=False, compare=False, repr=False)

    @classmethod
    def strict(cls) -> "Device":
        """A device of ``array_api_strict`` arrays on its non-CPU ``device1``: a portability checker
        for array-API code on a CPU-only machine (not fast; pgas arrays cannot live there)."""
        import array_api_strict
        return cls("strict", array_api_strict)

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    @property
    def is_host(self) -> bool:
        """True when arrays live in host memory as NumPy arrays (no copies exist)."""
        return self.name == "cpu"

    @functools.cached_property
    def namespace(self) -> ModuleType:
        """The array-API namespace of this device's arrays (``array_api_compat``'s for NumPy and
        CuPy, ``array_api_strict`` itself)."""
        if self.name == "strict":
            return self.xp
        from array_api_compat import array_namespace
        return array_namespace(self.xp.empty(0))

    @property
    def array_device(self):
        """The ``device=`` that creating arrays here needs (``array_api_strict``'s ``device1``), or
        None (NumPy and CuPy create arrays on the current device)."""
        return self.xp.Device("device1") if self.name == "strict" else None

    def owns(self, a) -> bool:
        """Whether ``a`` is an array of this device's kind (no copy needed to use it here)."""
        if self.name == "cpu":
            return isinstance(a, np.ndarray)
        return type(a).__module__.startswith("array_api_strict" if self.name == "strict" else "cupy")

    # ------------------------------------------------------------------ creation on the device
    def zeros(self, shape, dtype=None):
        """Zeros of ``shape`` (default ``float64``) on this device."""
        return self.namespace.zeros(shape, dtype=dtype or self.namespace.float64, **self._dev())

    def empty(self, shape, dtype=None):
        """An uninitialised array of ``shape`` (default ``float64``) on this device."""
        return self.namespace.empty(shape, dtype=dtype or self.namespace.float64, **self._dev())

    def full(self, shape, value, dtype=None):
        """An array of ``shape`` (default ``float64``) holding ``value`` on this device."""
        return self.namespace.full(shape, value, dtype=dtype or self.namespace.float64, **self._dev())

    def _dev(self) -> dict:
        return {} if self.name != "strict" else {"device": self.array_device}

    # ------------------------------------------------------------------ copies (counted)
    def asarray(self, a, dtype=None):
        """``a`` as an array on this device. Host data becomes one counted host-to-device copy;
        an array already here is returned as it is (converted when ``dtype`` is given)."""
        if self.name == "cpu":
            return np.asarray(a, dtype=dtype)
        if self.owns(a):
            return a if dtype is None else self.namespace.astype(a, dtype)
        host = np.asarray(a, dtype=dtype)
        if not host.flags.c_contiguous:
            host = np.ascontiguousarray(host)
        self._count("to_device", host.nbytes)
        if self.name == "strict":
            return self.xp.asarray(host, device=self.array_device, copy=True)   # a device owns its memory
        return self.xp.asarray(host)

    def to_host(self, a) -> np.ndarray:
        """``a`` as a NumPy array: from the GPU or the strict device one counted device-to-host
        copy; no copy for host arrays."""
        if self.name == "cpu" or isinstance(a, np.ndarray):
            return np.asarray(a)
        self._count("to_host", _nbytes(a))
        if self.name == "strict":
            return to_host(a)
        return self.xp.asnumpy(a)

    def scalar(self, a) -> float:
        """A 0-d (or 1-element) array as a Python float (off the host: a counted copy of 8 bytes)."""
        if self.name != "cpu":
            self._count("to_host", 8)
        return float(a)

    def _count(self, kind: str, nbytes: int) -> None:
        for r in self._regions:
            r.add(kind, nbytes)

    @contextlib.contextmanager
    def data_region(self):
        """Count the host<->device copies made through this device object inside the block (the
        analogue of an OpenACC data region whose body should copy nothing). Yields a
        :class:`DataRegion`."""
        region = DataRegion()
        self._regions.append(region)
        try:
            yield region
        finally:
            self._regions.remove(region)

    def synchronize(self) -> None:
        """Wait for queued GPU work (no-op elsewhere), e.g. before stopping a timer."""
        if self.is_gpu:
            self.xp.cuda.runtime.deviceSynchronize()


def _nbytes(a) -> int:
    n = getattr(a, "nbytes", None)
    if n is not None:
        return int(n)
    return int(np.prod(a.shape)) * 8


def get_device(name: str | Device = "cpu", local_rank: int = 0) -> Device:
    """The :class:`Device` called ``name`` (``"cpu"`` or ``"gpu"``: where pgas arrays can live; the
    ``array_api_strict`` checker is :meth:`Device.strict`). Local.

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
