"""Hypothesis strategies and helpers shared by the ``test_numpy_*`` tests: random shapes (uneven
and empty extents included), distributions (BLOCKED, CYCLIC, BLOCKCYCLIC, NONE, TILE), process
grids (chosen or given) and data, identical on every rank.

Hypothesis under MPI: every rank must draw the same examples, so the settings below derandomize
(a fixed seed), keep no example database, never shrink (a failing example fails alike on every
rank: every check compares arrays gathered onto every rank) and suppress the timing-based health
checks (timings differ between ranks).
"""
import itertools

import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from hpcsuite import pgas

B, C, N, BC, T = pgas.BLOCKED, pgas.CYCLIC, pgas.NONE, pgas.BLOCKCYCLIC, pgas.TILE
SPECS = (B, C, BC(2), BC(3), N)


def mpi_settings(n: int):
    """Settings for ``n`` examples (a third of them at 3 or more ranks, where every new array
    layout costs a window allocation among oversubscribed ranks) that behave alike on every rank."""
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_size() > 2:
        n = max(2, n // 3)
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck),
                    print_blob=False)


def factorizations(size: int, k: int):
    """Every ordered way to write ``size`` as a product of ``k`` positive factors."""
    divs = [d for d in range(1, size + 1) if size % d == 0]
    return [c for c in itertools.product(divs, repeat=k) if int(np.prod(c)) == size]


@st.composite
def layouts(draw, size: int, ndim=None, shape=None, max_side: int = 9, tile_ok: bool = True):
    """``(shape, dist, grid)``: ``grid`` None (chosen by MPI) or extents given per dimension."""
    nd = len(shape) if shape is not None else (ndim or draw(st.integers(1, 3)))
    if tile_ok and shape is None and draw(st.integers(0, 4)) == 0:
        tiles = [draw(st.integers(1, 3)) for _ in range(nd)]
        kinds = [draw(st.booleans()) for _ in range(nd)]
        kinds[0] = True
        dist = tuple(T(t) if k else N for t, k in zip(tiles, kinds))
        # (a NONE extent of 0 beside TILE breaks Pattern.local_to_storage: a tile of extent 0)
        shp = tuple(t * draw(st.integers(0, 3)) if k else draw(st.integers(1, max_side))
                    for t, k in zip(tiles, kinds))
    else:
        dist = [draw(st.sampled_from(SPECS)) for _ in range(nd)]
        shp = tuple(shape) if shape is not None else tuple(draw(st.integers(0, max_side)) for _ in range(nd))
        if all(s.kind == "none" for s in dist) and size > 1:
            dist[draw(st.integers(0, nd - 1))] = B
        dist = tuple(dist)
    distributed = [d for d, s in enumerate(dist) if s.kind != "none"]
    grid = None
    if distributed and draw(st.booleans()):
        f = draw(st.sampled_from(factorizations(size, len(distributed))))
        g = [1] * nd
        for d, e in zip(distributed, f):
            g[d] = e
        grid = tuple(g)
    return shp, dist, grid


DTYPES = (np.float64, np.float32, np.int64, np.int32, np.bool_)


def data(shape, dtype, seed: int, low=-9, high=9, nan=False):
    """Random values of ``dtype`` (the same on every rank for the same seed)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(max(low, 0) if dt.kind == "u" else low, high + 1, size=shape).astype(dt)
    x = rng.uniform(low, high, size=shape)
    if dt.kind == "c":
        x = x + 1j * rng.uniform(low, high, size=shape)
    x = x.astype(dt)
    if nan and x.size and rng.random() < 0.5:
        x.flat[rng.integers(0, x.size)] = np.nan
    return x


def dist_array(ref, layout):
    """A DistArray holding ``ref`` in ``layout`` (each rank takes its part, no communication)."""
    shape, dist, grid = layout
    return pgas.from_numpy(ref, dist=dist, grid=grid, root=None)


def gathered(x):
    """A DistArray gathered onto every rank; anything else as a NumPy value."""
    return x.to_numpy() if isinstance(x, pgas.DistArray) else np.asarray(x)


def tolerance(dtype, n: int = 1):
    """``(rtol, atol)`` for comparing with NumPy. Elementwise results are NumPy's own ufunc loops on
    the same values (rtol: a few ulp, as NumPy's contiguous and strided loops of transcendental
    functions may differ in the last bit); reductions add in another order than NumPy's pairwise
    sums (error bounded by about ``n`` ulp of the largest partial sum)."""
    dt = np.dtype(dtype)
    eps = float(np.finfo(dt).eps) if dt.kind in "fc" else 0.0
    return 8 * eps * max(n, 1), 8 * eps * max(n, 1)


class Comms:
    """Counts the communication calls made through Teams (``runtime.comm_hooks``)."""

    def __init__(self):
        self.calls = []

    def __call__(self, team, name, nbytes, fn, args, kwargs):
        self.calls.append(name)
        return fn(*args, **kwargs)
