"""Independent reference maps for distribution specs, built by plain enumeration (not by the
closed-form arithmetic of hpcsuite.pgas.dist), and helpers shared by the PGAS tests."""
import numpy as np

from hpcsuite import pgas


def owner_table(spec, n: int, p: int):
    """(owner, local) arrays over 0..n-1 for one dimension, by enumerating blocks."""
    owner = np.full(n, -1)
    local = np.full(n, -1)
    if spec.kind == "none" or p == 1:
        return np.zeros(n, int), np.arange(n)
    if spec.kind == "blocked":
        for c, chunk in enumerate(np.array_split(np.arange(n), p)):
            owner[chunk] = c
            local[chunk] = np.arange(len(chunk))
        return owner, local
    b = spec.block
    counters = [0] * p
    for k, s in enumerate(range(0, n, b)):
        c = k % p
        for g in range(s, min(n, s + b)):
            owner[g] = c
            local[g] = counters[c]
            counters[c] += 1
    return owner, local


def all_dists(ndim: int, tile_ok: bool = False):
    """A spread of distributions for an ndim array (each entry a tuple of specs)."""
    B, C, BC, N = pgas.BLOCKED, pgas.CYCLIC, pgas.BLOCKCYCLIC, pgas.NONE
    if ndim == 1:
        out = [(B,), (C,), (BC(3),), (BC(64),), (N,)]
    elif ndim == 2:
        out = [(B, N), (N, B), (B, B), (C, C), (BC(2), BC(3)), (C, N), (B, BC(2))]
    else:
        out = [(B, N, N), (B, B, B), (C, B, N), (BC(2), N, C)]
    if tile_ok:
        out.append(tuple(pgas.TILE(t) for t in TILES[ndim]))
    return out


# extents divisible by these tiles for the TILE cases (other cases use primes)
TILES = {1: (5,), 2: (4, 5), 3: (2, 5, 3)}
SHAPES = {1: (1031,), 2: (37, 5), 3: (7, 5, 3)}
TILE_SHAPES = {1: (1035,), 2: (36, 10), 3: (8, 5, 3)}


def shape_for(dist):
    nd = len(dist)
    return TILE_SHAPES[nd] if any(s.kind == "tile" for s in dist) else SHAPES[nd]


def random_index(rng, shape):
    """A random tuple of ints / slices (with steps, some negative) within ``shape``."""
    idx = []
    for n in shape:
        r = rng.random()
        if r < 0.2:
            idx.append(int(rng.integers(-n, n)))
        elif r < 0.35:
            idx.append(slice(None))
        else:
            a, b = sorted(rng.integers(0, n + 1, size=2))
            step = int(rng.choice([1, 1, 2, 3, -1, -2]))
            idx.append(slice(a, b, step) if step > 0 else slice(b - 1 if b > 0 else None, a - 1 if a > 0 else None, step))
    return tuple(idx)


def owned(a):
    """Index arrays selecting ``a``'s local storage elements from a global NumPy array."""
    return tuple(np.broadcast_arrays(*a.local_global_indices()))


def load(a, ref):
    """Put the NumPy array ``ref`` into ``a`` (each unit writes its own elements). Local."""
    a.local[...] = ref[owned(a)]
    return a
