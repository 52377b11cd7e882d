"""runtime.Device as the one device abstraction: arrays created on the device, host/device copies
counted by data regions, the array_api_strict checker, and accel.Backend as a view of a Device.
The GPU case is checked against the CuPy stand-in's own record of what it moved (tests/fakegpu),
in a subprocess when this process has no CuPy."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcsuite.runtime import InputError, get_device, gpu_status
from hpcsuite.runtime.device import DataRegion, Device

TESTS = Path(__file__).resolve().parents[1]


def test_strict_device_counts_every_copy_in_every_open_region():
    dev = Device.strict()
    host = np.arange(12.0).reshape(3, 4)
    with dev.data_region() as outer:
        a = dev.asarray(host)                       # 96 bytes in
        with dev.data_region() as inner:
            b = dev.to_host(a[:1, :])               # 32 bytes out
            s = dev.scalar(dev.namespace.sum(a))    # 8 bytes out
            same = dev.asarray(a)                   # already there: no copy
    dev.asarray(host)                               # no region open: nothing counted
    assert same is a and str(a.device) == str(dev.array_device)
    assert np.array_equal(b, host[:1]) and s == host.sum()
    assert outer.log == [("to_device", 96), ("to_host", 32), ("to_host", 8)]
    assert (outer.to_device, outer.to_host, outer.bytes, outer.transfers) == (1, 2, 136, 3)
    assert inner.log == outer.log[1:] and inner.transfers == 2
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        np.asarray(a)                               # no implicit host conversion off the CPU device
    z = dev.full((2, 2), 3.0)
    assert dev.owns(z) and not dev.owns(host) and str(z.device) == str(dev.array_device)


def test_cpu_device_copies_nothing_and_speaks_the_array_api():
    dev = get_device("cpu")
    with dev.data_region() as region:
        a = dev.asarray([1, 2, 3], dtype=np.float64)
        h = dev.to_host(a)
        dev.scalar(a[0])
    assert h is a and region.transfers == 0 and region.log == []
    assert dev.namespace.__name__ == "array_api_compat.numpy" and dev.is_host and not dev.is_gpu
    assert dev.zeros((2,)).dtype == np.float64 and dev.empty((2,), dtype=np.float32).dtype == np.float32


def test_devices_compare_by_place_not_by_open_regions():
    a, b = get_device("cpu"), get_device("cpu")
    with a.data_region():
        assert a == b and hash(a) == hash(b)
    assert a != Device.strict()
    with pytest.raises(InputError, match="device must be one of 'cpu', 'gpu', got 'strict'"):
        get_device("strict")                        # pgas arrays cannot live on the checker


def test_backend_is_a_view_of_its_device():
    from hpcsuite.accel import DataRegion as AccelRegion, get_backend
    be = get_backend("strict")
    assert get_backend("strict") is be and AccelRegion is DataRegion
    assert be.xp is be.runtime_device.namespace and be.device == be.runtime_device.array_device
    with be.runtime_device.data_region() as seen:
        be.asarray(np.ones(5))
    assert seen.log == [("to_device", 40)]
    cpu = get_backend("cpu")
    assert cpu.xp.__name__ == "array_api_compat.numpy" and cpu.is_host and not cpu.is_gpu


def _gpu_copies_match_the_stand_in() -> None:
    """Every copy the stand-in records is counted, with its size; creation moves nothing."""
    import cupy
    from cupy import _core as fake
    dev = get_device("gpu")
    fake.transfers.clear()
    with dev.data_region() as region:
        a = dev.asarray(np.arange(10.0))
        z = dev.zeros((4,))
        assert dev.asarray(a) is a and dev.owns(z) and isinstance(a, cupy.ndarray)
        dev.to_host(a[:3])
        dev.scalar(a.sum())
    assert region.log == list(fake.transfers) == [("to_device", 80), ("to_host", 24), ("to_host", 8)]


def test_gpu_device_counts_what_the_cupy_stand_in_moves():
    try:
        from cupy import _core
        fake = hasattr(_core, "transfers")
    except ImportError:
        fake = None
    if fake:
        _gpu_copies_match_the_stand_in()
        return
    if gpu_status()[0]:
        pytest.skip("a real GPU: nothing here records its copies (the stand-in does)")
    code = "import test_device_copies as t; t._gpu_copies_match_the_stand_in(); print('ok')"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS / "fakegpu"), str(TESTS / "runtime")]))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
