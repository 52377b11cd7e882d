"""The FFT/tridiagonal Poisson solver against a sparse direct solve of the same discrete operator
(SciPy on the gathered field), and the pressure projection leaving a divergence at rounding level,
on uniform and stretched vertical grids at 1-4 ranks."""
import numpy as np
import pytest
import scipy.sparse.linalg as spla

from hpcsuite.les.grid import Grid
from hpcsuite.les.pressure import PressureProjection
from hpcsuite.les.state import FieldStore, StepContext
from hpcsuite.solvers.poisson import PoissonFFT, pencil_grid
from lesref import gather, global_divergence, laplacian_matrix, put_global, stretched_zh

NX, NY, NZ = 16, 12, 6


def grids():
    return [Grid.uniform(NX, NY, NZ, 2.0, 1.5, 1.0), Grid.stretched(NX, NY, 2.0, 1.5, stretched_zh(NZ))]


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["auto", "pencil"])
@pytest.mark.parametrize("which", [0, 1])
def test_poisson_matches_sparse_direct_solve(team, which, layout):
    g = grids()[which]
    rng = np.random.default_rng(7)
    f = rng.standard_normal((NX, NY, NZ))
    f -= (f * g.dzf).sum() / (g.dzf.sum() * NX * NY)   # solvable: zero volume-weighted mean
    store = FieldStore(g, team, ["u"])
    lg = store.grid
    solver = PoissonFFT((NX, NY, NZ), g.dx, g.dy, g.dzf, g.dzh, team, store.dims, layout=layout)
    if team.size > 1:
        assert solver.layout == ("slab" if layout == "auto" else "pencil")
    block = f[lg.i0:lg.i0 + lg.nxl, lg.j0:lg.j0 + lg.nyl]
    p = solver.solve(np.ascontiguousarray(block))
    full = np.zeros(lg.cell_shape)
    full[lg.interior] = p
    p = gather(team, lg, full)
    L = laplacian_matrix(NX, NY, NZ, g.dx, g.dy, g.zh).tolil()
    L[0, :] = 0.0
    L[0, 0] = 1.0                                      # pin one value (p is defined up to a constant)
    rhs = f.ravel().copy()
    rhs[0] = 0.0
    ref = spla.spsolve(L.tocsr(), rhs).reshape(f.shape)
    scale = np.abs(ref - ref.mean()).max()
    assert np.abs((p - p.mean()) - (ref - ref.mean())).max() < 1e-10 * scale
    solver.free()
    store.free()


@pytest.mark.mpi
@pytest.mark.parametrize("dims", [(0, 0), (1, 0)])
@pytest.mark.parametrize("which", [0, 1])
def test_projection_leaves_divergence_at_rounding_level(team, which, dims):
    g = grids()[which]
    rng = np.random.default_rng(3)
    U = {n: rng.standard_normal((NX, NY, NZ + (n == "w"))) for n in "uvw"}
    U["w"][..., 0] = U["w"][..., -1] = 0.0
    T = {n: rng.standard_normal(U[n].shape) for n in "uvw"}          # some tendencies
    store = FieldStore(g, team, ["u", "v", "w", "thl"], dims=dims)    # (1, P): whole x-lines
    lg = store.grid
    fields = store.locals()
    for n in "uvw":
        put_global(fields[n], lg, U[n])
    ctx = StepContext(lg, np, team, fields, store=store)
    ctx.start = {n: fields[n].copy() for n in fields}
    for n in "uvw":
        put_global(ctx.tend[n], lg, T[n])
    ctx.dt = 0.37
    before = global_divergence(*(U[n] + ctx.dt * T[n] for n in "uvw"), g.dx, g.dy, g.zh)
    PressureProjection(lg, team, store.dims)(ctx)
    new = {n: gather(team, lg, ctx.start[n] + ctx.dt * ctx.tend[n]) for n in "uvw"}
    after = global_divergence(new["u"], new["v"], new["w"], g.dx, g.dy, g.zh)
    assert np.abs(before).max() > 1.0
    assert np.abs(after).max() < 1e-12 * np.abs(before).max(), np.abs(after).max()
    assert np.all(new["w"][..., 0] == 0) and np.all(new["w"][..., -1] == 0)
    store.free()


def test_pencil_grid_fits_and_balances():
    assert pencil_grid(4, 12, 6) == (2, 2)
    assert pencil_grid(3, 12, 6) in ((3, 1), (1, 3))
    q1, q2 = pencil_grid(8, 16, 2)
    assert q1 * q2 == 8 and q2 <= 2
    with pytest.raises(ValueError, match="pencils"):
        pencil_grid(8, 2, 2)


def test_layout_choice():
    from hpcsuite.solvers.poisson import choose_layout
    assert choose_layout((16, 12, 6), (1, 1)) == ("serial", 0)
    assert choose_layout((16, 12, 6), (2, 1)) == ("slab", 1)       # blocks already hold whole y-lines
    assert choose_layout((16, 12, 6), (1, 4)) == ("slab", 0)
    assert choose_layout((16, 12, 6), (2, 2)) == ("slab", 0)
    assert choose_layout((8, 8, 64), (2, 8)) == ("pencil", 0)      # 16 ranks > 8 rows: no slabs
    with pytest.raises(ValueError):
        choose_layout((8, 8, 1), (2, 8))
