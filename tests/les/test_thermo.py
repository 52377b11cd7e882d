"""Moist thermodynamics against independent references: SciPy root solves of the saturation
adjustment, an ODE integration of the hydrostatic equation, NumPy buoyancy on the global field, and
horizontal means at 1-4 ranks."""
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from physctx import coords, gather_interior, interior, make_ctx
from hpcsuite.les import thermo
from hpcsuite.les.grid import Grid
from hpcsuite.runtime import InputError
from hpcsuite.runtime.device import to_host

RD, RV, CP, LV, G = 287.04, 461.5, 1004.0, 2.53e6, 9.81


def es_ref(T):          # Bolton (1980), written out here independently
    return 611.2 * np.exp(17.67 * (T - 273.15) / (T - 29.65))


def qs_ref(T, p):
    e = es_ref(T)
    return (RD / RV) * e / (p - (1 - RD / RV) * e)


def adjust_ref(thl, qt, p, exn):
    tl = exn * thl
    if qt <= qs_ref(tl, p):
        return 0.0, tl
    T = brentq(lambda T: T - tl - LV / CP * (qt - qs_ref(T, p)), tl, tl + 60.0, xtol=1e-13)
    return qt - qs_ref(T, p), T


POINTS = [  # thl, qt, p: cloud base and top of BOMEX-like air, a very moist point, dry and cold points
    (298.7, 0.0170, 95000.0), (300.0, 0.0165, 94000.0), (302.0, 0.0140, 85000.0),
    (299.0, 0.0250, 100000.0), (305.0, 0.0050, 80000.0), (280.0, 0.0, 70000.0), (250.0, 0.003, 60000.0),
]


def test_saturation_adjustment_matches_a_root_solve():
    thl, qt, p = (np.array(c) for c in zip(*POINTS))
    exn = (p / 1e5) ** (RD / CP)
    ql, T = thermo.saturation_adjust(np, thl, qt, p, exn)
    saturated = 0
    for i, (a, b, c) in enumerate(POINTS):
        ql_r, T_r = adjust_ref(a, b, c, exn[i])
        assert ql[i] == pytest.approx(ql_r, abs=1e-12)
        assert T[i] == pytest.approx(T_r, rel=1e-12)
        saturated += ql_r > 0
    assert 2 <= saturated < len(POINTS)               # both branches were exercised


def test_dry_and_saturated_limits():
    thl = np.linspace(280, 310, 31)
    p = np.full(31, 90000.0)
    exn = (p / 1e5) ** (RD / CP)
    ql, T = thermo.saturation_adjust(np, thl, np.zeros(31), p, exn)
    assert np.all(ql == 0) and np.allclose(T, exn * thl, rtol=1e-15)
    qt = np.full(31, 0.04)                                  # far above saturation everywhere
    ql, T = thermo.saturation_adjust(np, thl, qt, p, exn)
    np.testing.assert_allclose(qt - ql, qs_ref(T, p), rtol=1e-12)     # vapour is at saturation
    np.testing.assert_allclose(T, exn * thl + LV / CP * ql, rtol=1e-14)


def test_virtual_theta_formula():
    thl, qt, ql, exn = 300.0, 0.015, 0.001, 0.97
    th = thl + LV / CP * ql / exn
    assert thermo.virtual_theta(thl, qt, ql, exn) == pytest.approx(th * (1 + (RV / RD - 1) * qt - RV / RD * ql))


