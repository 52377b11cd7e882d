"""Subgrid diffusion against independent references: exact discrete eigenvalues of the Laplacian,
the stress form equal to the Laplacian on discretely divergence-free flow (built from a vector
potential), the Smagorinsky and TKE formulas on simple shears, and conservation / surface-flux
budgets on the gathered global fields at 1-4 ranks."""
import numpy as np
import pytest

from physctx import coords, gather_interior, make_ctx
from hpcsuite.les import subgrid, surface, thermo
from hpcsuite.les.grid import Grid
from hpcsuite.runtime import InputError


def stretched_grid(nx=12, ny=8, nz=10, lx=1200.0, ly=1000.0):
    zh = np.cumsum(np.concatenate([[0.0], np.linspace(20.0, 60.0, nz)]))
    return Grid.stretched(nx, ny, lx, ly, zh)


def test_constant_viscosity_decays_sines_at_the_discrete_rate(team):
    grid = Grid.uniform(16, 12, 8, 1600.0, 600.0, 400.0)
    xc, yc, zc, xu, yv, zw = coords(grid)
    nu, kap = 3.0, 5.0
    kx, ky, H = 2 * np.pi / 1600.0, 2 * 2 * np.pi / 600.0, 400.0
    dx, dy, dz = grid.dx, grid.dy, 50.0
    lam = lambda k, d: 4.0 / d ** 2 * np.sin(k * d / 2) ** 2          # discrete eigenvalues
    s = np.sin(kx * xc)[:, None, None] * np.cos(np.pi * zc / H)[None, None, :] * np.ones((1, 12, 1))
    u = np.sin(ky * yc)[None, :, None] * np.ones((16, 1, 8))
    w = np.sin(kx * xc)[:, None, None] * np.sin(np.pi * zw / H)[None, None, :] * np.ones((1, 12, 1))
    ctx = make_ctx(team, grid, {"u": u, "v": np.zeros_like(u), "w": w, "thl": s})
    subgrid.ConstantViscosity(nu, kap)(ctx)
    lam_s = lam(kx, dx) + lam(np.pi / H, dz)
    np.testing.assert_allclose(gather_interior(ctx, ctx.tend["thl"]), -kap * lam_s * s, atol=1e-15)
    np.testing.assert_allclose(gather_interior(ctx, ctx.tend["u"]), -nu * lam(ky, dy) * u, atol=1e-15)
    np.testing.assert_allclose(gather_interior(ctx, ctx.tend["w"]), -nu * lam_s * w, atol=1e-15)
    # time integration (forward Euler): the discrete factor, and close to the continuous decay
    dt, n = 20.0, 50
    for _ in range(n):
        ctx.zero_tendencies()
        subgrid.ConstantViscosity(nu, kap)(ctx)
        ctx.fields["thl"][...] += dt * ctx.tend["thl"]
        ctx.update_halo(ctx.fields["thl"])
    out = gather_interior(ctx, ctx.fields["thl"])
    np.testing.assert_allclose(out, (1 - dt * kap * lam_s) ** n * s, atol=1e-13)
    exact = np.exp(-kap * (kx ** 2 + (np.pi / H) ** 2) * n * dt)
    assert abs(np.abs(out).max() / np.abs(s).max() - exact) < 2e-2 * exact
    ctx.store.free()


def _div_free(grid, seed=0):
    """u, v, w = discrete curl of a smooth vector potential: divergence-free to rounding."""
    rng = np.random.default_rng(seed)
    xc, yc, zc, xu, yv, zw = coords(grid)
    X, Y = 2 * np.pi / grid.xsize, 2 * np.pi / grid.ysize
    H = grid.zsize
    ph = rng.uniform(0, 2 * np.pi, 6)
    Az = 500 * np.sin(X * xu + ph[0])[:, None, None] * np.cos(2 * Y * yv + ph[1])[None, :, None] * (1 + zc / H)
    Ay = 500 * np.cos(2 * X * xu + ph[2])[:, None, None] * np.sin(Y * yc + ph[3])[None, :, None] * np.sin(np.pi * zw / H)
    Ax = 500 * np.sin(X * xc + ph[4])[:, None, None] * np.sin(Y * yv + ph[5])[None, :, None] * np.sin(2 * np.pi * zw / H)
    dzf = grid.dzf
    xp1 = lambda a: np.roll(a, -1, axis=0)
    yp1 = lambda a: np.roll(a, -1, axis=1)
    u = (yp1(Az) - Az) / grid.dy - (Ay[..., 1:] - Ay[..., :-1]) / dzf
    v = -(xp1(Az) - Az) / grid.dx + (Ax[..., 1:] - Ax[..., :-1]) / dzf
    w = (xp1(Ay) - Ay) / grid.dx - (yp1(Ax) - Ax) / grid.dy
    div = ((xp1(u) - u) / grid.dx + (yp1(v) - v) / grid.dy + (w[..., 1:] - w[..., :-1]) / dzf)
    assert np.abs(div).max() < 1e-13 * np.abs(u).max() / grid.dx
    return u, v, w


