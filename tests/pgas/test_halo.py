"""Halo exchange against a reference built from the global array, for 1-D to 3-D blocks, uneven
extents, several widths, every boundary kind and with or without corners."""
import itertools

import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKED, NONE

SENTINEL = -12345.0


def expected_padded(ref, a, boundary):
    """What the padded local block must hold after an update, built from the global array."""
    w = a.halo_width
    sl = a.local_slices
    pad_shape = a.local_with_halo.shape
    out = np.full(pad_shape, SENTINEL)
    corners = a._halo_spec.corners
    for pos in itertools.product(*(range(n) for n in pad_shape)):
        g = [s.start + p - wd for s, p, wd in zip(sl, pos, w)]
        outside = [d for d in range(ref.ndim) if not (sl[d].start <= g[d] < sl[d].stop)]
        if len(outside) > 1 and not corners:
            continue                                       # edge/corner ghost: not exchanged
        value = None
        for d in range(ref.ndim):
            if 0 <= g[d] < ref.shape[d]:
                continue
            if boundary[d] == "periodic":
                g[d] %= ref.shape[d]
                continue
            value = SENTINEL if boundary[d] == "none" else boundary[d]   # first open edge decides
            break
        out[pos] = ref[tuple(g)] if value is None else value
    return out


CASES = [
    ((1031,), (BLOCKED,), 2, ("periodic",), False),
    ((1031,), (BLOCKED,), 1, ("none",), False),
    ((1031,), (BLOCKED,), 3, (7.5,), False),
    ((37, 5), (BLOCKED, NONE), 1, ("periodic", "periodic"), False),
    ((37, 11), (BLOCKED, BLOCKED), 1, ("periodic", "none"), True),
    ((37, 11), (BLOCKED, BLOCKED), (2, 1), ("periodic", 3.0), True),
    ((13, 11), (BLOCKED, BLOCKED), 1, (2.0, "periodic"), False),
    ((9, 7, 6), (BLOCKED, BLOCKED, BLOCKED), 1, ("periodic",) * 3, True),
    ((9, 7, 6), (BLOCKED, BLOCKED, BLOCKED), 1, ("periodic",) * 3, False),
    ((9, 7, 6), (BLOCKED, BLOCKED, NONE), (1, 2, 0), ("none", "periodic", "none"), True),
]


@pytest.mark.mpi
@pytest.mark.parametrize("shape,dist,width,boundary,corners", CASES)
def test_halo_update_matches_global_reference(team, shape, dist, width, boundary, corners):
    ref = np.random.default_rng(3).standard_normal(shape)
    a = pgas.from_numpy(ref, dist=dist, root=None, halo=width, boundary=boundary, corners=corners)
    a.local_with_halo[...] = SENTINEL
    a.local[...] = ref[a.local_slices]
    a.halo.update()
    assert np.array_equal(a.local_with_halo, expected_padded(ref, a, boundary))
    # async: overlapping local work, then the same result; interior untouched
    a.local_with_halo[...] = SENTINEL
    a.local[...] = ref[a.local_slices]
    h = a.halo.update_async()
    busy = float(np.sum(a.local))       # work while the exchange is in flight
    h.wait()
    assert np.array_equal(a.local_with_halo, expected_padded(ref, a, boundary))
    assert busy == pytest.approx(float(np.sum(ref[a.local_slices])))
    with pytest.raises(RuntimeError, match="already in flight"):
        h2 = a.halo.update_async()
        try:
            a.halo.update_async()
        finally:
            h2.wait()
    a.free()


@pytest.mark.mpi
def test_halo_message_counts(team):
    a = pgas.zeros((16, 16, 16), dist=(BLOCKED,) * 3, halo=1, boundary="periodic")
    b = pgas.zeros((16, 16, 16), dist=(BLOCKED,) * 3, halo=1, boundary="periodic", corners=True)
    dirs = [o for o in itertools.product((-1, 0, 1), repeat=3) if any(o)]
    # a direction needs a message unless it wraps onto this unit itself (one unit along every
    # dimension it moves in); faces only without corners
    remote = [o for o in dirs if any(x and g > 1 for x, g in zip(o, a.grid))]
    assert a.halo.messages == sum(1 for o in remote if sum(map(abs, o)) == 1)
    assert b.halo.messages == len(remote)
    c = pgas.zeros((16, 16), dist=(BLOCKED, BLOCKED), halo=1, boundary="none")
    coords = c.pattern.unit_coords(team.rank)
    inside = sum((x > 0) + (x < g - 1) for x, g in zip(coords, c.grid))
    assert c.halo.messages == inside           # no messages across open edges
    for x in (a, b, c):
        x.free()


@pytest.mark.mpi
def test_halo_errors(team):
    with pytest.raises(ValueError, match="boundary must be"):
        pgas.zeros(8 * team.size, halo=1, boundary="reflect")
    with pytest.raises(ValueError, match="boundary needs 2 entries"):
        pgas.zeros((8, 8), halo=1, boundary=("periodic",) * 3)
    with pytest.raises(ValueError, match="halo must be"):
        pgas.zeros((8, 8), halo=(1, -1))
