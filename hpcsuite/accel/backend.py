"""One solver source for NumPy (CPU), CuPy (GPU) and a strict array-API checker (CPU).

The OpenACC model this replaces: arrays are created *on the device* once (``!$acc data``), kernels
run where the data is, and host copies happen only when asked (``!$acc update host``). Here:

* :class:`Backend` gives the array namespace ``xp`` (array-API compatible) for the chosen device,
  creates arrays there (:meth:`Backend.zeros`, :meth:`Backend.asarray`) and copies to the host only
  through :meth:`Backend.to_host`.
* :meth:`Backend.data_region` counts host<->device transfers made through the backend inside a
  block, so a test can assert that an iteration loop makes none.
* ``Backend("strict")`` runs the same code on ``array_api_strict`` arrays placed on a non-CPU
  device (``device1``): any NumPy-only call or implicit host conversion in solver code raises, so
  code that would fail on CuPy is caught on a CPU-only machine.

Examples
--------
>>> be = get_backend("cpu")
>>> x = be.zeros((3,))
>>> with be.data_region() as region:
...     y = be.xp.sum(x * 2.0)
>>> region.transfers
0
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np

from ..runtime import InputError, get_device

__all__ = ["Backend", "get_backend", "DataRegion", "BACKENDS"]

BACKENDS = ("cpu", "gpu", "strict")


@dataclass
class DataRegion:
    """Host<->device transfers counted while the region is open. Local."""

    to_device: int = 0
    to_host: int = 0
    bytes: int = 0
    log: list = field(default_factory=list)

    @property
    def transfers(self) -> int:
        return self.to_device + self.to_host


class Backend:
    """Array namespace and data placement for one device. Local (no communication).

    Parameters
    ----------
    name : {"cpu", "gpu", "strict"}
        ``"cpu"``: NumPy (through ``array_api_compat``), ``"gpu"``: CuPy on this rank's GPU,
        ``"strict"``: ``array_api_strict`` on its ``device1`` (a portability checker, not fast).
    local_rank : int
        Rank on the node, to spread ranks over the node's GPUs.
    """

    def __init__(self, name: str = "cpu", local_rank: int = 0):
        if name not in BACKENDS:
            raise InputError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {name!r}")
        self.name = name
        self._regions: list[DataRegion] = []
        if name == "strict":
            import array_api_strict as xs
            self.xp = xs
            self.device = xs.Device("device1")
            self.runtime_device = get_device("cpu")
        else:
            self.runtime_device = get_device(name, local_rank)
            from array_api_compat import array_namespace
            self.xp = array_namespace(self.runtime_device.xp.empty(0))
            self.device = None

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    @property
    def is_host(self) -> bool:
        """True when arrays live in host memory as NumPy arrays (no transfers exist)."""
        return self.name == "cpu"

    # ------------------------------------------------------------------ creation on the device
    def zeros(self, shape, dtype=None):
        """Zeros of ``shape`` (default ``float64``) on this backend's device. Local."""
        return self.xp.zeros(shape, dtype=dtype or self.xp.float64, **self._dev())

    def empty(self, shape, dtype=None):
        return self.xp.empty(shape, dtype=dtype or self.xp.float64, **self._dev())

    def full(self, shape, value, dtype=None):
        return self.xp.full(shape, value, dtype=dtype or self.xp.float64, **self._dev())

    def _dev(self) -> dict:
        return {"device": self.device} if self.device is not None else {}

    # ------------------------------------------------------------------ transfers (counted)
    def asarray(self, a, dtype=None):
        """``a`` on this backend's device. Host data becomes a counted host->device transfer."""
        if self.name == "cpu":
            return np.asarray(a, dtype=dtype)
        if self._on_device(a):
            return a if dtype is None else self.xp.astype(a, dtype)
        host = np.ascontiguousarray(a, dtype=dtype)
        self._count("to_device", host.nbytes)
        if self.name == "strict":
            return self.xp.asarray(host, device=self.device, copy=True)   # a device owns its memory
        return self.runtime_device.xp.asarray(host)

    def to_host(self, a) -> np.ndarray:
        """``a`` as a NumPy array; from a device, a counted device->host transfer."""
        if self.name == "cpu" or isinstance(a, np.ndarray):
            return np.asarray(a)
        self._count("to_host", _nbytes(a))
        if self.name == "strict":
            cpu = self.xp.asarray(a, device=self.xp.Device("CPU_DEVICE"), copy=True)
            return np.from_dlpack(cpu)
        return self.runtime_device.xp.asnumpy(a)

    def scalar(self, a) -> float:
        """A 0-d (or 1-element) device array as a Python float (a counted device->host copy)."""
        if self.name != "cpu":
            self._count("to_host", 8)
        return float(a)

    def _on_device(self, a) -> bool:
        if self.name == "strict":
            return type(a).__module__.startswith("array_api_strict")
        return type(a).__module__.startswith("cupy")

    def _count(self, kind: str, nbytes: int) -> None:
        for r in self._regions:
            setattr(r, kind, getattr(r, kind) + 1)
            r.bytes += nbytes

    @contextlib.contextmanager
    def data_region(self):
        """Count the host<->device transfers made through this backend inside the block
        (the analogue of an OpenACC data region whose body should copy nothing)."""
        region = DataRegion()
        self._regions.append(region)
        try:
            yield region
        finally:
            self._regions.remove(region)

    def synchronize(self) -> None:
        """Wait for queued device work (before reading a timer)."""
        self.runtime_device.synchronize()


def _nbytes(a) -> int:
    n = getattr(a, "nbytes", None)
    if n is not None:
        return int(n)
    return int(np.prod(a.shape)) * 8


_cache: dict = {}


def get_backend(name: str | Backend = "cpu", local_rank: int = 0) -> Backend:
    """The (shared) :class:`Backend` called ``name``. Local."""
    if isinstance(name, Backend):
        return name
    key = (name, local_rank)
    if key not in _cache:
        _cache[key] = Backend(name, local_rank)
    return _cache[key]
