"""The LES's own CUDA kernels (saturation adjustment, hpcsuite.les.gpukernels; the Poisson solver's
Thomas columns, hpcsuite.solvers.thomas) against the array-API source they replace, on the GPU or on
the CuPy stand-in (tests/fakegpu: the kernels compiled for the CPU with g++); skipped without
either. The whole GPU step against the CPU step is tests/les/test_dynamics_gpu.py."""
import numpy as np
import pytest

from hpcsuite.runtime import gpu_status

ok, why = gpu_status()
pytestmark = pytest.mark.skipif(not ok, reason=f"no GPU: {why}")


@pytest.fixture(autouse=True)
def _all_backends_after():
    """Every test here may switch the operator registry to the reference: back to all after it."""
    from hpcsuite.les import ops
    yield
    ops.select(None)


def _kernels(on: bool) -> None:
    """The CUDA kernels on (every backend) or off (the array-API reference everywhere)."""
    from hpcsuite.les import ops
    ops.select(None if on else "reference")


def _moist_state(cupy, shape, seed=0):
    """thl, qt, presf, exnf of a cloudy column set: saturated and unsaturated cells side by side."""
    rng = np.random.default_rng(seed)
    nz = shape[-1]
    presf = np.linspace(1.015e5, 6.0e4, nz)
    exnf = (presf / 1.0e5) ** (287.04 / 1004.0)
    thl = 297.0 + 8.0 * np.linspace(0, 1, nz) + rng.uniform(-1.5, 1.5, shape)
    qt = 0.017 - 0.012 * np.linspace(0, 1, nz) + rng.uniform(-0.004, 0.004, shape)
    return tuple(cupy.asarray(a) for a in (thl, qt, presf, exnf))


def test_cuda_thermo_kernel_matches_the_array_api_source():
    import cupy

    from hpcsuite.les import gpukernels, thermo
    from hpcsuite.les.ops.thermo import NEWTON_STEPS
    thl, qt, presf, exnf = _moist_state(cupy, (7, 5, 40))
    ql, T, thv = (cupy.asnumpy(a) for a in gpukernels.thermo(cupy, thl, qt, presf, exnf, NEWTON_STEPS))
    ql0, T0 = thermo.saturation_adjust(cupy, thl, qt, presf, exnf)
    thv0 = cupy.asnumpy(thermo.virtual_theta(thl, qt, ql0, exnf))
    ql0, T0 = cupy.asnumpy(ql0), cupy.asnumpy(T0)
    cloudy = ql0 > 0
    assert 0.05 < cloudy.mean() < 0.95                 # both branches are exercised
    assert np.array_equal(ql == 0, ~cloudy)            # exactly zero where unsaturated
    # the same operations; only exp may differ in the last bits between the kernel and the library
    assert np.abs(ql - ql0).max() <= 1e-12 * ql0.max()
    assert np.abs(T - T0).max() <= 1e-12 * 300
    assert np.abs(thv - thv0).max() <= 1e-12 * 300
    # and against NumPy on the host (which iterates on the saturated points only)
    qlh, Th = thermo.saturation_adjust(np, *(cupy.asnumpy(a) for a in (thl, qt, presf, exnf)))
    assert np.abs(ql - qlh).max() <= 1e-12 * qlh.max() and np.abs(T - Th).max() <= 1e-12 * 300


