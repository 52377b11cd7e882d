"""The fused numba kernels give exactly the array-API operators' results (same operations, same
order), for every variant the model uses: diffusivity as a field or a constant, with and without a
surface flux, on a stretched vertical grid."""
import numpy as np
import pytest

from hpcsuite.les import subgrid
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
    fused = op(s, fb)
    try:
        subgrid.FUSED = False
        ref = op(s, fb)
    finally:
        subgrid.FUSED = True
    assert fused.shape == ref.shape == (nx - 2, ny - 2, nz)
    assert np.array_equal(fused, ref)
    assert np.array_equal(scalar_diffusion(s, op.kx, op.ky, op.kz, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2, fb),
                          ref)


@pytest.mark.mpi
def test_model_steps_are_bit_identical_with_and_without_the_fused_kernels(team):
    """Whole RK3 steps of the BOMEX-like case (TKE closure: scalar and momentum diffusion with a
    field diffusivity, surface fluxes, stretched-free uniform grid) from the same state."""
    from hpcsuite.les.model import bomex_like
    fields = {}
    for fused in (True, False):
        subgrid.FUSED = fused
        try:
            m = bomex_like((12, 10, 9), team, scheme="5th")
            for _ in range(3):
                m.step()
            fields[fused] = {n: f.copy() for n, f in m.ctx.fields.items()}
            m.free()
        finally:
            subgrid.FUSED = True
    for n in fields[True]:
        assert np.array_equal(fields[True][n], fields[False][n]), n
