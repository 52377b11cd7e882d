"""Deep-halo stencil solver at 1-4 ranks against a serial NumPy reference (np.roll, np.pad for the
Dirichlet cells) and against its own depth-1 result: 7- and 27-point, periodic, Dirichlet and mixed
boundaries, uneven blocks, several process grids; exchange and message counts; the strict array-API
backend running the same loop without host<->device transfers; argument checks before any
communication."""
import itertools
import math

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite import pgas
from hpcsuite.accel import get_backend, kernels
from hpcsuite.runtime import Team, Timers, gpu_status
from hpcsuite.solvers import DEPTH_CANDIDATES, StencilSolver, heat_coeffs
from hpcsuite.solvers.stencil import TILE_CANDIDATES

SHAPE = (12, 17, 9)          # uneven blocks at 2-4 ranks, every block >= 4 cells on the grids used
STEPS = 7                    # not a multiple of the depths: the last cycle is shorter
COEFFS = {"7": (0.4, 0.1, 0.12, 0.08), "27": (0.3, 0.05, 0.025, 0.0125)}
BOUNDARIES = {
    "periodic": "periodic",
    "dirichlet": 1.5,
    "mixed": ("periodic", 0.5, "periodic"),
    "two_values": (1.5, "periodic", -0.5),
}


def initial(shape=SHAPE, seed=11):
    return np.random.default_rng(seed).random(shape)


def reference(u, kind, c, boundary, steps):
    """Serial steps: np.roll on the field padded by one cell (wrap for periodic dimensions, the
    fixed value for Dirichlet ones; where two Dirichlet dimensions meet, the first one's value)."""
    bnd = (boundary,) * 3 if isinstance(boundary, (str, float)) else boundary
    offsets = [o for o in itertools.product((-1, 0, 1), repeat=3) if any(o)]
    if kind == "7":
        offsets = [o for o in offsets if sum(map(abs, o)) == 1]
    for _ in range(steps):
        p = u
        for d in (2, 1, 0):                       # dimension 0 last: its value wins in corners
            w = [(0, 0)] * 3
            w[d] = (1, 1)
            p = np.pad(p, w, mode="wrap") if bnd[d] == "periodic" else np.pad(p, w, constant_values=bnd[d])
        new = c[0] * p
        for o in offsets:
            weight = c[1 + [i for i in range(3) if o[i]][0]] if kind == "7" else c[sum(map(abs, o))]
            new = new + weight * np.roll(p, [-x for x in o], axis=(0, 1, 2))
        u = new[1:-1, 1:-1, 1:-1]
    return u


def expected_messages(solver, corners):
    """Messages one halo update sends from this rank: one per direction whose neighbour exists
    (wrapping along periodic dimensions) and is another rank."""
    p = solver.pattern
    me = p.unit_coords(solver.team.rank)
    count = 0
    for o in itertools.product((-1, 0, 1), repeat=3):
        if not any(o) or (not corners and sum(map(abs, o)) > 1):
            continue
        nb = []
        for d in range(3):
            c = me[d] + o[d]
            if 0 <= c < p.grid[d]:
                nb.append(c)
            elif solver.boundary[d] == "periodic":
                nb.append(c % p.grid[d])
            else:
                break
        else:
            count += tuple(nb) != me
    return count


def solve(u0, kind, boundary, depth, **kw):
    s = StencilSolver(u0.shape, kind, COEFFS[kind], boundary=boundary, depth=depth, **kw)
    a = s.run(u0, STEPS)
    out = a.to_numpy()
    a.free()
    return s, out


@pytest.mark.mpi
@pytest.mark.parametrize("boundary", list(BOUNDARIES))
@pytest.mark.parametrize("kind", ["7", "27"])
def test_every_depth_equals_depth_one_and_the_reference(team, kind, boundary):
    u0 = initial()
    bnd = BOUNDARIES[boundary]
    ref = reference(u0, kind, COEFFS[kind], bnd, STEPS)
    results = {}
    for depth in (1, 2, 3, 4, "auto"):
        # block 1: single sweeps; "auto": temporal blocking chosen by timing (numba)
        s, out = solve(u0, kind, bnd, depth, block=1 if depth in (2, 3) else "auto")
        results[depth] = out
        k = s.stats.depth
        assert s.stats.steps == STEPS
        assert s.stats.exchanges == math.ceil(STEPS / k), depth
        assert s.stats.messages == s.stats.exchanges * expected_messages(s, corners=k > 1 or kind == "27")
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-13, err_msg=f"depth {depth}")
        # the same expression on the same inputs for every cell: identical, not just close
        assert np.array_equal(out, results[1]), depth
        if depth == "auto":
            assert k in DEPTH_CANDIDATES
            assert {c[0] for c in s.stats.tuning} == {c for c in DEPTH_CANDIDATES if c <= s.min_extent}
            assert (k, s.stats.block, s.stats.tile) in s.stats.tuning      # the choice was timed
            # every rank chose the same depth, block and tile
            assert len(set(team.allgather((k, s.stats.block, s.stats.tile)))) == 1


