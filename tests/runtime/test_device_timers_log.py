"""Devices, timers, rank-0 logging and progress output."""
import io

import numpy as np
import pytest

from hpcsuite.runtime import InputError, Logger, Progress, Timers, get_device, gpu_status, measure, median


def test_cpu_device_is_numpy():
    dev = get_device("cpu")
    assert dev.xp is np and not dev.is_gpu
    a = dev.asarray([1, 2, 3], dtype=np.float64)
    assert isinstance(dev.to_host(a), np.ndarray)


def test_unknown_device_is_bad_input():
    with pytest.raises(InputError, match="device must be one of 'cpu', 'gpu'"):
        get_device("tpu")


def test_gpu_request_without_gpu_says_why():
    ok, why = gpu_status()
    if ok:
        pytest.skip(f"a GPU is usable here ({why})")
    with pytest.raises(InputError, match="no GPU is usable") as e:
        get_device("gpu")
    assert why in str(e.value)


def test_gpu_device_when_present():
    ok, why = gpu_status()
    if not ok:
        pytest.skip(f"no GPU: {why}")
    dev = get_device("gpu")
    x = dev.xp.arange(4.0)
    assert np.array_equal(dev.to_host(x * 2), np.arange(4.0) * 2)


def test_timers_accumulate_and_summarise():
    t = Timers()
    for _ in range(3):
        with t("a"):
            sum(range(1000))
    t.add("b", 0.5)
    s = t.summary()
    assert s["a"]["calls"] == 3 and s["a"]["max"] > 0
    assert s["b"] == {"min": 0.5, "mean": 0.5, "max": 0.5, "calls": 1}
    assert "timer" in t.report()
    samples = measure(lambda: None, repeat=5, warmup=2)
    assert len(samples) == 5 and median(samples) >= 0


def test_progress_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = Progress(10, desc="demo", interval=0.0, stream=out)
    for i in range(10):
        p.update(1, t=i * 0.5)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[-1].startswith("demo: step 10/10 (100%) t=4.5")
    out2 = io.StringIO()
    p = Progress(1000, desc="demo", interval=3600, stream=out2)
    for _ in range(1000):
        p.update()
    assert out2.getvalue().count("\n") == 1   # only the final line within the interval


def test_progress_bar_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    with Progress(5, desc="bar", stream=out) as p:
        for _ in range(5):
            p.update(1, t=1.0)
    assert "5/5" in out.getvalue() and "\r" in out.getvalue()


def test_quiet_progress_prints_nothing():
    out = io.StringIO()
    with Progress(5, quiet=True, interval=0, stream=out) as p:
        for _ in range(5):
            p.update()
    assert out.getvalue() == ""


@pytest.mark.mpi
def test_logger_prints_on_rank_zero_only(team):
    out = io.StringIO()
    log = Logger("app", team, stream=out)
    log.info("hello")
    log.result("final")
    log.warning("careful", all_ranks=True)
    text = out.getvalue()
    if team.rank == 0:
        assert "app: hello\n" in text and "app: final\n" in text
    else:
        assert "hello" not in text and "final" not in text
    assert "careful" in text
    quiet = io.StringIO()
    q = Logger("app", team, quiet=True, stream=quiet)
    q.info("chatter")
    q.result("answer")
    assert "chatter" not in quiet.getvalue()
    assert ("answer" in quiet.getvalue()) == (team.rank == 0)


def _mpi_built_with_cuda():
    """Whether this venv's MPI was built with CUDA, from a source other than the query under test:
    MPICH's configure line (in its library version), Open MPI's ``ompi_info``; None if unknown."""
    import shutil
    import subprocess

    from mpi4py import MPI

    from hpcsuite.runtime.launcher import mpi_vendor
    vendor = mpi_vendor()
    if vendor == "mpich":
        text = MPI.Get_library_version()
        return "--with-cuda" in text if "configure:" in text else None
    if vendor == "openmpi" and shutil.which("ompi_info"):
        out = subprocess.run(["ompi_info", "--parsable", "--all"], capture_output=True, text=True,
                             timeout=60).stdout
        for line in out.splitlines():
            if line.startswith("mca:mpi:base:param:mpi_built_with_cuda_support:value:"):
                return line.rsplit(":", 1)[1] == "true"
    return None


def test_gpu_aware_mpi_is_asked_of_the_library_or_forced(monkeypatch):
    from hpcsuite.runtime import gpu_aware_mpi
    try:
        for value, want in (("1", True), ("0", False)):
            monkeypatch.setenv("HPCSUITE_GPU_AWARE_MPI", value)
            gpu_aware_mpi.cache_clear()
            assert gpu_aware_mpi() is want
        monkeypatch.delenv("HPCSUITE_GPU_AWARE_MPI")
        gpu_aware_mpi.cache_clear()
        asked = gpu_aware_mpi()            # MPICH's MPIX_GPU_query_support / Open MPI's query
        assert isinstance(asked, bool)
        built = _mpi_built_with_cuda()
        if built is False:
            assert asked is False          # a library built without CUDA cannot take device buffers
    finally:
        gpu_aware_mpi.cache_clear()