def test_cuda_thermo_term_uses_the_kernel_and_can_be_turned_off(monkeypatch):
    import cupy

    from hpcsuite.les import gpukernels, ops
    thl, qt, presf, exnf = _moist_state(cupy, (6, 4, 12), seed=1)
    calls = []
    real = gpukernels.thermo
    monkeypatch.setattr(gpukernels, "thermo", lambda *a: calls.append(1) or real(*a))
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team
    m = bomex_like((8, 8, 10), Team.world(), device="gpu")
    m.step()
    m.free()
    assert len(calls) == 3                             # once per Runge-Kutta stage
    assert gpukernels.usable(thl, qt, presf, exnf)
    assert not gpukernels.usable(thl[:, 1:], qt, presf, exnf)        # a strided view: array-API path
    assert not gpukernels.usable(cupy.asnumpy(thl), qt, presf, exnf)  # host data: not these kernels
    op = ops.OPERATORS["moist_state"]
    assert op.choose(cupy, thl, qt, presf, exnf).backend == "cuda"
    with ops.using("reference"):                       # the one switch turns it off
        assert op.choose(cupy, thl, qt, presf, exnf) is None
    with ops.using("numba"):                           # the CPU kernels' switch does not
        assert op.choose(cupy, thl, qt, presf, exnf) is None
    assert op.choose(cupy, thl, qt, presf, exnf).backend == "cuda"


@pytest.mark.parametrize("strided", [None, (0, 1), (1, 2)], ids=["contiguous", "strided-xy", "strided-z"])
def test_cuda_thomas_columns_equal_the_level_loop(strided):
    """The kernel on a contiguous block and on strided ones, read in place: (1, 2) is what cuFFT
    along the middle axis hands back (the levels not contiguous)."""
    import cupy

    from hpcsuite.les.grid import Grid
    from hpcsuite.runtime import Team
    from hpcsuite.solvers import thomas
    from hpcsuite.solvers.poisson import PoissonFFT
    team = Team.world()                                # one rank: the serial solver
    zh = np.concatenate(([0.0], np.cumsum(np.linspace(1.0, 2.0, 9))))
    g = Grid.stretched(12, 10, 12.0, 10.0, zh)
    solver = PoissonFFT((12, 10, 9), g.dx, g.dy, g.dzf, g.dzh, team, (1, 1), device="gpu", xp=cupy)
    rng = np.random.default_rng(5)
    shape = tuple(cupy.asnumpy(solver._m).shape[1:]) + (9,)
    f = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    a, b = cupy.asarray(f), cupy.asarray(f)
    if strided:
        a = cupy.swapaxes(cupy.asarray(np.ascontiguousarray(np.swapaxes(f, *strided))), *strided)
        assert not a.flags.c_contiguous and np.array_equal(cupy.asnumpy(a), f)
    assert thomas.usable(a, solver._m, solver._cp, solver._a_dev)
    launches = _launch_counter()
    solver._tridiag(a)                                 # the kernel
    if launches is not None:
        assert sum(launches.values()) == 1, dict(launches)       # in place: no copies in or out
    thomas.USE_CUDA = False
    try:
        solver._tridiag(b)                             # the Python loop over the levels
    finally:
        thomas.USE_CUDA = True
    a, b = cupy.asnumpy(a), cupy.asnumpy(b)
    assert np.isfinite(a).all() and not np.allclose(a, f)
    _assert_same(a, b, "thomas")
    solver.free()


def _launch_counter():
    """The stand-in's launch counter, cleared (None on a GPU)."""
    try:
        from cupy import _core
        counter = _core.launches
    except (ImportError, AttributeError):
        return None
    counter.clear()
    return counter


def _stirred_gpu_model(team, monkeypatch, scheme, stretched, shape=(12, 10, 9)):
    """A BOMEX-like model on the GPU (or stand-in) after one step from a state with a random 3-D
    velocity, so that every face flux and every strain component is nonzero, of both signs."""
    import cupy

    from hpcsuite.les.grid import Grid
    from hpcsuite.les.model import bomex_like
    if stretched:
        def uniform(nx, ny, nz, xsize, ysize, zsize):
            dz = np.linspace(1.0, 2.0, nz)
            return Grid.stretched(nx, ny, xsize, ysize, np.concatenate(([0.0], np.cumsum(dz * zsize / dz.sum()))))
        monkeypatch.setattr(Grid, "uniform", uniform)
    m = bomex_like(shape, team, device="gpu", scheme=scheme)
    ctx, lg = m.ctx, m.ctx.grid
    rng = np.random.default_rng(11)
    ix = np.arange(lg.i0 - lg.h, lg.i0 + lg.nxl + lg.h) % shape[0]
    iy = np.arange(lg.j0 - lg.h, lg.j0 + lg.nyl + lg.h) % shape[1]
    for name in ("u", "v", "w"):
        kick = rng.uniform(-0.5, 0.5, shape)[np.ix_(ix, iy)]
        lo = 1 if name == "w" else 0
        ctx.fields[name][:, :, lo:shape[2]] += cupy.asarray(np.ascontiguousarray(kick[:, :, :shape[2] - lo]))
    m.update_halos()
    m.step()                                  # every context field set up (diag, surface, zgrid)
    return m


