"""The LES step as a CUDA graph (``les.graphs``): the same fields bit for bit with and without the
graph, on a GPU or on the CuPy stand-in (``PYTHONPATH=tests/fakegpu``), whose stream capture
records work without doing it, freezes the scalars a kernel is given and refuses host copies, as
CUDA does (the stand-in's own checks are below, so that the identity test can fail); the path off
where it does not apply; a capture that fails falls back to launches.

Every test needing a device is named ``*gpu*`` (the stand-in stage of scripts/run_tests.sh and
bench/gpu_check.sh select by that).
"""
import warnings

import numpy as np
import pytest

from hpcsuite.les import graphs
from hpcsuite.les.model import bomex_like
from hpcsuite.runtime import Team, gpu_status

try:
    import cupy
    from cupy import _core as fake
    STAND_IN = hasattr(fake, "Capture")
except ImportError:
    cupy, STAND_IN = None, False

needs_gpu = pytest.mark.skipif(not gpu_status()[0], reason="no usable GPU (nor the CuPy stand-in)")
stand_in = pytest.mark.skipif(not STAND_IN, reason="needs the CuPy stand-in: PYTHONPATH=tests/fakegpu")

SHAPE = (12, 10, 12)      # the smallest block with the 5th-order halo at 1-3 ranks (as test_fake_gpu)


def _fields(m) -> dict:
    return {n: a.get() for n, a in m.ctx.fields.items()}


def _run(scheme, graph, steps=4, graph_class=None):
    """Fields and steps after ``steps`` RK3 steps of the BOMEX-like case: the first without the graph
    (it warms up), the second captures, the others replay (two, so that a scalar frozen at the
    capture shows)."""
    m = bomex_like(SHAPE, Team.world(), device="gpu", scheme=scheme, graphs=graph)
    if graph_class is not None:
        m.graph = graph_class(m.ctx.xp)
    dts = [m.step() for _ in range(steps)]
    out, captures = _fields(m), (m.graph.captures if m.graph is not None else 0)
    m.free()
    return out, dts, captures


@needs_gpu
@pytest.mark.parametrize("scheme, backend", [("2nd", None), ("5th", None), ("2nd", "reference")])
def test_gpu_step_in_a_graph_is_bit_identical(scheme, backend):
    """Four steps with the stages as one graph give the fields of four steps without, bit for bit
    (the same kernels on the same data: only how they are launched differs); also with the
    array-API source of every operator (``reference``: the stage steps as 0-d device arrays in
    CuPy expressions instead of kernel arguments)."""
    from hpcsuite.les import ops
    with ops.using(backend):
        ref, dts_ref, none = _run(scheme, False)
        got, dts, captures = _run(scheme, True)
    assert none == 0 and captures == 1              # captured once, replayed twice
    assert dts == dts_ref
    for n in ref:
        assert np.array_equal(got[n], ref[n]), n


@stand_in
def test_gpu_graph_with_a_frozen_scalar_gives_other_fields():
    """Why the identity above means something: a graph captured with the stage steps as host
    numbers (kernel arguments by value) replays the capture's dt, and the stand-in, as a GPU, then
    gives other fields from the first replay on."""
    class HostSteps(graphs.StepGraph):
        def run(self, key, dts, body):
            self.stage_dts = list(dts)                 # read by the body at the capture only
            super().run(key, dts, body)

    ref, dts_ref, _ = _run("2nd", False, steps=3)
    got, dts, captures = _run("2nd", True, steps=3, graph_class=HostSteps)
    assert captures == 1 and dts[:2] == dts_ref[:2] and dts_ref[2] != dts_ref[1]
    assert not np.array_equal(got["u"], ref["u"])


