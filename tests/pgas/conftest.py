"""Fixtures shared by the PGAS tests."""
import numpy as np
import pytest

from hpcsuite import pgas


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