@pytest.mark.mpi
@pytest.mark.parametrize("boundary", ["periodic", "two_values"])
@pytest.mark.parametrize("kind", ["7", "27"])
def test_temporal_blocking_equals_single_sweeps(team, kind, boundary):
    """One exchange of depth k feeding cache-blocked passes of T <= k steps: bit for bit the
    single sweeps' field, for several T and tile widths (from 1 cell to wider than the block)."""
    u0 = initial()
    bnd = BOUNDARIES[boundary]
    _, plain = solve(u0, kind, bnd, 4, block=1)
    np.testing.assert_allclose(plain, reference(u0, kind, COEFFS[kind], bnd, STEPS), rtol=0, atol=1e-13)
    for block, tile in ((4, 1), (4, 5), (3, 64), (2, 3)):
        s, out = solve(u0, kind, bnd, 4, block=block, tile=tile)
        assert (s.stats.depth, s.stats.block, s.stats.tile) == (4, block, tile)
        assert s.stats.exchanges == math.ceil(STEPS / 4)
        assert np.array_equal(out, plain), (block, tile)
    s, out = solve(u0, kind, bnd, 4)                                # block="auto"
    assert s.stats.block in (1, 4) and np.array_equal(out, plain)
    assert {c[:2] for c in s.stats.tuning} == {(4, 1), (4, 4)}
    assert {c[2] for c in s.stats.tuning if c[1] == 4} <= set(TILE_CANDIDATES) | set(range(1, 18))


@pytest.mark.mpi
@pytest.mark.parametrize("grid,shape", [((1, 0, 1), (6, 17, 7)), ((0, 1, 1), (17, 6, 7)), ((1, 1, 0), (6, 7, 17))])
def test_any_process_grid(team, grid, shape):
    u0 = initial(shape)                       # >= 4 cells per block along the split dimension
    bnd = ("periodic", 0.25, "periodic")
    ref = reference(u0, "27", COEFFS["27"], bnd, STEPS)
    for depth in (1, 4):
        s, out = solve(u0, "27", bnd, depth, grid=grid)
        assert s.grid == tuple(team.size if g == 0 else 1 for g in grid)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-13)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["7", "27"])
def test_strict_backend_runs_the_same_loop_without_transfers(team, kind, monkeypatch):
    u0 = initial()
    bnd = (1.5, "periodic", "periodic")
    _, cpu = solve(u0, kind, bnd, 3)
    be = get_backend("strict")
    seen = []
    real = getattr(kernels, f"stencil{kind}")

    def spy(u, out, *args, **kw):
        seen.append((type(u).__module__.split(".")[0], type(out).__module__.split(".")[0]))
        return real(u, out, *args, **kw)

    monkeypatch.setattr(kernels, f"stencil{kind}", spy)
    s = StencilSolver(SHAPE, kind, COEFFS[kind], boundary=bnd, depth=3, backend="strict")
    with be.data_region() as whole_run:
        a = s.run(u0, STEPS)
    strict = a.to_numpy()
    n, k = a.local_shape, 3
    a.free()
    assert seen == [("array_api_strict", "array_api_strict")] * STEPS     # the portable kernel ran every step
    st = s.stats
    assert st.loop_transfers == 0                                           # nothing moves between exchanges
    # the only transfers: the initial upload, the border slabs down and the ghost slabs up at
    # each exchange (6 + 6), and the final download
    assert whole_run.transfers == 1 + 12 * st.exchanges + 1
    assert st.halo_transfers == 12 * st.exchanges
    border = sum(2 * k * math.prod(n[e] for e in range(3) if e != d) for d in range(3))
    shell = math.prod(x + 2 * k for x in n) - math.prod(n)
    assert st.halo_transfer_bytes == st.exchanges * 8 * (border + shell)
    assert np.array_equal(strict, cpu)


@pytest.mark.mpi
def test_cpu_backend_makes_no_transfers(team):
    be = get_backend("cpu")
    s = StencilSolver(SHAPE, "7", COEFFS["7"], depth=2, backend="cpu")
    with be.data_region() as moved:
        a = s.run(initial(), STEPS)
    a.free()
    assert moved.transfers == 0 and s.stats.loop_transfers == 0


@pytest.mark.mpi
@pytest.mark.skipif(not gpu_status()[0], reason=f"no GPU: {gpu_status()[1]}")
def test_gpu_backend_keeps_the_field_on_the_device(team):
    import cupy
    u0 = initial()
    _, cpu = solve(u0, "27", 1.5, 2)
    s = StencilSolver(SHAPE, "27", COEFFS["27"], boundary=1.5, depth=2, backend="gpu")
    a = s.run(u0, STEPS)
    assert isinstance(a.local, cupy.ndarray)
    assert s.stats.loop_transfers == 0 and s.stats.block == 1               # "auto": single sweeps on the GPU
    np.testing.assert_allclose(a.to_numpy(), cpu, rtol=0, atol=1e-13)
    # the CUDA 2.5-D blocked kernel, two steps per launch: the same field bit for bit
    sb = StencilSolver(SHAPE, "27", COEFFS["27"], boundary=1.5, depth=2, backend="gpu", block=2)
    b = sb.run(u0, STEPS)
    assert sb.stats.block == 2 and sb.stats.loop_transfers == 0
    assert np.array_equal(b.to_numpy(), a.to_numpy())
    b.free()
    a.free()