@stand_in
def test_gpu_graph_launches_per_step():
    """With graphs a step launches the prelude graph (start-of-step copy, the time step's
    reductions), copies four numbers to the host and the stage steps back, and launches the stages'
    graph: three launches instead of ~120."""
    m = bomex_like(SHAPE, Team.world(), device="gpu", graphs=True)
    for _ in range(3):                       # warm-up, capture, the prelude's capture again (ekm)
        m.step()
    fake.launches.clear()
    fake.transfers.clear()
    m.step()
    launches, moved = dict(fake.launches), list(fake.transfers)
    nodes = sum(m.graph.graph.nodes.values()) + sum(m.graph.prelude.graph.nodes.values())
    captures = (m.graph.prelude.captures, m.graph.stages.captures)
    m.free()
    assert launches == {"graph": 2, "set": 1}, launches
    assert nodes >= 100                                  # what the graphs hold instead
    assert moved == [("to_host", 32), ("to_device", 24)], moved
    assert captures == (2, 1)


@stand_in
def test_gpu_graph_capture_that_fails_falls_back_to_launches():
    """A term that needs a value on the host inside the stages cannot be captured: one warning, and
    the model steps without the graph, with the fields of a model that never had one."""
    def peek(ctx):
        float(ctx.fields["u"][3, 3, 3])                # a device -> host copy inside a stage

    fields = []
    for graph in (False, True):
        m = bomex_like(SHAPE, Team.world(), device="gpu", graphs=graph)
        m.terms.insert(0, peek)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                m.step()
        assert (m.graph is None) and (len([x for x in w if "CUDA graph" in str(x.message)]) == int(graph))
        if graph:
            assert "capture failed" in m.graphs_reason
        fields.append(_fields(m))
        m.free()
    for n in fields[0]:
        assert np.array_equal(fields[0][n], fields[1][n]), n


@pytest.mark.mpi
def test_gpu_graphs_chosen_only_where_they_apply(team, monkeypatch):
    """Off on NumPy, at several ranks and when switched off; on when switched on at one rank; the
    variable is read when the model has no option, and a bad value is one clear error."""
    import numpy
    assert graphs.choose_graphs(True, team, numpy) == (False, "the fields are not on a CuPy device")
    assert graphs.choose_graphs(False, team, cupy or numpy)[0] is False
    monkeypatch.setenv(graphs.ENV, "0")
    assert graphs.choose_graphs(None, team, cupy or numpy) == (False, f"switched off (${graphs.ENV}=0)")
    monkeypatch.setenv(graphs.ENV, "yes")
    with pytest.raises(ValueError, match=graphs.ENV):
        graphs.choose_graphs(None, team, cupy or numpy)
    if cupy is None:
        pytest.skip("CuPy (or its stand-in) not importable: the device cases do not apply")
    on, why = graphs.choose_graphs(True, team, cupy)
    assert on == (team.size == 1), why
    if team.size > 1:
        assert f"{team.size} ranks" in why
    monkeypatch.setenv(graphs.ENV, "auto")
    on, why = graphs.choose_graphs(None, team, cupy)
    # the stand-in says it is CuPy 0.0; on a real one, auto waits for the GPU confirmation
    assert on == (team.size == 1 and not STAND_IN and graphs.VERIFIED_ON_A_GPU), why


@needs_gpu
@pytest.mark.mpi
def test_gpu_graphs_at_several_ranks_step_as_before(team):
    """Asked for at 2 ranks the graph does not apply (MPI between the kernels): the model says why
    and steps with launches, the fields those of a model not asked."""
    if team.size == 1:
        pytest.skip("one rank: test_gpu_step_in_a_graph_is_bit_identical covers it")
    got = []
    for graph in (True, False):
        m = bomex_like(SHAPE, team, device="gpu", graphs=graph)
        assert m.graph is None and (f"{team.size} ranks" in m.graphs_reason or not graph)
        for _ in range(2):
            m.step()
        got.append(_fields(m))
        m.free()
    for n in got[0]:
        assert np.array_equal(got[0][n], got[1][n]), n


