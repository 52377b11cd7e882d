"""Prescribed surface fluxes against the drag law evaluated with NumPy on the global fields."""
import numpy as np
import pytest

from physctx import gather_interior, make_ctx
from hpcsuite.les import surface
from hpcsuite.les.grid import Grid


@pytest.mark.mpi
def test_momentum_flux_is_the_drag_law_on_the_staggered_points(team):
    grid = Grid.uniform(12, 8, 4, 1200.0, 800.0, 400.0)
    rng = np.random.default_rng(2)
    u = -6 + 2 * rng.standard_normal((12, 8, 4))
    v = 1 + 2 * rng.standard_normal((12, 8, 4))
    u[3, 3, 0], v[2:4, 3:5, 0] = 0.0, 0.0          # a calm u point: |U| bounded by 0.1 m/s
    cu, cv = -5.0, 0.5
    ctx = make_ctx(team, grid, {"u": u, "v": v})
    ctx.galilean = (cu, cv)
    surface.PrescribedSurface({"wthl": 8e-3, "wqt": 5.2e-5, "ustar": 0.28})(ctx)
    s = ctx.diag["surface"]
    U, V = u[..., 0] + cu, v[..., 0] + cv
    r = np.roll
    v_u = 0.25 * (V + r(V, -1, 1) + r(V, 1, 0) + r(r(V, 1, 0), -1, 1))       # v at u points
    u_v = 0.25 * (U + r(U, -1, 0) + r(U, 1, 1) + r(r(U, -1, 0), 1, 1))       # u at v points
    uw = -0.28 ** 2 * U / np.maximum(np.hypot(U, v_u), 0.1)
    vw = -0.28 ** 2 * V / np.maximum(np.hypot(u_v, V), 0.1)
    np.testing.assert_allclose(gather_interior(ctx, s["uw"]), uw, rtol=1e-14, atol=1e-17)
    np.testing.assert_allclose(gather_interior(ctx, s["vw"]), vw, rtol=1e-14, atol=1e-17)
    assert np.all(gather_interior(ctx, s["wthl"]) == 8e-3) and np.all(gather_interior(ctx, s["ustar"]) == 0.28)
    assert np.all(gather_interior(ctx, s["wqt"]) == 5.2e-5)
    ctx.store.free()


def test_no_friction_velocity_means_no_momentum_flux(team):
    grid = Grid.uniform(12, 8, 2, 1200.0, 800.0, 200.0)
    ctx = make_ctx(team, grid, {"u": np.full((12, 8, 2), 5.0), "v": np.full((12, 8, 2), 1.0)})
    surface.PrescribedSurface({"wthl": 0.1})(ctx)
    s = ctx.diag["surface"]
    assert not np.any(s["uw"]) and not np.any(s["vw"]) and not np.any(s["wqt"])
    assert s["wthl"].shape == ctx.fields["u"].shape[:2]
    ctx.store.free()