@pytest.mark.parametrize("moist", [False, True])
def test_base_state_is_hydrostatic(moist):
    zh = np.concatenate([np.linspace(0, 1000, 21), np.linspace(1000, 3000, 21)[1:]])   # stretched
    grid = Grid.stretched(4, 4, 400.0, 400.0, zh)
    zf = grid.zf
    thl0 = 298.0 + 3e-3 * zf + 2.0 * (zf > 1500)
    qt0 = (0.016 * np.exp(-zf / 2500) if moist else np.zeros_like(zf))
    ps = 101500.0
    base = thermo.base_state(grid, ps, 300.0, thl0, qt0, np)
    # reference: dp/dz = -g p / (Rd Tv) with the cell's thl, qt (constant within a cell) and ql, T
    # from the root-solve adjustment at the local pressure, integrated by SciPy cell by cell.
    def tv(k, p):
        exn = (p / 1e5) ** (RD / CP)
        ql, T = adjust_ref(thl0[k], qt0[k], p, exn)
        return T * (1 + (RV / RD - 1) * qt0[k] - RV / RD * ql)
    p, pres_f = ps, []
    for k in range(grid.nz):
        rhs = lambda z, y, k=k: [-G * y[0] / (RD * tv(k, y[0]))]
        mid = solve_ivp(rhs, (zh[k], zf[k]), [p], rtol=1e-11, atol=1e-6).y[0, -1]
        p = solve_ivp(rhs, (zf[k], zh[k + 1]), [mid], rtol=1e-11, atol=1e-6).y[0, -1]
        pres_f.append(mid)
    # the model holds thv constant within a cell (ql from the centre): exact for dry air
    tol = 1e-9 if not moist else 2e-5
    np.testing.assert_allclose(base.presf, pres_f, rtol=tol)
    assert base.presh[0] == pytest.approx(ps) and base.presh[-1] == pytest.approx(p, rel=tol)
    np.testing.assert_allclose(base.exnf, (base.presf / 1e5) ** (RD / CP), rtol=1e-13)
    assert np.all(np.diff(base.presf) < 0)


def test_base_state_rejects_wrong_profile_length():
    grid = Grid.uniform(4, 4, 10, 400.0, 400.0, 1000.0)
    with pytest.raises(InputError, match="10 levels"):
        thermo.base_state(grid, 1e5, 300.0, np.zeros(9), np.zeros(10))


def _moist_fields(grid, seed=1):
    rng = np.random.default_rng(seed)
    xc, yc, zc, _, _, _ = coords(grid)
    thl = 298.7 + 4e-3 * zc + 0.3 * rng.standard_normal((grid.nx, grid.ny, grid.nz))
    qt = 0.0190 - 4e-6 * zc + 1.5e-3 * rng.standard_normal((grid.nx, grid.ny, grid.nz))
    return thl, qt


@pytest.mark.mpi
def test_thermo_term_against_numpy_at_any_rank_count(team):
    grid = Grid.uniform(12, 9, 10, 1200.0, 900.0, 2000.0)
    thl, qt = _moist_fields(grid)
    thl0 = thl.mean(axis=(0, 1)); qt0 = qt.mean(axis=(0, 1))
    base = thermo.base_state(grid, 101500.0, 300.0, thl0, qt0, np)
    ctx = make_ctx(team, grid, {"thl": thl, "qt": qt, "w": np.zeros((12, 9, 11)),
                                "u": np.zeros((12, 9, 10))}, base=base)
    thermo.Thermo()(ctx)
    # NumPy reference on the global field
    exn, p = np.asarray(base.exnf), np.asarray(base.presf)
    ql_r, T_r = thermo.saturation_adjust(np, thl, qt, p, exn)      # checked against brentq above
    thv_r = thermo.virtual_theta(thl, qt, ql_r, exn)
    ref_mean = thv_r.mean(axis=(0, 1))
    b = G / 300.0 * (thv_r - ref_mean)
    dzf, dzh = grid.dzf, grid.dzh
    bh = np.zeros((12, 9, 11))
    for k in range(1, grid.nz):
        bh[..., k] = (b[..., k] * dzf[k - 1] + b[..., k - 1] * dzf[k]) / (2 * dzh[k])
    np.testing.assert_allclose(np.asarray(ctx.diag["thvref"]), ref_mean, rtol=1e-14)
    np.testing.assert_allclose(gather_interior(ctx, ctx.diag["ql"]), ql_r, atol=1e-15)
    assert (ql_r > 0).mean() > 0.05                        # some cells are cloudy
    np.testing.assert_allclose(gather_interior(ctx, ctx.tend["w"]), bh, atol=1e-13)
    assert np.all(interior(ctx, ctx.tend["w"])[..., [0, -1]] == 0)     # nothing at surface and lid
    ctx.store.free()


