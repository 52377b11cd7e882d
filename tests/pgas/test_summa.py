"""SUMMA ``pgas.matmul`` against NumPy: matching layouts, mixed layouts (redistribution), uneven and
degenerate shapes, process grids chosen and given, ``out``, panel widths; and the panel split."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKCYCLIC as BC, BLOCKED, CYCLIC, NONE, TILE
from hpcsuite.pgas.dist import DimMap
from hpcsuite.pgas.summa import panels


def dense(shape, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-9, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def dist_array(ref, dist, grid):
    return pgas.from_numpy(ref, dist=dist, root=None, grid=grid)


def assert_product(C, ref, rtol=1e-12):
    got = C.to_numpy()
    assert got.shape == ref.shape
    scale = np.linalg.norm(ref)
    err = np.linalg.norm(got - ref)
    assert err <= rtol * max(scale, 1.0), f"relative error {err / max(scale, 1.0):.3g}"


def g(team, kind):
    """Process grids: automatic, all ranks down the rows, all ranks along the columns."""
    return {"auto": (0, 0), "rows": (team.size, 1), "cols": (1, team.size)}[kind]


# ---------------------------------------------------------------------- panel split (serial)
SPECS = st.one_of(st.just(BLOCKED), st.just(NONE), st.integers(1, 6).map(BC))


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 60), sa=SPECS, sb=SPECS, pa=st.integers(1, 7), pb=st.integers(1, 7),
       width=st.integers(1, 20))
def test_panels_cover_k_once_grouped_by_owner_pair(n, sa, sb, pa, pb, width):
    pa = 1 if sa.kind == "none" else pa
    pb = 1 if sb.kind == "none" else pb
    am, bm = DimMap(sa, n, pa), DimMap(sb, n, pb)
    seen = np.zeros(n, dtype=int)
    count = 0
    for ca, ia, rb, ib, w in panels(am, bm, width):
        la, lb = np.arange(am.size(ca))[ia], np.arange(bm.size(rb))[ib]
        assert 1 <= w <= width and la.size == lb.size == w
        ka = am.glob(ca, la)                     # the panel's inner indices, via A ...
        assert np.array_equal(ka, bm.glob(rb, lb))       # ... and via B, in the same order
        assert np.all(np.diff(ka) > 0)
        if isinstance(ia, slice) and isinstance(ib, slice):
            assert ia.stop - ia.start == w and ib.stop - ib.start == w
        seen[ka] += 1
        count += 1
    assert np.all(seen == 1)
    # one panel per `width` indices of each owner pair: never more than needed
    k = np.arange(n)
    owners = (np.broadcast_to(m.owner(k), k.shape).tolist() for m in (am, bm))
    pairs = Counter(zip(*owners))
    assert count == sum(-(-c // width) for c in pairs.values())


# ---------------------------------------------------------------------- layouts
@pytest.fixture
def copies(monkeypatch):
    """The redistributions matmul makes (calls of pgas.copy from inside summa)."""
    from hpcsuite.pgas import summa
    calls, real = [], summa.copy

    def spy(src, dst):
        calls.append((src.dist, dst.dist))
        real(src, dst)
    monkeypatch.setattr(summa, "copy", spy)
    return calls


# (id, A dist, A grid, B dist, B grid, whether the default product redistributes at > 1 rank,
#  further products into `out` arrays: (dist, grid, dtype, whether that redistributes at > 1 rank))
LAYOUTS = [
    ("blocked-auto", (BLOCKED, BLOCKED), "auto", (BLOCKED, BLOCKED), "auto", False,
     [((CYCLIC, BLOCKED), "rows", np.float64, True)]),
    ("bc2-cols", (BC(2), BC(2)), "cols", (BC(2), BC(2)), "cols", False, []),
    ("bc3-auto", (BC(3), BC(3)), "auto", (BC(3), BC(3)), "auto", False,
     [((BC(3), BC(3)), "auto", np.float64, False)]),
    ("bc4-rows", (BC(4), BC(4)), "rows", (BC(4), BC(4)), "rows", False,
     [((BLOCKED, NONE), "rows", np.float32, True)]),
    ("bc5xbc2-auto", (BC(5), BC(2)), "auto", (BC(5), BC(2)), "auto", False, []),
    ("rows-x-cols", (BLOCKED, NONE), "rows", (NONE, BLOCKED), "cols", True,
     [((BC(2), BC(3)), "auto", np.float64, True)]),
    ("tile", (TILE(4), TILE(4)), "auto", (BC(4), BC(5)), "auto", True,
     [((TILE(4), TILE(5)), "auto", np.float64, True)]),
]


def check_copies(team, copies, redistributes):
    if not redistributes:
        assert copies == [], copies              # matching layouts are used in place
    elif team.size > 1:
        assert copies, "expected a redistribution"
    copies.clear()


@pytest.mark.mpi
@pytest.mark.parametrize("case", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_matmul_layouts(team, copies, case):
    name, da, ga, db, gb, redistributes, outs = case
    m, k, n = (36, 24, 20) if name == "tile" else (37, 23, 19)
    a, b = dense((m, k), 1), dense((k, n), 2)
    A, B = dist_array(a, da, g(team, ga)), dist_array(b, db, g(team, gb))
    live = pgas.live_segments()
    C = pgas.matmul(A, B, panel=5)
    assert pgas.live_segments() == live + 1          # temporaries, if any, are freed
    check_copies(team, copies, redistributes or name == "tile")
    # C takes A's rows and B's columns on A's grid
    rows = DimMap(BC(4) if name == "tile" else da[0], m, A.grid[0])
    cols = DimMap(db[1] if db[1] != NONE or A.grid[1] == 1 else BLOCKED, n, A.grid[1])
    assert C.grid == A.grid and C.pattern.maps[0].same_as(rows) and C.pattern.maps[1].same_as(cols)
    assert C.dtype == np.float64
    assert_product(C, a @ b)
    C.free()
    for dist, grid, dtype, redistributes in outs:
        O = pgas.zeros((m, n), dtype=dtype, dist=dist, grid=g(team, grid))
        assert pgas.matmul(A, B, out=O) is O
        assert pgas.live_segments() == live + 1
        check_copies(team, copies, redistributes)
        assert_product(O, a @ b, rtol=1e-6 if dtype == np.float32 else 1e-12)
        O.free()
    A.free()
    B.free()


# ---------------------------------------------------------------------- shapes and grids
EDGES = [
    ((1, 23), (23, 19), (BLOCKED, BLOCKED), "auto"),
    ((37, 23), (23, 1), (BC(2), BC(3)), "rows"),
    ((37, 1), (1, 19), (BLOCKED, BLOCKED), "cols"),
    ((3, 0), (0, 4), (BLOCKED, BLOCKED), "auto"),
    ((0, 5), (5, 3), (BC(2), BLOCKED), "rows"),
]


@pytest.mark.mpi
@pytest.mark.parametrize("sa,sb,dist,grid", EDGES, ids=[f"{a[0]}x{a[1]}x{b[1]}-{k}" for a, b, _, k in EDGES])
def test_matmul_shapes(team, sa, sb, dist, grid):
    a, b = dense(sa, 5), dense(sb, 6)
    A, B = dist_array(a, dist, g(team, grid)), dist_array(b, dist, g(team, grid))
    C = pgas.matmul(A, B, panel=2)
    assert C.shape == (sa[0], sb[1])
    assert_product(C, a @ b)
    for x in (A, B, C):
        x.free()


@pytest.mark.mpi
def test_matmul_panel_widths_integers_and_aliasing(team):
    a, b = dense((12, 12), 7, np.int64), dense((12, 12), 8, np.int64)
    A = dist_array(a, (BLOCKED, BLOCKED), (0, 0))
    B = dist_array(b, (BC(2), BC(2)), (0, 0))
    C = pgas.zeros((12, 12), dtype=np.int64, dist=(BLOCKED, BC(2)), grid=(0, 0))
    for width in (1, 3, 64):
        pgas.matmul(A, B, out=C, panel=width)
        assert np.array_equal(C.to_numpy(), a @ b)          # integers: exact
    pgas.matmul(A, B, out=A)                                  # out may alias an input
    assert np.array_equal(A.to_numpy(), a @ b)
    for x in (A, B, C):
        x.free()


@pytest.mark.mpi
def test_matmul_argument_errors(team):
    kw = dict(dist=(BLOCKED, BLOCKED), grid=(0, 0))
    A, B2 = pgas.zeros((4, 3), **kw), pgas.zeros((3, 5), **kw)
    v, wrong = pgas.zeros(3), pgas.zeros((5, 4), **kw)
    int_out = pgas.zeros((4, 5), dtype=np.int64, **kw)
    live = pgas.live_segments()
    with pytest.raises(ValueError, match=r"inner dimensions differ: A is 4x3, B is 4x3"):
        pgas.matmul(A, A)
    with pytest.raises(ValueError, match="2-D"):
        pgas.matmul(A, v)
    with pytest.raises(ValueError, match="DistArray"):
        pgas.matmul(A, np.zeros((3, 5)))
    with pytest.raises(ValueError, match=r"out has shape \(5, 4\), the product is 4x5"):
        pgas.matmul(A, B2, out=wrong)
    with pytest.raises(ValueError, match="cannot store the float64 product"):
        pgas.matmul(A, B2, out=int_out)
    for p in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="panel"):
            pgas.matmul(A, B2, panel=p)
    assert pgas.live_segments() == live          # refused before allocating anything
    if team.size > 1:
        half = team.split(team.rank % 2)         # other ranks: refused
        Bh = pgas.zeros((3, 5), team=half)
        with pytest.raises(ValueError, match="same team"):
            pgas.matmul(A, Bh)
        Bh.free()
        half.free()
    for x in (B2, v, wrong, int_out):
        x.free()
    A.free()
    with pytest.raises(RuntimeError, match="freed"):
        pgas.matmul(A, B2)
