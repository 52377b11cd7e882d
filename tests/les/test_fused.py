"""The fused numba kernels give exactly the array-API operators' results (same operations, same
order), for every variant the model uses: diffusivity as a field or a constant, with and without a
surface flux, on a stretched vertical grid."""
import numpy as np
import pytest

from hpcsuite.les import ops, subgrid
from hpcsuite.les.fused import scalar_diffusion


class _Geo:
    def __init__(self, nz, rng):
        self.dx, self.dy = 50.0, 37.5
        self.dzf = rng.uniform(20.0, 60.0, nz)
        self.dzh = np.concatenate(([self.dzf[0]], 0.5 * (self.dzf[1:] + self.dzf[:-1]), [self.dzf[-1]]))
        self.xp = np


@pytest.mark.parametrize("constant", [False, True], ids=["K-field", "K-constant"])
@pytest.mark.parametrize("flux", [False, True], ids=["no-flux", "surface-flux"])
def test_scalar_diffusion_is_bit_identical_to_the_array_api_source(constant, flux):
    rng = np.random.default_rng(3)
    nx, ny, nz = 11, 9, 7
    geo = _Geo(nz, rng)
    s = rng.standard_normal((nx, ny, nz))
    K = 0.7 if constant else rng.uniform(0.1, 2.0, (nx, ny, nz))
    fb = rng.standard_normal((nx, ny)) * 0.01 if flux else None
    op = subgrid.ScalarDiffusion(np, K, geo)
    one_pass = op(s, fb)
    with ops.using("reference"):
        plain = subgrid.ScalarDiffusion(np, K, geo)      # its face diffusivities from NumPy too
        ref = plain(s, fb)
    assert one_pass.shape == ref.shape == (nx - 2, ny - 2, nz)
    assert np.array_equal(one_pass, ref)
    if not constant:
        assert all(np.array_equal(f, p) for f, p in zip(op.faces, plain.faces))
    assert np.array_equal(scalar_diffusion(s, *op.faces, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2, fb),
                          ref)


def _stir(m, shape):
    """Add a random 3-D velocity field (the same global field at every rank count), so that every
    velocity component and every term of the strain rate is nonzero from the first step: a
    reassociated sum of squares then changes some bits (with BOMEX's initial v = w = 0 it did
    not)."""
    ctx, lg = m.ctx, m.ctx.grid
    nx, ny, nz = shape
    rng = np.random.default_rng(11)
    ix = np.arange(lg.i0 - lg.h, lg.i0 + lg.nxl + lg.h) % nx
    iy = np.arange(lg.j0 - lg.h, lg.j0 + lg.nyl + lg.h) % ny
    for name, levels in (("u", slice(0, nz)), ("v", slice(0, nz)), ("w", slice(1, nz))):
        kick = rng.uniform(-0.5, 0.5, (nx, ny, nz))[np.ix_(ix, iy)]
        ctx.fields[name][:, :, levels] += kick[:, :, :levels.stop - levels.start]
    m.update_halos()


@pytest.mark.mpi
@pytest.mark.parametrize("scheme,stretched", [("5th", False), ("2nd", True), ("5th", True)],
                         ids=["5th-uniform", "2nd-stretched", "5th-stretched"])
def test_model_steps_are_bit_identical_with_and_without_the_fused_kernels(team, monkeypatch, scheme, stretched):
    """Whole RK3 steps of the BOMEX-like case (advection of every field, w included, with the
    vertical 5th-order stencil falling back to 3rd and to the stretched 2nd order at the ends; TKE
    closure: scalar and momentum diffusion with a field diffusivity, surface fluxes), uniform or
    stretched in z, from the same state."""
    from hpcsuite.les.grid import Grid
    from hpcsuite.les.model import bomex_like
    if stretched:                        # the same case on layers thickening with height
        def uniform(nx, ny, nz, xsize, ysize, zsize):
            dz = np.linspace(1.0, 2.0, nz)
            return Grid.stretched(nx, ny, xsize, ysize, np.concatenate(([0.0], np.cumsum(dz * zsize / dz.sum()))))
        monkeypatch.setattr(Grid, "uniform", uniform)
    fields = {}
    for on in (True, False):
        ops.select(None if on else "reference")
        try:
            m = bomex_like((12, 10, 9), team, scheme=scheme)
            _stir(m, (12, 10, 9))
            for _ in range(3):
                m.step()
            fields[on] = {n: f.copy() for n, f in m.ctx.fields.items()}
            m.free()
        finally:
            ops.select(None)
    for n in fields[True]:
        assert np.array_equal(fields[True][n], fields[False][n]), n