def _with_and_without_kernels(monkeypatch, ctx, term, diag=(), tend=None):
    """``{on: {name: tendency or diagnostic}}`` of ``term(ctx)`` with the kernels on and off,
    starting from zero tendencies or from ``tend`` (``{name: host array}``)."""
    import cupy

    out = {}
    for on in (True, False):
        _kernels(on)
        ctx.zero_tendencies()
        for n, a in (tend or {}).items():
            ctx.tend[n][...] = cupy.asarray(a)
        term(ctx)
        out[on] = {n: cupy.asnumpy(t).copy() for n, t in ctx.tend.items()}
        out[on].update({n: cupy.asnumpy(ctx.diag[n]).copy() for n in diag})
    return out


def _stand_in() -> bool:
    import cupy
    return "fake" in str(getattr(cupy, "__version__", ""))


def _assert_same(a, b, name):
    """Equal to the last bit on the stand-in; on a GPU within a few roundings (CuPy's ``x ** 2``
    is a ``pow``, the kernels multiply)."""
    if _stand_in():
        assert np.array_equal(a, b), (name, np.abs(a - b).max())
    else:
        assert np.abs(a - b).max() <= 1e-13 * np.abs(b).max(), (name, np.abs(a - b).max())


@pytest.mark.mpi
@pytest.mark.parametrize("scheme,stretched", [("2nd", False), ("5th", False), ("5th", True), ("mixed", True)],
                         ids=["2nd-uniform", "5th-uniform", "5th-stretched", "mixed-stretched"])
