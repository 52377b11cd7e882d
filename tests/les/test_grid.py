"""The staggered grid (spacings as DALES defines them) and the distributed field store: block
layout over the process grid and periodic halo exchange (fields in place, other block-shaped
arrays through a scratch array), checked against index arithmetic at 1-4 ranks."""
import numpy as np
import pytest

from hpcsuite.les.grid import HALO, Grid
from hpcsuite.les.state import FieldStore, StepContext, process_grid
from lesref import stretched_zh


def test_uniform_grid_spacings():
    g = Grid.uniform(64, 32, 80, 6400.0, 3200.0, 3200.0)
    assert (g.dx, g.dy, g.nz, g.h) == (100.0, 100.0, 80, HALO)
    assert g.zh[0] == 0 and g.zh[-1] == 3200.0 and g.zf[0] == 20.0
    assert np.allclose(g.dzf, 40.0) and np.allclose(g.dzh, 40.0)
    assert g.cell_shape == (70, 38, 80) and g.w_shape == (70, 38, 81)


def test_stretched_grid_follows_the_contract():
    zh = stretched_zh(10, 1000.0)
    g = Grid.stretched(8, 8, 800.0, 800.0, zh)
    zf = 0.5 * (zh[1:] + zh[:-1])
    assert np.allclose(g.zf, zf) and np.allclose(g.dzf, np.diff(zh))
    assert np.allclose(g.dzh[1:10], np.diff(zf))
    assert g.dzh[0] == pytest.approx(2 * zf[0]) and g.dzh[10] == pytest.approx(2 * (zh[10] - zf[9]))
    assert not g.uniform_z


@pytest.mark.parametrize("bad", [dict(zh=[1.0, 2.0]), dict(zh=[0.0, 2.0, 1.0]), dict(nx=0)])
def test_bad_grids_are_rejected(bad):
    kw = dict(nx=4, ny=4, xsize=1.0, ysize=1.0, zh=[0.0, 1.0, 2.0]) | bad
    with pytest.raises(ValueError):
        Grid.stretched(**kw)


def test_process_grid_needs_blocks_as_wide_as_the_halo():
    assert process_grid(4, 16, 16) == (2, 2)
    with pytest.raises(ValueError, match="halo width 3"):
        process_grid(4, 8, 16, dims=(4, 1))


@pytest.mark.mpi
def test_blocks_tile_the_domain_and_halos_wrap(team):
    nx, ny, nz = 16, 12, 3
    store = FieldStore(Grid.uniform(nx, ny, nz, 1.0, 1.0, 1.0), team, ["u", "w", "thl"])
    g = store.grid
    cover = np.zeros((nx, ny), int)
    for i0, j0, a, b in team.allgather((g.i0, g.j0, g.nxl, g.nyl)):
        cover[i0:i0 + a, j0:j0 + b] += 1
    assert np.all(cover == 1)
    X = np.arange(g.i0 - 3, g.i0 + g.nxl + 3) % nx
    Y = np.arange(g.j0 - 3, g.j0 + g.nyl + 3) % ny
    ctx = StepContext(g, np, team, store.locals(), store=store)
    for name, levels in (("thl", nz), ("w", nz + 1)):
        ref = X[:, None, None] * 1000.0 + Y[None, :, None] + 0.25 * np.arange(levels)
        a = ctx.fields[name]
        a[...] = -1.0
        a[g.interior] = ref[g.interior]
        ctx.update_halo(a)
        assert np.array_equal(a, ref) and a is store.local(name)       # updated in place
    for shape in (g.cell_shape, g.cell_shape[:2]):                     # e.g. ekm, a surface flux
        ref = (X[:, None] * 1000.0 + Y[None, :]).reshape(shape[:2] + (1,) * (len(shape) - 2))
        ref = np.broadcast_to(ref, shape).copy()
        a = np.full(shape, -1.0)
        a[g.interior] = ref[g.interior]
        ctx.update_halo(a)
        assert np.array_equal(a, ref)
    # several at once (a field, two work arrays sharing one halo plan, a 2-D one, a non-contiguous
    # one), twice: the second call reuses the group made by the first
    refs = {"thl": X[:, None, None] * 1000.0 + Y[None, :, None] + 0.5 * np.arange(nz)}
    refs["t1"] = refs["thl"] + 0.125
    refs["t2"] = refs["thl"] - 7.0
    refs["flat"] = X[:, None] * 10.0 - Y[None, :]
    refs["strided"] = refs["thl"][:, :, ::-1].copy()
    arrays = {n: np.full(r.shape, -1.0) for n, r in refs.items() if n != "thl"}
    arrays["thl"] = ctx.fields["thl"]
    arrays["strided"] = np.full(refs["strided"].shape[::-1], -1.0).T       # (Fortran order)
    for call in range(2):
        for n, a in arrays.items():
            a[...] = -1.0
            a[g.interior] = refs[n][g.interior] + call
        ctx.update_halo(*arrays.values())
        for n, a in arrays.items():
            assert np.array_equal(a, refs[n] + call), (call, n)
    assert len(store._groups) == 1
    with pytest.raises(ValueError, match="does not fit"):
        ctx.update_halo(np.zeros((3, 3, 3)))
    store.free()