@pytest.mark.mpi
def test_dry_thermo(team):
    grid = Grid.uniform(12, 8, 6, 1200.0, 800.0, 600.0)
    thl, _ = _moist_fields(grid, 3)
    ctx = make_ctx(team, grid, {"thl": thl, "w": np.zeros((12, 8, 7))}, base=thermo.base_state(
        grid, 1e5, 300.0, thl.mean(axis=(0, 1)), np.zeros(6)))
    thermo.DryThermo()(ctx)
    np.testing.assert_array_equal(interior(ctx, ctx.diag["thv"]), interior(ctx, ctx.fields["thl"]))
    assert not np.any(ctx.diag["ql"])
    np.testing.assert_allclose(np.asarray(ctx.diag["thvref"]), thl.mean(axis=(0, 1)), rtol=1e-14)
    # the slab mean of the buoyancy vanishes on every level on a uniform grid
    wt = gather_interior(ctx, ctx.tend["w"])
    assert np.abs(wt.mean(axis=(0, 1))).max() < 1e-13 and np.abs(wt).max() > 1e-3
    ctx.store.free()


def test_physics_terms_run_unchanged_on_the_strict_array_api(team):
    """Every physics term and the statistics on array_api_strict arrays on a non-CPU device (a
    CPU stand-in for CuPy: any NumPy-only call or host conversion raises) give NumPy's numbers."""
    xs = pytest.importorskip("array_api_strict")
    from types import SimpleNamespace
    from hpcsuite.les import cases, forcings, statistics, subgrid, surface
    dev = xs.Device("device1")
    grid = Grid.uniform(12, 8, 10, 1200.0, 800.0, 2000.0)
    p = cases.bomex_profiles(grid.zf)
    rng = np.random.default_rng(0)
    f = {"u": p["u"] + rng.standard_normal((12, 8, 10)), "v": rng.standard_normal((12, 8, 10)),
         "w": np.pad(0.3 * rng.standard_normal((12, 8, 9)), ((0, 0), (0, 0), (1, 1))),
         "thl": p["thl"] + 0.1 * rng.standard_normal((12, 8, 10)),
         "qt": p["qt"] + 2e-3 * rng.random((12, 8, 10)), "e12": 0.2 + rng.random((12, 8, 10))}
    terms = [surface.PrescribedSurface({"wthl": 8e-3, "wqt": 5.2e-5, "ustar": 0.28}), thermo.Thermo(),
             subgrid.SubgridTKE(), subgrid.Smagorinsky(), subgrid.ConstantViscosity(1.0, 2.0),
             forcings.Coriolis({"lat": 15}), forcings.Subsidence(), forcings.PrescribedTendencies()]

    def run(xp, device):
        ref = make_ctx(team, grid, f)
        put = (lambda a: xp.asarray(np.asarray(a), device=device)) if device else (lambda a: a)
        fields = {k: put(v) for k, v in ref.fields.items()}
        ctx = SimpleNamespace(grid=ref.grid, xp=xp, team=team, h=ref.h, fields=fields,
                              tend={k: xp.zeros_like(v) for k, v in fields.items()}, diag={},
                              base=thermo.base_state(grid, 101500.0, 300.0, p["thl"], p["qt"], xp, device=device),
                              profiles=cases.profiles_for_model(p, xp, device=device), params={}, t=0.0,
                              galilean=(0.5, 0.0),
                              zgrid=SimpleNamespace(**{k: put(getattr(grid, k)) for k in ("zf", "zh", "dzf", "dzh")}))
        for term in terms:
            term(ctx)
        stats = statistics.Statistics(team, grid).sample(ctx)
        ref.store.free()
        return {k: to_host(v) for k, v in ctx.tend.items()}, stats

    a, sa = run(np, None)
    b, sb = run(xs, dev)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-13, atol=1e-18, err_msg=k)
        assert np.abs(a[k]).max() > 0, k
    for k in ("cloud_cover", "lwp", "zi", "thl", "wthl"):
        np.testing.assert_allclose(sb[k], sa[k], rtol=1e-12, err_msg=k)
