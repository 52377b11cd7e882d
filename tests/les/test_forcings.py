"""Large-scale forcings against exact solutions: the inertial oscillation (Coriolis), the gradient
of linear and smooth profiles (subsidence, first order), prescribed tendencies."""
import numpy as np
import pytest

from physctx import gather_interior, interior, make_ctx
from hpcsuite.les import forcings
from hpcsuite.les.grid import Grid
from hpcsuite.runtime import InputError


def test_coriolis_parameter_of_bomex():
    assert forcings.coriolis_parameter(15.0) == pytest.approx(3.775e-5, rel=1e-3)
    assert forcings.Coriolis({"lat": 15.0}).f == pytest.approx(0.376e-4, rel=5e-3)   # the notes' value
    with pytest.raises(InputError, match="lat"):
        forcings.Coriolis({"lat": 95.0})
    with pytest.raises(InputError, match="fcor"):
        forcings.Coriolis({})


def test_inertial_oscillation_rotates_the_ageostrophic_wind(team):
    grid = Grid.uniform(12, 8, 4, 1200.0, 800.0, 400.0)
    f, ug, vg, U0, V0 = 1e-4, -10.0, 1.5, 3.0, -2.0
    cu, cv = -7.0, 0.5                         # the fields live in a frame moving with (cu, cv)
    ones = np.ones((12, 8, 4))
    ctx = make_ctx(team, grid, {"u": (ug + U0 - cu) * ones, "v": (vg + V0 - cv) * ones},
                   profiles={"ug": np.full(4, ug), "vg": np.full(4, vg)})
    ctx.galilean = (cu, cv)
    term = forcings.Coriolis({"fcor": f})

    def rate(state):                            # uniform fields: the state is two numbers
        ctx.fields["u"][...], ctx.fields["v"][...] = state
        ctx.zero_tendencies()
        term(ctx)
        tu, tv = interior(ctx, ctx.tend["u"]), interior(ctx, ctx.tend["v"])
        assert np.ptp(tu) == 0 and np.ptp(tv) == 0
        return np.array([tu[0, 0, 0], tv[0, 0, 0]])

    dt, n = 300.0, 200                          # RK4 over ~1 inertial period (6.0e4 s)
    y = np.array([ug + U0 - cu, vg + V0 - cv])
    for _ in range(n):
        k1 = rate(y); k2 = rate(y + dt / 2 * k1); k3 = rate(y + dt / 2 * k2); k4 = rate(y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    t = n * dt
    u_ex = ug + U0 * np.cos(f * t) + V0 * np.sin(f * t) - cu
    v_ex = vg + V0 * np.cos(f * t) - U0 * np.sin(f * t) - cv
    assert y[0] == pytest.approx(u_ex, abs=1e-6)
    assert y[1] == pytest.approx(v_ex, abs=1e-6)
    assert abs(np.cos(f * t) - 1) > 0.01                   # a real rotation was checked
    ctx.store.free()


def test_coriolis_averages_to_the_staggered_points(team):
    grid = Grid.uniform(12, 8, 3, 1200.0, 800.0, 300.0)
    rng = np.random.default_rng(0)
    u, v = rng.standard_normal((2, 12, 8, 3))
    ctx = make_ctx(team, grid, {"u": u, "v": v}, profiles={"ug": np.arange(3.0), "vg": -np.arange(3.0)})
    forcings.Coriolis({"fcor": 2e-4})(ctx)
    r = lambda a, s, ax: np.roll(a, s, axis=ax)
    v_u = 0.25 * (v + r(v, -1, 1) + r(v, 1, 0) + r(r(v, 1, 0), -1, 1))
    u_v = 0.25 * (u + r(u, -1, 0) + r(u, 1, 1) + r(r(u, -1, 0), 1, 1))
    np.testing.assert_allclose(gather_interior(ctx, ctx.tend["u"]), 2e-4 * (v_u + np.arange(3.0)), atol=1e-15)
    np.testing.assert_allclose(gather_interior(ctx, ctx.tend["v"]), -2e-4 * (u_v - np.arange(3.0)), atol=1e-15)
    ctx.store.free()


def _subs(team, zh, s_of_z, wls):
    grid = Grid.stretched(12, 8, 1200.0, 800.0, zh)
    s = np.broadcast_to(s_of_z(grid.zf), (12, 8, grid.nz)).copy()
    ctx = make_ctx(team, grid, {"thl": s, "qt": s, "u": s}, profiles={"wfls": wls(grid.zf)})
    forcings.Subsidence()(ctx)
    out = interior(ctx, ctx.tend["thl"])[0, 0]
    assert np.array_equal(interior(ctx, ctx.tend["qt"])[0, 0], out)
    assert not np.any(ctx.tend["u"])                      # momentum is not subsided by default
    ctx.store.free()
    return grid, out


def test_subsidence_of_a_linear_profile_is_exact(team):
    zh = np.concatenate([[0.0], np.cumsum(np.linspace(20, 80, 16))])
    wls = lambda z: np.where(z < 500, -0.0065 * z / 500, 0.002)          # sinking below, rising above
    grid, out = _subs(team, zh, lambda z: 300 + 0.004 * z, wls)
    expect = -wls(grid.zf) * 0.004
    expect[-1] = 0.0 if wls(grid.zf[-1]) < 0 else expect[-1]
    assert out[0] == pytest.approx(expect[0], rel=1e-12)
    np.testing.assert_allclose(out, expect, rtol=1e-10, atol=1e-18)


def test_subsidence_is_first_order_upwind_for_a_smooth_profile(team):
    errs = []
    for nz in (20, 40, 80):
        zh = np.linspace(0, 2000, nz + 1)
        grid, out = _subs(team, zh, lambda z: np.sin(z / 400.0), lambda z: -0.005 + 0 * z)
        k = slice(nz // 4, 3 * nz // 4)                   # away from the walls
        exact = 0.005 * np.cos(grid.zf / 400.0) / 400.0
        errs.append(np.abs(out[k] - exact[k]).max())
        # upwind from above, written out independently
        dz = 2000 / nz
        np.testing.assert_allclose(out[:-1], 0.005 * np.diff(np.sin(grid.zf / 400.0)) / dz, rtol=1e-12)
    order = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all((order > 0.9) & (order < 1.1)), errs


def test_prescribed_tendencies(team):
    grid = Grid.uniform(12, 8, 5, 1200.0, 800.0, 500.0)
    z = np.zeros((12, 8, 5))
    prof = {"dthlrad": np.linspace(-2, 0, 5) / 86400, "dqtdt": np.linspace(-1.2e-8, 0, 5)}
    ctx = make_ctx(team, grid, {"thl": z, "qt": z}, profiles=prof)
    forcings.PrescribedTendencies()(ctx)
    np.testing.assert_array_equal(gather_interior(ctx, ctx.tend["thl"]), np.broadcast_to(prof["dthlrad"], z.shape))
    np.testing.assert_array_equal(gather_interior(ctx, ctx.tend["qt"]), np.broadcast_to(prof["dqtdt"], z.shape))
    ctx.store.free()
