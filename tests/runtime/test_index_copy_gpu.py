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