# ------------------------------------------------------------------ the stand-in's stream capture
@stand_in
def test_stand_in_capture_records_without_doing_and_replays():
    """Captured work is not done until the graph is launched; each launch replays it into the same
    buffers; a device scalar is read at each launch, a kernel's by-value scalar is frozen."""
    src = ('extern "C" __global__ void axpy(double* y, const double* x, const double a, const double* b, '
           'const int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i] + b[0]; }')
    axpy = cupy.RawModule(code=src, options=("--fmad=false",)).get_function("axpy")
    x, y, b = cupy.arange(4.0), cupy.zeros(4), cupy.zeros(1)
    s = cupy.cuda.Stream(non_blocking=True)
    a = np.float64(2.0)
    with s:
        s.begin_capture()
        axpy((1,), (4,), (y, x, a, b, np.int32(4)))
        tmp = y * 10.0                                # an allocation during the capture
        y[...] = tmp
        g = s.end_capture()
    assert np.array_equal(y.get(), np.zeros(4))        # nothing done yet
    assert np.isnan(tmp.get()).all()                   # undefined until the graph runs
    assert g.allocations == [32] and g.nodes == {"raw:axpy": 1, "ufunc:multiply": 1, "setitem": 1}
    fake.launches.clear()
    g.launch(s)
    assert np.array_equal(y.get(), 10.0 * 2.0 * np.arange(4.0))
    assert dict(fake.launches) == {"graph": 1}
    a = np.float64(100.0)                              # (too late: captured by value)
    b.set(np.array([1.0]))                             # read from device memory at each launch
    g.launch(s)
    assert np.array_equal(y.get(), 10.0 * (10.0 * 2.0 * np.arange(4.0) + 2.0 * np.arange(4.0) + 1.0))
    assert np.array_equal(tmp.get(), y.get())


@stand_in
def test_stand_in_capture_refuses_what_cuda_refuses():
    """Host copies and synchronisation during a capture raise (and invalidate it), with nothing of
    the capture done; library calls CuPy does not capture (cuBLAS, cuSOLVER, cuRAND) and results
    whose size depends on the data raise as in CuPy; the default stream cannot capture; work on
    another stream is refused."""
    x = cupy.ones(3)
    s = cupy.cuda.Stream(non_blocking=True)
    for forbidden in (lambda: float(x.sum()), lambda: x.get(), lambda: cupy.asarray(np.ones(2)),
                      lambda: s.synchronize(), lambda: cupy.cuda.Device().synchronize(),
                      lambda: bool(x[0] > 0)):
        with s:
            s.begin_capture()
            x += 1.0
            with pytest.raises(fake.CaptureError, match="cudaErrorStreamCaptureUnsupported"):
                forbidden()
            with pytest.raises(fake.CaptureError, match="cudaErrorStreamCaptureInvalidated"):
                s.end_capture()
        assert fake.capture is None and np.array_equal(x.get(), np.ones(3))
    m = cupy.ones((3, 3))
    for library, refused in (("cuBLAS", lambda: m @ m), ("cuBLAS", lambda: cupy.dot(m, m)),
                             ("cuSOLVER", lambda: cupy.linalg.svd(m)), ("cuRAND", lambda: cupy.random.random(3)),
                             ("is capturing", lambda: cupy.nonzero(x)), ("is capturing", lambda: x[x > 0])):
        with s:
            s.begin_capture()
            with pytest.raises((NotImplementedError, RuntimeError), match=library):
                refused()                              # (as CuPy: the capture itself stays valid)
            s.end_capture()
    with pytest.raises(RuntimeError, match="default"):
        cupy.cuda.Stream.null.begin_capture()
    with s:
        s.begin_capture()
    with pytest.raises(fake.CaptureError, match="a stream other than the capturing one"):
        x += 1.0                                       # (the capturing stream is not current here)
    with pytest.raises(fake.CaptureError):
        s.end_capture()
    assert np.array_equal(x.get(), np.ones(3))
