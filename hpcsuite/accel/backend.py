"""The solvers' view of a device: a :class:`~hpcsuite.runtime.Device` seen through its array-API
namespace.

Where arrays live, how they are created there, the counted host/device copies and the data
regions are :class:`hpcsuite.runtime.Device`'s (the one device abstraction, shared with pgas and
the LES). A :class:`Backend` adds only the solvers' spelling: ``backend.xp`` is the device's
array-API namespace (``array_api_compat``'s NumPy or CuPy, or ``array_api_strict``), the raw
device is ``backend.runtime_device``, and ``get_backend(name)`` shares one backend per name, so that
callers see the data regions of the solvers' copies. New code may use ``runtime.Device`` directly
(``device.namespace`` is this ``xp``).

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

from ..runtime import InputError, get_device
from ..runtime.device import DataRegion, Device

__all__ = ["Backend", "get_backend", "DataRegion", "BACKENDS"]

BACKENDS = ("cpu", "gpu", "strict")


class Backend:
    """Array namespace and data placement for one device. Local (no communication).

    Parameters
    ----------
    name : {"cpu", "gpu", "strict"}
        ``"cpu"``: NumPy (through ``array_api_compat``), ``"gpu"``: CuPy on this rank's GPU,
        ``"strict"``: ``array_api_strict`` on its ``device1`` (a portability checker, not fast).
    local_rank : int
        Rank on the node, to spread ranks over the node's GPUs.

    Attributes
    ----------
    runtime_device : hpcsuite.runtime.Device
        The device; creation, copies, data regions and ``synchronize`` are its methods.
    xp : module
        Its array-API namespace (``runtime_device.namespace``).
    device
        The ``device=`` that creating arrays needs (``array_api_strict``'s ``device1``), or None.
    """

    def __init__(self, name: str = "cpu", local_rank: int = 0):
        if name not in BACKENDS:
            raise InputError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {name!r}")
        self.name = name
        self.runtime_device: Device = Device.strict() if name == "strict" else get_device(name, local_rank)
        self.xp = self.runtime_device.namespace
        self.device = self.runtime_device.array_device

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    @property
    def is_gpu(self) -> bool:
        return self.runtime_device.is_gpu

    @property
    def is_host(self) -> bool:
        """True when arrays live in host memory as NumPy arrays (no transfers exist)."""
        return self.runtime_device.is_host

    # the device's methods (runtime.Device holds the one implementation)
    def zeros(self, shape, dtype=None):
        """As :meth:`hpcsuite.runtime.Device.zeros`."""
        return self.runtime_device.zeros(shape, dtype)

    def empty(self, shape, dtype=None):
        """As :meth:`hpcsuite.runtime.Device.empty`."""
        return self.runtime_device.empty(shape, dtype)

    def full(self, shape, value, dtype=None):
        """As :meth:`hpcsuite.runtime.Device.full`."""
        return self.runtime_device.full(shape, value, dtype)

    def asarray(self, a, dtype=None):
        """As :meth:`hpcsuite.runtime.Device.asarray` (a counted host-to-device copy)."""
        return self.runtime_device.asarray(a, dtype)

    def to_host(self, a):
        """As :meth:`hpcsuite.runtime.Device.to_host` (a counted device-to-host copy)."""
        return self.runtime_device.to_host(a)

    def scalar(self, a) -> float:
        """As :meth:`hpcsuite.runtime.Device.scalar`."""
        return self.runtime_device.scalar(a)

    def data_region(self):
        """As :meth:`hpcsuite.runtime.Device.data_region`: the copies made through this backend."""
        return self.runtime_device.data_region()

    def synchronize(self) -> None:
        """As :meth:`hpcsuite.runtime.Device.synchronize`."""
        self.runtime_device.synchronize()


_cache: dict = {}


def get_backend(name: str | Backend = "cpu", local_rank: int = 0) -> Backend:
    """The (shared) :class:`Backend` called ``name``. Local."""
    if isinstance(name, Backend):
        return name
    key = (name, local_rank)
    if key not in _cache:
        _cache[key] = Backend(name, local_rank)
    return _cache[key]
