"""runtime.index_copy.copy_within (the one-launch gather-scatter of device halo updates) against
NumPy's ``a[dst] = a[src]``, for every item size the kernels take and one they leave to indexing.
On the GPU or the CuPy stand-in (tests/fakegpu: the kernel compiled for the CPU); skipped without."""
import numpy as np
import pytest

from hpcsuite.runtime import gpu_status

ok, why = gpu_status()
pytestmark = pytest.mark.skipif(not ok, reason=f"no GPU: {why}")


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32, np.int32, np.int16])
def test_gpu_copy_within_equals_numpy_indexing(dtype):
    import cupy

    from hpcsuite.runtime.index_copy import copy_within
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(257) * 100).astype(dtype)
    if np.iscomplexobj(a):
        a = a + 1j * rng.standard_normal(257)
    perm = rng.permutation(257)
    src, dst = perm[:60], perm[60:120]                 # disjoint, in no order
    ref = a.copy()
    ref[dst] = ref[src]
    d = cupy.asarray(a)
    copy_within(d, cupy.asarray(src.astype(np.int64)), cupy.asarray(dst.astype(np.int64)))
    assert np.array_equal(cupy.asnumpy(d), ref)
    copy_within(d, cupy.asarray(src[:0].astype(np.int64)), cupy.asarray(dst[:0].astype(np.int64)))
    assert np.array_equal(cupy.asnumpy(d), ref)        # nothing to copy: unchanged


def test_gpu_copy_within_many_equals_numpy_indexing_per_array():
    """Several arrays of different sizes in one launch (the address-table kernel), each copied as
    NumPy's ``a[dst] = a[src]``; an array with nothing to copy stays as it is."""
    import cupy

    from hpcsuite.runtime.index_copy import ManyCopy, copy_within_many
    rng = np.random.default_rng(4)
    arrays, index, refs = [], [], []
    for n, k in ((257, 60), (31, 0), (1000, 333)):
        a = rng.standard_normal(n)
        perm = rng.permutation(n)
        src, dst = perm[:k], perm[k:2 * k]
        ref = a.copy()
        ref[dst] = ref[src]
        arrays.append(cupy.asarray(a))
        index.append((cupy.asarray(src.astype(np.int64)), cupy.asarray(dst.astype(np.int64))))
        refs.append(ref)
    many = ManyCopy(arrays, index)
    assert many.launches == 1
    many.run()
    for d, ref in zip(arrays, refs):
        assert np.array_equal(cupy.asnumpy(d), ref)
    copy_within_many(arrays, index)                    # again: sources unchanged, same result
    for d, ref in zip(arrays, refs):
        assert np.array_equal(cupy.asnumpy(d), ref)


def test_copy_within_many_of_other_item_sizes_copies_array_by_array():
    import cupy

    from hpcsuite.runtime.index_copy import ManyCopy
    a, b = cupy.asarray(np.arange(10, dtype=np.float32)), cupy.asarray(np.arange(10, dtype=np.float32))
    ix = (cupy.asarray(np.array([0, 1], dtype=np.int64)), cupy.asarray(np.array([8, 9], dtype=np.int64)))
    many = ManyCopy([a, b], [ix, ix])
    assert many.launches == 2
    many.run()
    for d in (a, b):
        assert cupy.asnumpy(d)[8:].tolist() == [0.0, 1.0]
