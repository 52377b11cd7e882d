"""NumPy/SciPy BLAS and LAPACK calls as kernels (``tune.blas``): signatures built here from the
operands' NumPy attributes, results bit-identical to plain calls when they run, skipped calls
returning zeros of the real result's shape, dtype and type, stale inputs conditioned before a
factorisation, what is not seen, and a kernel known steady only from another rank's statistics
(1-4 ranks)."""
import numpy as np
import pytest
import scipy.linalg as sl

from hpcsuite.runtime import kernel
from hpcsuite.tune import Execution, Model, blas
from hpcsuite.tune.blas import signature

# loose intervals: these tests check the mechanics; a 0.1 ms call's times spread widely on the
# shared machine (measured), and a kernel must become steady after its first samples
LOOSE = dict(tolerance=0.95, confidence=0.5, min_samples=2)
RNG = np.random.default_rng(7)
A = RNG.random((40, 24))
B = RNG.random((24, 16))
SPD = A @ A.T + 40 * np.eye(40)
RHS = RNG.random((40, 3))


def _calls():
    """One call of every kind; returns the results."""
    return {"dot": np.dot(A, B), "matmul": np.matmul(A, B), "chol": sl.cholesky(SPD, lower=True),
            "tri": sl.solve_triangular(np.tril(SPD), RHS, lower=True), "qr": sl.qr(A, mode="economic"),
            "lu": sl.lu(SPD), "cho": sl.cho_factor(SPD), "eigh": np.linalg.eigh(SPD),
            "solve": np.linalg.solve(SPD, RHS), "svd": np.linalg.svd(A, full_matrices=False)}


def _same(x, y, exact=True) -> bool:
    if isinstance(x, tuple):
        return type(x) is type(y) and len(x) == len(y) and all(_same(a, b, exact) for a, b in zip(x, y))
    if isinstance(x, np.ndarray):
        return x.shape == y.shape and x.dtype == y.dtype and (not exact or np.array_equal(x, y))
    return x == y


def test_signature_is_dtype_layout_and_shape_of_each_operand_and_the_flags():
    f = np.asfortranarray(A)                          # column-major: "F"
    strided = np.ones((20, 8), np.float32)[:, ::2]    # every other column: neither order, "S"
    assert not strided.flags.c_contiguous and not strided.flags.f_contiguous
    assert signature((f, B), {}) == (("dF", 40, 24), ("dC", 24, 16))
    assert signature((strided, np.ones(4, np.complex128)), {}) == (("fS", 20, 4), ("DC", 4))
    assert signature((SPD,), {"lower": True, "check_finite": False}) == \
        (("dC", 40, 40), ("check_finite", False), ("lower", True))
    out = np.empty((40, 16))
    assert signature((A, B), {"out": out}) == (("dC", 40, 24), ("dC", 24, 16))     # out is not a cost


@pytest.mark.mpi
def test_calls_are_kernels_with_plain_results_then_skipped_with_zeros_of_the_same_structure(team):
    ref = _calls()
    model = Model(**LOOSE)
    with blas():
        with Execution(model, "profile") as prof:
            got = _calls()
        for _ in range(3):
            with Execution(model, "profile"):
                _calls()
        with Execution(model, "selective") as sel:
            skipped = _calls()
    for k in ref:                                       # executed: the very same bits
        assert _same(got[k], ref[k]), k
    names = ["numpy.dot", "numpy.matmul", "scipy.linalg.cholesky", "scipy.linalg.solve_triangular",
             "scipy.linalg.qr", "scipy.linalg.lu", "scipy.linalg.cho_factor", "numpy.linalg.eigh",
             "numpy.linalg.solve", "numpy.linalg.svd"]
    assert {n: prof.result.counts[n] for n in names} == {n: [1, 0] for n in names}
    assert prof.result.numerically_valid
    assert {k[1] for k in model.kernels} >= set(names)
    assert model.kernels[("comp", "numpy.dot", (("dC", 40, 24), ("dC", 24, 16)))].n == 4
    # steady now: every call skipped, each returning zeros shaped like the real result
    assert all(sel.result.counts[n] == [0, 1] for n in names), sel.result.counts
    assert not sel.result.numerically_valid
    for k in ref:
        assert _same(skipped[k], ref[k], exact=False), k
        arrays = [x for x in (skipped[k] if isinstance(skipped[k], tuple) else (skipped[k],))
                  if isinstance(x, np.ndarray)]
        assert all(not x.any() for x in arrays), k
    assert type(skipped["eigh"]).__name__ == "EighResult" and skipped["cho"][1] is False
    assert team.allgather(sel.result.predicted) == [sel.result.predicted] * team.size