def test_cuda_advection_kernel_is_bit_identical_to_the_array_api_source(team, monkeypatch, scheme, stretched):
    """The advective tendency of every field (u, v, w, scalars; the vertical 5th-order stencil
    falling back to 3rd and to the stretched 2nd order at the ends) from one stirred state, with
    the kernels and with the array-API source, equal to the last bit, at any rank count. The
    scalars go through one launch together (``mixed``: a different scheme per field)."""
    from hpcsuite.les import gpukernels
    from hpcsuite.les.advection import Advection
    m = _stirred_gpu_model(team, monkeypatch, "2nd" if scheme == "mixed" else scheme, stretched)
    calls, together = [], []
    real, real_many = gpukernels.advect_into, gpukernels.advect_many_into
    monkeypatch.setattr(gpukernels, "advect_into", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(gpukernels, "advect_many_into", lambda *a: together.append(len(a[0])) or real_many(*a))
    ctx = m.ctx
    term = Advection({"thl": "5th", "u": "5th"}) if scheme == "mixed" else Advection(default=scheme)
    out = _with_and_without_kernels(monkeypatch, ctx, term)
    m.free()
    scalars = [n for n in ctx.fields if n not in "uvw"]
    assert len(calls) == 3                     # u, v, w through the kernel, once each
    assert len(scalars) >= 2 and together == [1, 1, 1, len(scalars)]     # then the scalars in one launch
    for n in out[True]:
        assert np.abs(out[False][n]).max() > 0, n
        assert np.array_equal(out[True][n], out[False][n]), (n, np.abs(out[True][n] - out[False][n]).max())


@pytest.mark.mpi
@pytest.mark.parametrize("stretched", [False, True], ids=["uniform", "stretched"])
def test_cuda_subgrid_kernels_match_the_array_api_source(team, monkeypatch, stretched):
    """The TKE closure term (edge gradients, closure, momentum and scalar diffusion with surface
    fluxes, strain rate and TKE sources) with the CUDA kernels and with the array-API source."""
    import cupy

    from hpcsuite.les import gpusubgrid, subgrid
    from hpcsuite.les.cases import BOMEX
    m = _stirred_gpu_model(team, monkeypatch, "2nd", stretched)
    used = set()
    for name in gpusubgrid.__all__:
        real = getattr(gpusubgrid, name)
        monkeypatch.setattr(gpusubgrid, name, (lambda n, f: lambda *a, **k: used.add(n) or f(*a, **k))(name, real))
    term = subgrid.SubgridTKE({"ustar": BOMEX["ustar"]})
    out = _with_and_without_kernels(monkeypatch, m.ctx, term, diag=("ekm", "ekh"))
    budget = {}                                    # the TKE budget terms (statistics read them)
    for on in (True, False):
        _kernels(on)
        term(m.ctx)
        budget[on] = {k: cupy.asnumpy(a).copy() for k, a in m.ctx.diag["tke_budget"].items()}
    m.free()
    for k in budget[True]:
        _assert_same(budget[True][k], budget[False][k], k)
    assert used == set(gpusubgrid.__all__)
    for n in out[True]:
        assert np.abs(out[False][n]).max() > 0, n
        _assert_same(out[True][n], out[False][n], n)


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["coriolis", "subsidence", "prescribed", "pressure"])
def test_cuda_forcing_and_projection_kernels_equal_the_array_api_source(team, monkeypatch, which):
    """Coriolis, subsidence (descent and ascent: the upwind side flips; thl and qt in one launch),
    the prescribed tendencies (thl and qt in one launch) and the pressure projection's divergence
    and gradient, with the CUDA kernels and with the array-API source."""
    import cupy

    from hpcsuite.les import forcings, gpukernels
    from hpcsuite.les.cases import BOMEX
    m = _stirred_gpu_model(team, monkeypatch, "2nd", stretched=which == "pressure")
    ctx = m.ctx
    if which == "coriolis":                   # a Galilean shift in y too
        ctx.galilean = (ctx.galilean[0], 0.3)
    if which == "subsidence":                 # ascent below, descent above
        wls = cupy.asnumpy(ctx.profiles["wfls"])
        ctx.profiles["wfls"] = cupy.asarray(np.where(np.arange(wls.size) < wls.size // 2, 0.004, -0.006))
    term = {"coriolis": forcings.Coriolis({"lat": BOMEX["lat"]}), "subsidence": forcings.Subsidence(),
            "prescribed": forcings.PrescribedTendencies(), "pressure": m.terms[-1]}[which]
    kernels = {"coriolis": ["coriolis"], "subsidence": ["subsidence_many"], "prescribed": ["add_profiles_many"],
               "pressure": ["projection_rhs", "subtract_gradient"]}[which]
    used = set()
    for name in kernels:
        real = getattr(gpukernels, name)
        monkeypatch.setattr(gpukernels, name, (lambda n, f: lambda *a, **k: used.add(n) or f(*a, **k))(name, real))
    tend = None
    if which == "pressure":     # other terms' tendencies, w's at the surface and the lid included
        rng = np.random.default_rng(7)
        tend = {n: 1e-3 * rng.standard_normal(ctx.tend[n].shape) for n in "uvw"}
    out = _with_and_without_kernels(monkeypatch, ctx, term, tend=tend)
    h = ctx.h
    m.free()
    assert used == set(kernels)
    changed = [n for n in out[False] if np.abs(out[False][n]).max() > 0]
    assert changed, which
    for n in out[True]:              # (tendencies matter on the interior: the CUDA kernel leaves w's
        a, b = out[True][n][h:-h, h:-h], out[False][n][h:-h, h:-h]      # halo columns' ends alone)
        assert np.array_equal(a, b), (which, n, np.abs(a - b).max())
    if which == "pressure":
        assert not out[True]["w"][h:-h, h:-h, 0].any() and not out[True]["w"][h:-h, h:-h, -1].any()


@pytest.mark.mpi
def test_cuda_surface_momentum_kernel_equals_the_array_api_source(team, monkeypatch):
    """The prescribed surface's momentum fluxes (a Galilean shift in x and y, calm points where the
    wind speed bound acts) with the kernel and with the array-API source, to the last bit."""
    import cupy

    from hpcsuite.les import gpukernels, surface
    m = _stirred_gpu_model(team, monkeypatch, "2nd", stretched=False)
    ctx = m.ctx
    ctx.galilean = (ctx.galilean[0], 0.2)
    u0 = ctx.fields["u"]
    u0[::3, ::2, 0] = -ctx.galilean[0] + 0.01           # calm: |U| below HORV_MIN
    ctx.fields["v"][::3, ::2, 0] = -0.2 - 0.02
    calls = []
    real = gpukernels.surface_momentum
    monkeypatch.setattr(gpukernels, "surface_momentum", lambda *a: calls.append(1) or real(*a))
    term = surface.PrescribedSurface({"ustar": 0.28, "wthl": 8e-3, "wqt": 5.2e-5})
    out = {}
    for on in (True, False):
        _kernels(on)
        term(ctx)
        out[on] = {k: cupy.asnumpy(a).copy() for k, a in ctx.diag["surface"].items()}
    m.free()
    assert len(calls) == 1
    assert set(out[True]) == set(out[False]) == {"ustar", "wthl", "wqt", "uw", "vw"}
    inner = (slice(1, -1), slice(1, -1))
    speed = np.hypot(out[False]["uw"][inner], out[False]["vw"][inner]) / 0.28 ** 2
    assert (np.abs(out[False]["uw"][inner]) < 0.28 ** 2 * 0.99).any() and speed.max() > 0
    for k in out[True]:
        assert np.array_equal(out[True][k], out[False][k]), (k, np.abs(out[True][k] - out[False][k]).max())


@pytest.mark.mpi
def test_cuda_buoyancy_kernel_equals_the_array_api_source(team, monkeypatch):
    """The buoyancy added to the w tendency on a stretched grid (the interpolation weights differ
    per level), with the kernel and with the array-API source, to the last bit."""
    import cupy

    from hpcsuite.les import gpukernels, thermo
    m = _stirred_gpu_model(team, monkeypatch, "2nd", stretched=True)
    ctx = m.ctx
    rng = np.random.default_rng(4)
    thv = cupy.asarray(300.0 + rng.standard_normal(ctx.fields["thl"].shape))
    thvref = cupy.asarray(300.0 + 0.1 * rng.standard_normal(ctx.grid.nz))
    calls = []
    real = gpukernels.buoyancy
    monkeypatch.setattr(gpukernels, "buoyancy", lambda *a: calls.append(1) or real(*a))
    out = {}
    for on in (True, False):
        _kernels(on)
        ctx.zero_tendencies()
        ctx.tend["w"][...] = 1.0                       # added to, not overwritten
        thermo.add_buoyancy(ctx, thv, thvref)
        out[on] = cupy.asnumpy(ctx.tend["w"]).copy()
    m.free()
    assert len(calls) == 1
    assert (out[False][..., 1:-1] != 1.0).all() and (out[False][..., [0, -1]] == 1.0).all()
    assert np.array_equal(out[True], out[False]), np.abs(out[True] - out[False]).max()


@pytest.mark.mpi
def test_cuda_courant_rate_equals_the_array_api_source_also_for_nan_and_inf(team, monkeypatch):
    """The time step's Courant rate from the one-pass kernel equals the array-API source's, and a
    NaN or an infinity in any velocity shows in it (the blow-up check relies on that)."""
    from hpcsuite.les import gpukernels
    from hpcsuite.les.timestep import local_rates
    m = _stirred_gpu_model(team, monkeypatch, "5th", stretched=True)
    ctx = m.ctx
    calls = []
    real = gpukernels.courant_columns
    monkeypatch.setattr(gpukernels, "courant_columns", lambda *a: calls.append(1) or real(*a))

    def both():
        out = []
        for on in (True, False):
            _kernels(on)
            out.append(float(local_rates(ctx)[0]))
        return out
    on, off = both()
    assert on == off > 0
    h = ctx.grid.h
    for name, k, bad in (("v", 3, np.inf), ("w", 2, np.nan), ("u", 0, np.nan)):
        ctx.fields[name][h + 1, h, k] = bad
        on, off = both()
        assert (np.isnan(on) and np.isnan(off)) if np.isnan(bad) else on == off == np.inf, (name, on, off)
        ctx.fields[name][h + 1, h, k] = 0.0
    m.free()
    assert len(calls) == 4


@pytest.mark.parametrize("floor, zero_ends", [(None, False), (0.1, False), (None, True)])
def test_cuda_rk_update_equals_the_array_api_expression(floor, zero_ends):
    import cupy

    from hpcsuite.les import gpukernels
    rng = np.random.default_rng(2)
    a0, start, tend = (rng.standard_normal((9, 8, 7)) for _ in range(3))
    I, J = slice(2, 7), slice(2, 6)
    a = cupy.asarray(a0)
    gpukernels.rk_update(a, cupy.asarray(start), 0.37, cupy.asarray(tend), (I, J), floor, zero_ends=zero_ends)
    ref = a0.copy()
    ref[I, J, :] = start[I, J, :] + 0.37 * tend[I, J, :]
    if floor is not None:
        ref[I, J, :] = np.maximum(ref[I, J, :], floor)
        assert (ref[I, J, :] == floor).any()
    if zero_ends:                                      # w at the surface and the lid (interior only)
        ref[I, J, 0] = ref[I, J, -1] = 0.0
    assert np.array_equal(cupy.asnumpy(a), ref)


def test_field_table_saves_the_start_and_updates_every_field_in_one_launch_each():
    """gpukernels.FieldTable (the whole model's start-of-step copy and stage update, one launch
    each) against the per-field expressions: a plain field, a floored one, w with nz + 1 levels
    and zero ends, and a second plain field after w (the tables' order matters)."""
    import cupy

    from hpcsuite.les import gpukernels
    from hpcsuite.les.state import zeros_in_one_buffer
    rng = np.random.default_rng(6)
    names, nz = ("u", "e12", "w", "thl"), 5
    host = {n: rng.standard_normal((9, 8, nz + (n == "w"))) for n in names}
    fields = {n: cupy.asarray(a) for n, a in host.items()}
    buf, start = zeros_in_one_buffer(cupy, fields, pad_to=64)
    _, tend = zeros_in_one_buffer(cupy, fields)
    tend_host = {n: rng.standard_normal(a.shape) for n, a in host.items()}
    for n in names:
        tend[n][...] = cupy.asarray(tend_host[n])
    table = gpukernels.FieldTable(fields, start, tend, buf, {"e12": 0.1})
    assert table.matches(fields, tend) and not table.matches({**fields, "u": cupy.zeros(3)}, tend)
    table.save_start()
    for n in names:
        assert np.array_equal(cupy.asnumpy(start[n]), host[n]), n
    assert not cupy.asnumpy(buf)[sum(a.size for a in host.values()):].any()     # the padding untouched
    for n in names:                                    # the fields move on; start keeps the old values
        fields[n][...] = cupy.asarray(rng.standard_normal(host[n].shape))
    before = {n: cupy.asnumpy(a).copy() for n, a in fields.items()}
    I, J = slice(2, 7), slice(2, 6)
    table.rk_update(0.37, (I, J))
    for n in names:
        ref = before[n].copy()
        ref[I, J, :] = host[n][I, J, :] + 0.37 * tend_host[n][I, J, :]
        if n == "e12":
            ref[I, J, :] = np.maximum(ref[I, J, :], 0.1)
            assert (ref[I, J, :] == 0.1).any()
        if n == "w":
            ref[I, J, 0] = ref[I, J, -1] = 0.0
        assert np.array_equal(cupy.asnumpy(fields[n]), ref), n
    with pytest.raises(ValueError, match="leading elements"):
        gpukernels.FieldTable(fields, start, tend, buf[64:], {})


@pytest.mark.mpi
def test_cuda_kernels_keep_a_whole_step_at_the_array_api_result(team, monkeypatch):
    """Whole RK3 steps of the stirred BOMEX-like case with every CUDA kernel and with none: the
    only differences are the saturation adjustment's exp (last bits), grown over a step."""
    import cupy

    fields = {}
    for on in (True, False):
        _kernels(on)
        m = _stirred_gpu_model(team, monkeypatch, "5th", stretched=True)
        m.step()
        fields[on] = {n: cupy.asnumpy(a).copy() for n, a in m.ctx.fields.items()}
        m.free()
    for n in fields[True]:
        scale = np.abs(fields[False][n]).max()
        assert np.abs(fields[True][n] - fields[False][n]).max() <= 1e-11 * scale, n


@pytest.mark.mpi
def test_kernels_over_several_fields_split_where_the_grid_would_be_too_large(team, monkeypatch):
    """With CUDA's grid limit made tiny, every kernel over several fields (stage update, scalar
    advection, diffusion, subsidence, prescribed tendencies) launches field by field, with views of
    its address tables, and a whole step gives the same bits as with one launch each."""
    import cupy

    from hpcsuite.les import gpubase
    fields, launches = {}, {}
    fake = getattr(getattr(cupy, "_core", None), "launches", None)          # (the stand-in's counter)
    full = gpubase.GRID_YZ_MAX
    for limit in (full, 1):
        monkeypatch.setattr(gpubase, "GRID_YZ_MAX", limit)
        m = _stirred_gpu_model(team, monkeypatch, "5th", stretched=True)
        if fake is not None:
            fake.clear()
        m.step()
        launches[limit] = dict(fake or {})
        fields[limit] = {n: cupy.asnumpy(a).copy() for n, a in m.ctx.fields.items()}
        m.free()
    for n in fields[1]:
        assert np.array_equal(fields[1][n], fields[full][n]), n
    if fake is not None:                # one launch per field (a chunk of one) instead of one in all
        for kind, per_call in (("raw:les_rk_update_many", 6), ("raw:sg_scalar_diffusion_many", 2),
                               ("raw:les_subsidence_many", 2), ("raw:les_add_profiles_many", 2)):
            assert launches[1][kind] == per_call * launches[full][kind] > 0, kind
        # the momentum fields were tables of one already; the three scalars now go one by one
        assert launches[1]["raw:les_advect_many"] == launches[full]["raw:les_advect_many"] + 2 * 3


def test_cuda_kernels_that_do_not_compile_leave_the_array_api_source_running(monkeypatch):
    import cupy

    from hpcsuite.runtime import optional
    from hpcsuite.les import gpubase, gpukernels
    a = cupy.zeros((3, 3, 3))
    assert gpukernels.usable(a)
    monkeypatch.setattr(optional, "_STATE", {})
    monkeypatch.setattr(gpubase, "_COMPILED", [])      # (a process whose kernels never compiled)

    def refuse():
        raise RuntimeError("nvrtc: error: no such intrinsic")
    monkeypatch.setattr(gpukernels, "_module", refuse)
    with pytest.warns(RuntimeWarning, match="hpcsuite.les.gpukernels: the CUDA kernels do not compile here.*array-API source"):
        assert not gpukernels.usable(a)
    assert not gpukernels.usable(a)                  # decided once
