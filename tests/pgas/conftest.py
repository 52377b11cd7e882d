"""Fixtures shared by the PGAS tests."""
import numpy as np
import pytest

from hpcsuite import pgas


@pytest.fixture(autouse=True)
def _release_dropped_results():
    """Results of the NumPy protocols that earlier tests dropped are released at the team's next
    collective point (``pgas.lifetime``); release them before each test, so that they do not go
    at this test's first array creation and shift its ``live_segments()`` counts. Every rank runs
    the same tests in the same order, so this is a collective point (no communication unless a
    released segment's windows are destroyed)."""
    from hpcsuite.pgas import lifetime
    from hpcsuite.runtime import Team
    lifetime.drain(Team.world())
    yield


@pytest.fixture(scope="module")
def pool():
    """``get(shape, dist, dtype, tag)``: a DistArray allocated once for the module (``tag`` tells
    apart several of the same kind), freed at its end. Array creation is the expensive collective
    when ranks oversubscribe the cores, so tests reuse arrays."""
    arrays = {}

    def get(shape, dist, dtype=np.float64, tag=0):
        key = (tuple(shape), tuple(dist), np.dtype(dtype).str, tag)
        if key not in arrays:
            arrays[key] = pgas.zeros(shape, dtype=dtype, dist=dist)
        return arrays[key]
    yield get
    for a in arrays.values():
        a.free()