def test_stress_form_equals_laplacian_on_divergence_free_flow(team):
    grid = stretched_grid()
    u, v, w = _div_free(grid)
    a = make_ctx(team, grid, {"u": u, "v": v, "w": w})
    b = make_ctx(team, grid, {"u": u, "v": v, "w": w})
    nu = 7.0
    subgrid.ConstantViscosity(nu)(a)
    geo = subgrid._Geo(b)
    ekm = np.full(b.fields["u"].shape, nu)
    subgrid.momentum_diffusion(b, geo, ekm, subgrid._edges(np, *(b.fields[n] for n in "uvw"), geo))
    for n in "uvw":
        ta, tb = gather_interior(a, a.tend[n]), gather_interior(b, b.tend[n])
        assert np.abs(ta).max() > 1e-4
        np.testing.assert_allclose(tb, ta, atol=1e-12 * np.abs(ta).max())
    a.store.free(); b.store.free()


def _shear_ctx(team, grid, a, along="z", e12=0.5, thl=None):
    xc, yc, zc, xu, yv, zw = coords(grid)
    nx, ny, nz = grid.nx, grid.ny, grid.nz
    u = np.broadcast_to(a * (zc[None, None, :] if along == "z" else yc[None, :, None]), (nx, ny, nz))
    fields = {"u": u, "v": np.zeros((nx, ny, nz)), "w": np.zeros((nx, ny, nz + 1)),
              "thl": np.full((nx, ny, nz), 300.0) if thl is None else thl,
              "e12": np.full((nx, ny, nz), e12)}
    ctx = make_ctx(team, grid, fields, base=thermo.base_state(grid, 1e5, 300.0, np.full(nz, 300.0), np.zeros(nz)))
    return ctx


def test_smagorinsky_viscosity_on_linear_shears(team):
    grid = Grid.uniform(12, 12, 8, 600.0, 600.0, 200.0)
    delta = (50.0 * 50.0 * 25.0) ** (1 / 3)
    for along, a in (("z", 0.01), ("y", -0.004)):
        ctx = _shear_ctx(team, grid, a, along)
        sm = subgrid.Smagorinsky({"cs": 0.2})
        geo = subgrid._Geo(ctx)
        edges = subgrid._edges(np, *(ctx.fields[n] for n in "uvw"), geo)
        ekm, ekh = sm.viscosity(ctx, geo, edges)
        expect = (0.2 * delta) ** 2 * abs(a)
        h = ctx.h
        if along == "z":
            inner = ekm[h:-h, h:-h, 1:-1]          # away from the surface and the lid (free slip)
        else:                       # u = a y jumps where y wraps around: check rows away from it
            j0 = ctx.grid.j0
            rows = [j - j0 + h for j in range(2, 10) if 0 <= j - j0 < ctx.grid.nyl]
            inner = ekm[h:-h, rows, :]
        assert inner.size and np.allclose(inner, expect, rtol=1e-12)
        np.testing.assert_allclose(ekh[h:-h, h:-h], 3 * ekm[h:-h, h:-h], rtol=1e-14)
        ctx.store.free()


def test_tke_shear_buoyancy_and_dissipation_terms(team):
    grid = Grid.uniform(12, 12, 8, 600.0, 600.0, 200.0)
    delta = (50.0 * 50.0 * 25.0) ** (1 / 3)
    a, e12 = 0.02, 0.3
    zc = grid.zf
    # neutral: l = Delta, ekm = cm Delta e12, ekh = 3 ekm
    ctx = _shear_ctx(team, grid, a, "z", e12)
    tke = subgrid.SubgridTKE()
    thermo.DryThermo()(ctx)
    tke(ctx)
    h = ctx.h
    ekm = ctx.diag["ekm"][h:-h, h:-h]
    np.testing.assert_allclose(ekm, 0.12 * delta * e12, rtol=1e-13)
    np.testing.assert_allclose(ctx.diag["ekh"][h:-h, h:-h], 3 * ekm, rtol=1e-13)
    bud = ctx.diag["tke_budget"]
    shear = bud["shear"][h:-h, h:-h, 1:-1]
    np.testing.assert_allclose(shear, 0.12 * delta * e12 * a ** 2 / (2 * e12), rtol=1e-12)
    assert np.all(shear > 0)
    np.testing.assert_allclose(bud["dissipation"][h:-h, h:-h], -(0.19 + 0.51) * e12 ** 2 / (2 * delta), rtol=1e-13)
    assert not np.any(bud["buoyancy"][h:-h, h:-h])
    ctx.store.free()
    # stable: dthv/dz = 0.01 K/m -> l = min(Delta, cn e12 / N), buoyancy destroys TKE
    thl = np.broadcast_to(300.0 + 0.01 * zc, (12, 12, 8)).copy()
    ctx = _shear_ctx(team, grid, a, "z", e12, thl=thl)
    thermo.DryThermo()(ctx)
    tke(ctx)
    N = np.sqrt(9.81 / (300.0 + 0.01 * zc) * 0.01)
    l = np.minimum(delta, 0.76 * e12 / N)
    assert np.all(l < delta)
    ekm = 0.12 * l * e12
    np.testing.assert_allclose(ctx.diag["ekm"][h:-h, h:-h], np.broadcast_to(ekm, (ctx.grid.nxl, ctx.grid.nyl, 8)), rtol=1e-12)
    ekh = (1 + 2 * l / delta) * ekm
    buoy = ctx.diag["tke_budget"]["buoyancy"][h:-h, h:-h]
    np.testing.assert_allclose(buoy, np.broadcast_to(-ekh * N ** 2 / (2 * e12), buoy.shape), rtol=1e-10)
    ctx.store.free()