@pytest.mark.mpi
def test_forcings_are_bit_identical_with_and_without_the_fused_kernels(team):
    """Coriolis and subsidence alone, with large-scale ascent and descent at random levels (BOMEX
    only has descent, so the upwind branch from below would go untested by whole steps)."""
    from hpcsuite.les import forcings
    from hpcsuite.les.model import bomex_like
    m = bomex_like((12, 10, 9), team)
    try:
        _stir(m, (12, 10, 9))
        ctx = m.ctx
        rng = np.random.default_rng(7)
        ctx.profiles["wfls"] = rng.uniform(-0.01, 0.01, 9)
        ctx.profiles["ug"] = rng.uniform(-10.0, 0.0, 9)
        # (small, as the forcings are: a large start would round their last bits away)
        start = {n: 1e-7 * rng.standard_normal(t.shape) for n, t in ctx.tend.items()}
        out = {}
        for on in (True, False):
            ops.select(None if on else "reference")
            try:
                for n, t in ctx.tend.items():
                    t[...] = start[n]
                forcings.Subsidence(names=("thl", "qt", "u"))(ctx)
                forcings.Coriolis({"lat": 15.0})(ctx)
                out[on] = {n: t.copy() for n, t in ctx.tend.items()}
            finally:
                ops.select(None)
        for n in out[True]:
            assert np.array_equal(out[True][n], out[False][n]), n
        assert not np.array_equal(out[True]["thl"], start["thl"])
    finally:
        m.free()


def test_moist_thermodynamics_are_bit_identical_to_the_array_api_source():
    """The moist state's numba implementation (numba arithmetic around NumPy's own exp) against
    saturation_adjust + virtual_theta, on blocks where about half the points are saturated and
    many sit at the saturation threshold (to the last bit)."""
    from hpcsuite.les import thermo
    rng = np.random.default_rng(5)
    nz = 40
    p = np.linspace(101500.0, 70000.0, nz)
    exn = (p / thermo.P0) ** (thermo.RD / thermo.CP)
    thl = 298.0 + np.linspace(0.0, 12.0, nz) + rng.uniform(-1.0, 1.0, (9, 7, nz))
    qt = rng.uniform(0.005, 0.022, (9, 7, nz))
    # a third of the points within 1e-12 .. 1e-8 (relative) of saturation, either side: a mask
    # that rounds qsat differently by a few units in the last place flips some of them
    near = rng.random(qt.shape) < 0.33
    qs = thermo.qsat(np, exn * thl, p)
    qt[near] = (qs * (1.0 + rng.choice([-1.0, 1.0], qt.shape) * 10.0 ** rng.uniform(-12, -8, qt.shape)))[near]
    # and a fifth exactly at qsat or one unit in the last place away: a qsat rounded differently
    # anywhere flips some of these
    exact = rng.random(qt.shape) < 0.2
    step = rng.integers(-1, 2, qt.shape)
    at = np.where(step > 0, np.nextafter(qs, np.inf), np.where(step < 0, np.nextafter(qs, -np.inf), qs))
    qt[exact] = at[exact]
    numba = next(i for i in ops.OPERATORS["moist_state"].implementations if i.backend == "numba")
    ql, T, thv = numba.function(np, thl, qt, p, exn)
    ql0, T0 = thermo.saturation_adjust(np, thl, qt, p, exn)
    thv0 = thermo.virtual_theta(thl, qt, ql0, exn)
    assert 0.2 < np.mean(ql0 > 0) < 0.8
    assert np.array_equal(ql, ql0) and np.array_equal(T, T0) and np.array_equal(thv, thv0)