@pytest.mark.mpi
def test_initial_field_as_distarray_callable_and_zero_steps(team):
    u0 = initial()
    src = pgas.from_numpy(u0, dist=(pgas.BLOCKED, pgas.NONE, pgas.NONE), root=None)   # another layout
    s = StencilSolver(SHAPE, "7", COEFFS["7"], depth=2)
    a = s.run(src, STEPS)
    assert np.array_equal(src.to_numpy(), u0)                  # the input is left alone
    ref = reference(u0, "7", COEFFS["7"], "periodic", STEPS)
    np.testing.assert_allclose(a.to_numpy(), ref, rtol=0, atol=1e-13)
    a.free()
    src.free()
    b = s.run(lambda sl: u0[sl], STEPS)
    np.testing.assert_allclose(b.to_numpy(), ref, rtol=0, atol=1e-13)
    b.free()
    c = s.run(u0, 0)
    assert np.array_equal(c.to_numpy(), u0) and s.stats.exchanges == 0
    c.free()


@pytest.mark.mpi
def test_progress_and_timers(team):
    class Counter:
        def __init__(self):
            self.calls = []

        def update(self, n):
            self.calls.append(n)

    p, t = Counter(), Timers()
    s = StencilSolver(SHAPE, "7", COEFFS["7"], depth=3)
    s.run(initial(), 8, progress=p, timers=t).free()
    assert p.calls == [3, 3, 2]
    assert t.calls["halo"] == t.calls["stencil"] == 3


@pytest.mark.mpi
def test_heat_coeffs_decay_a_sine_mode(team):
    # a discrete eigenmode of the periodic 7-point Laplacian decays by an exact factor per step
    n, alpha, dt = (16, 12, 8), 1.0, 2e-4
    h = [1.0 / x for x in n]
    x = (np.arange(n[0]) + 0.5) * h[0]
    mode = np.sin(2 * np.pi * x)[:, None, None] * np.ones(n)
    s = StencilSolver(n, "7", heat_coeffs(alpha, dt, h), depth=2)
    a = s.run(mode, 10)
    factor = 1 - 4 * alpha * dt / h[0] ** 2 * np.sin(np.pi * h[0]) ** 2
    np.testing.assert_allclose(a.to_numpy(), mode * factor ** 10, rtol=0, atol=1e-13)
    a.free()


class _NoComm:
    """A communicator that fails on any use: proves that validation happens before communication."""

    def __getattr__(self, name):
        raise AssertionError(f"communicated ({name}) before validating the arguments")


@pytest.mark.mpi
def test_bad_arguments_raise_on_every_rank_before_communicating(team):
    silent = Team(MPI.COMM_WORLD)
    silent.comm = _NoComm()
    bad_init = [
        (dict(shape=(6, 6, 6), depth=7), "smallest local extent"),
        (dict(shape=(6, 6, 6), depth=0), "depth must be"),
        (dict(shape=(6, 6, 6), depth="deep"), "depth must be"),
        (dict(shape=(6, 6, 6), kind="9"), "kind must be"),
        (dict(shape=(6, 6, 6), boundary="none"), "boundary must be"),
        (dict(shape=(6, 6, 6), boundary="reflect"), "boundary must be"),
        (dict(shape=(6, 6, 6), boundary=(1.0, 2.0)), "boundary must be"),
        (dict(shape=(6, 6, 6), boundary=float("inf")), "boundary must be"),
        (dict(shape=(6, 6, 6), coeffs=(0.5, 0.1, 0.1)), "4 finite numbers"),
        (dict(shape=(6, 6, 6), coeffs=(0.5, 0.1, float("nan"), 0.1)), "4 finite numbers"),
        (dict(shape=(6, 6)), "3 positive integers"),
        (dict(shape=(6, 0, 6)), "3 positive integers"),
        (dict(shape=(6, 6, 6), grid=(5, 0, 0)), "cannot hold"),
        (dict(shape=(6, 6, 6), backend="tpu"), "backend must be"),
        (dict(shape=(6, 6, 6), dtype=np.int64), "float32 or float64"),
        (dict(shape=(6, 6, 6), threads=0), "threads must be"),
        (dict(shape=(6, 6, 6), block=0), "block must be"),
        (dict(shape=(6, 6, 6), block="fast"), "block must be"),
        (dict(shape=(6, 6, 6), tile=0), "tile must be"),
    ]
    for kw, msg in bad_init:
        with pytest.raises(ValueError, match=msg):
            StencilSolver(team=silent, **kw)
    s = StencilSolver((6, 6, 6), team=silent)
    for args, msg in [((np.zeros((6, 6, 5)), 3), "shape"), ((np.zeros((6, 6, 6)), -1), "steps"),
                      ((np.zeros((6, 6, 6)), 2.5), "steps"), (("field", 3), "u0 must be")]:
        with pytest.raises(ValueError, match=msg):
            s.run(*args)
    team.barrier()                  # every rank got here: nobody was left waiting in a collective