@pytest.mark.mpi
@pytest.mark.parametrize("closure", ["tke", "smag", "const"])
def test_conservation_and_surface_flux_budget(team, closure):
    grid = stretched_grid()
    rng = np.random.default_rng(5)
    nx, ny, nz = grid.nx, grid.ny, grid.nz
    u, v, w = _div_free(grid, 1)
    thl = 300 + 0.004 * grid.zf + 0.5 * rng.standard_normal((nx, ny, nz))
    qt = 0.015 + 1e-3 * rng.standard_normal((nx, ny, nz))
    e12 = 0.2 + 0.3 * rng.random((nx, ny, nz))
    u, v, w = 0.2 * u, 0.2 * v, 0.2 * w
    fields = {"u": 5 + u, "v": -2 + v, "w": w, "thl": thl, "qt": qt, "e12": e12}
    base = thermo.base_state(grid, 1e5, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    term = {"tke": subgrid.SubgridTKE(), "smag": subgrid.Smagorinsky(),
            "const": subgrid.ConstantViscosity(4.0, 6.0)}[closure]
    cell = grid.dx * grid.dy * grid.dzf
    area = grid.xsize * grid.ysize
    for flux in (None, {"wthl": 0.08, "wqt": 5.2e-5, "ustar": 0.28}):
        ctx = make_ctx(team, grid, fields, base=base)
        thermo.DryThermo({"buoyancy": False})(ctx)
        if flux:
            surface.PrescribedSurface(flux)(ctx)
        term(ctx)
        tot = {n: (gather_interior(ctx, ctx.tend[n]) * cell).sum() for n in ("thl", "qt", "u", "v")}
        scale = {n: np.abs(gather_interior(ctx, ctx.tend[n]) * cell).sum() for n in tot}
        assert min(scale.values()) > 0
        if flux is None:
            for n in tot:
                assert abs(tot[n]) < 1e-12 * scale[n], (n, tot[n], scale[n])
        else:
            assert tot["thl"] == pytest.approx(0.08 * area, rel=1e-11)
            assert tot["qt"] == pytest.approx(5.2e-5 * area, rel=1e-11)
            uw = gather_interior(ctx, ctx.diag["surface"]["uw"])
            vw = gather_interior(ctx, ctx.diag["surface"]["vw"])
            assert tot["u"] == pytest.approx(uw.sum() * grid.dx * grid.dy, rel=1e-11)
            assert tot["v"] == pytest.approx(vw.sum() * grid.dx * grid.dy, rel=1e-11)
            # an independent check of the drag law: u* ^2 u / |U| with |U| of the lowest level
            U = 5 + u[..., 0]
            assert uw.sum() == pytest.approx(-(0.28 ** 2) * (U / np.hypot(U, -2 + v[..., 0])).sum(), rel=2e-2)
            assert np.all(uw < 0) and np.all(vw > 0)
        if closure == "tke":       # the TKE diffusion alone conserves e12: remove the sources
            b = ctx.diag["tke_budget"]
            src = gather_interior(ctx, b["shear"] + b["buoyancy"] + b["dissipation"])
            diff = gather_interior(ctx, ctx.tend["e12"]) - src
            assert abs((diff * cell).sum()) < 1e-12 * np.abs(diff * cell).sum()
        ctx.store.free()


def test_bad_parameters():
    with pytest.raises(InputError, match="nu"):
        subgrid.ConstantViscosity(-1.0)
    with pytest.raises(InputError, match="cs"):
        subgrid.Smagorinsky({"cs": 0})
    with pytest.raises(InputError, match="cm"):
        subgrid.SubgridTKE({"cm": -0.1})
    with pytest.raises(InputError, match="ustar"):
        surface.PrescribedSurface({"ustar": -1})