def test_out_argument_is_returned_untouched_when_skipped_and_written_when_run():
    model = Model(**LOOSE)
    out = np.full((40, 16), 3.0)
    with blas():
        for _ in range(3):
            with Execution(model, "profile"):
                r = np.dot(A, B, out=out)
        assert r is out and np.array_equal(out, A.dot(B))
        out[...] = 3.0
        with Execution(model, "selective") as sel:
            r = np.dot(A, B, out=out)
    assert sel.result.counts["numpy.dot"] == [0, 1] and r is out and (out == 3.0).all()


def test_a_factorisation_after_skips_gets_a_well_conditioned_input_and_the_caller_array_is_kept():
    model = Model(**LOOSE)
    bad = np.zeros((30, 30))                          # what a skipped product leaves: not SPD
    bad[0, 1] = np.nan
    with blas():
        for _ in range(3):
            with Execution(model, "profile"):
                np.dot(A, B)
        with pytest.raises(Exception):                # plainly, it fails (the reference)
            sl.cholesky(bad)
        with Execution(model, "selective") as sel:
            np.dot(A, B)                              # skipped: stale data from here on
            c = sl.cholesky(bad)                      # a new key, so it runs: on a conditioned input
    assert sel.result.counts["numpy.dot"] == [0, 1] and sel.result.counts["scipy.linalg.cholesky"] == [1, 0]
    assert c.shape == (30, 30) and np.isfinite(c).all()
    assert np.isnan(bad[0, 1]) and not bad[1:].any()    # the caller's array was not written


def test_what_is_not_seen_runs_plainly_and_the_functions_are_restored():
    orig_dot, orig_chol = np.dot, sl.cholesky

    @kernel("outer")
    def outer(x, y):
        return np.dot(x, y)                           # inside a kernel: part of it

    with blas():
        assert np.dot is not orig_dot
        assert np.array_equal(np.dot(A, B), orig_dot(A, B))           # outside an execution: plain
        with Execution(Model(**LOOSE), "profile") as ex:
            m1 = A @ B                                # the operator and the method: not replaceable
            m2 = A.dot(B)
            listed = np.dot([1.0, 2.0], [3.0, 4.0])  # not NumPy arrays
            nested = outer(A, B)
    assert np.dot is orig_dot and sl.cholesky is orig_chol
    assert ex.result.counts == {"outer": [1, 0]}
    assert listed == 11.0 and np.array_equal(nested, m1) and np.array_equal(m2, orig_dot(A, B))


@pytest.mark.mpi
def test_a_kernel_steady_from_another_ranks_statistics_runs_once_here_then_is_skipped(team):
    if team.size < 2:
        pytest.skip("needs a second rank to learn from rank 0")
    model = Model(**LOOSE)
    a, b = A[:, :23].copy(), B[:23, :15].copy()        # a signature no other test runs in this process
    key = ("comp", "numpy.dot", (("dC", 40, 23), ("dC", 23, 15)))
    with blas():
        with Execution(model, "profile"):
            if team.rank == 0:
                for _ in range(4):
                    np.dot(a, b)
            team.Allreduce(np.ones(1), np.empty(1))   # the statistics travel with the path
        assert (key in model.kernels) == (team.rank == 0) and model.steady(key)
        with Execution(model, "selective") as sel:
            first, second = np.dot(a, b), np.dot(a, b)
    # rank 0 has run it (skips both); another rank has never seen its result's structure: the
    # first call runs (its result exact), the second is skipped
    assert sel.result.counts["numpy.dot"] == ([0, 2] if team.rank == 0 else [1, 1])
    if team.rank:
        assert np.array_equal(first, np.dot(a, b)) and second.shape == (40, 15) and not second.any()
