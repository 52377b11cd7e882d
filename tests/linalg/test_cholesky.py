"""``linalg.cholesky`` against SciPy on the gathered matrix (uneven sizes, block sizes, grids, both
broadcast variants, lookahead 0/1, ``out``), collective failure on non-SPD input, argument errors
before any communication, the computation kernels it runs (names, keys, counts derived by hand) and
the local kernels themselves (serial)."""
import itertools
from collections import Counter

import numpy as np
import pytest
import scipy.linalg as sl

from hpcsuite import linalg, pgas
from hpcsuite.linalg import kernels as K
from hpcsuite.pgas import BLOCKCYCLIC as BC
from hpcsuite.runtime import intercept, intercept_compute


def spd(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n))
    return x @ x.T + n * np.eye(n)


def grid_of(team, kind):
    return {"rows": (team.size, 1), "cols": (1, team.size), "auto": (0, 0)}[kind]


def distributed(S, b, grid, upper=None):
    """``S`` on a (BLOCKCYCLIC(b), BLOCKCYCLIC(b)) grid; the strict upper triangle replaced by
    ``upper`` when given (it must not be referenced)."""
    a = S.copy()
    if upper is not None:
        a[np.triu_indices(a.shape[0], 1)] = upper
    return pgas.from_numpy(a, dist=(BC(b), BC(b)), root=None, grid=grid)


def check_factor(L, S):
    n = S.shape[0]
    got = L.to_numpy()
    assert np.array_equal(got, np.tril(got)), "the upper triangle must be zero"
    resid = np.linalg.norm(S - got @ got.T) / np.linalg.norm(S)
    assert resid <= 1e-14 * n, f"||A - L L^T|| / ||A|| = {resid:.3g}"
    ref = sl.cholesky(S, lower=True)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err <= 1e-10, f"relative difference from scipy {err:.3g}"


# ---------------------------------------------------------------------- correctness
@pytest.mark.mpi
@pytest.mark.parametrize("lookahead", [0, 1])
@pytest.mark.parametrize("variant", ["bcast", "ring"])
@pytest.mark.parametrize("grid", ["rows", "cols", "auto"])
@pytest.mark.parametrize("n,b", [(37, 5), (64, 16), (100, 7)])
def test_matches_scipy(team, n, b, grid, variant, lookahead):
    S = spd(n, seed=n + b)
    A = distributed(S, b, grid_of(team, grid), upper=np.nan)   # NaN above: never read
    try:
        L = linalg.cholesky(A, variant=variant, lookahead=lookahead)
        assert L is A
        check_factor(L, S)
    finally:
        A.free()


@pytest.mark.mpi
@pytest.mark.parametrize("n,b", [(37, 2), (100, 16), (64, 3), (16, 16), (1, 1)])
@pytest.mark.parametrize("grid", ["rows", "auto"])
def test_more_block_sizes(team, n, b, grid):
    S = spd(n, seed=3)
    A = distributed(S, b, grid_of(team, grid))
    try:
        check_factor(linalg.cholesky(A, variant="ring" if b % 2 else "bcast", lookahead=b % 2), S)
    finally:
        A.free()


@pytest.mark.mpi
def test_out_leaves_a_unchanged(team):
    n, b = 45, 6
    S = spd(n, seed=7)
    A = distributed(S, b, (0, 0))
    out = pgas.full((n, n), 5.0, dist=(BC(b), BC(b)), grid=(0, 0))
    try:
        L = linalg.cholesky(A, out=out, lookahead=1)
        assert L is out
        check_factor(out, S)
        assert np.array_equal(A.to_numpy(), S)
    finally:
        A.free()
        out.free()


# ---------------------------------------------------------------------- failure
@pytest.mark.mpi
@pytest.mark.parametrize("lookahead", [0, 1])
@pytest.mark.parametrize("variant", ["bcast", "ring"])
@pytest.mark.parametrize("col", [0, 18, 36])
def test_not_positive_definite_raises_on_every_rank(team, col, variant, lookahead):
    n, b = 37, 4
    S = spd(n, seed=1)
    S[col, col] = -1.0                    # the leading minor of order col + 1 is the first to fail
    A = distributed(S, b, (0, 0))
    try:
        with pytest.raises(linalg.NotPositiveDefiniteError) as exc:
            linalg.cholesky(A, variant=variant, lookahead=lookahead)
        e = exc.value
        assert isinstance(e, np.linalg.LinAlgError)
        assert (e.column, e.block) == (col, col // b)
        assert f"block column {col // b}" in str(e)
        assert team.allgather(str(e)) == [str(e)] * team.size
    finally:
        A.free()


@pytest.mark.mpi
def test_nan_input_raises_on_every_rank(team):
    S = spd(20, seed=2)
    S[11, 3] = np.nan
    A = distributed(S, 4, (0, 0))
    try:
        with pytest.raises(linalg.NotPositiveDefiniteError):
            linalg.cholesky(A)
    finally:
        A.free()


def _bad_cases(team):
    P = team.size
    yield "non-square", lambda: pgas.zeros((12, 10), dist=(BC(2), BC(2)), grid=(0, 0)), {}
    yield "block sizes differ", lambda: pgas.zeros((12, 12), dist=(BC(2), BC(3)), grid=(0, 0)), {}
    yield "not block-cyclic", lambda: pgas.zeros((12, 12), dist=(pgas.BLOCKED, pgas.BLOCKED), grid=(0, 0)), {}
    yield "block larger than matrix", lambda: pgas.zeros((12, 12), dist=(BC(16), BC(16)), grid=(0, 0)), {}
    yield "float32", lambda: pgas.zeros((12, 12), np.float32, dist=(BC(4), BC(4)), grid=(0, 0)), {}
    sq = lambda: pgas.zeros((12, 12), dist=(BC(4), BC(4)), grid=(P, 1))    # noqa: E731
    yield "variant", sq, {"variant": "tree"}
    yield "lookahead", sq, {"lookahead": 2}
    yield "out shape", sq, {"out": ("zeros", (12, 13), (BC(4), BC(4)), (P, 1))}
    yield "out layout", sq, {"out": ("zeros", (12, 12), (BC(3), BC(3)), (P, 1))}
    if P > 1:
        yield "out grid", sq, {"out": ("zeros", (12, 12), (BC(4), BC(4)), (1, P))}


@pytest.mark.mpi
def test_bad_arguments_raise_value_error_before_communicating(team):
    for name, make, kw in _bad_cases(team):
        A = make()
        out = None
        if "out" in kw:
            _, shape, dist, grid = kw.pop("out")
            out = kw["out"] = pgas.zeros(shape, dist=dist, grid=grid)
        calls = []
        try:
            with intercept(lambda t, nm, nb, fn, args, kwargs: calls.append(nm) or fn(*args, **kwargs)):
                with pytest.raises(ValueError):
                    linalg.cholesky(A, **kw)
            assert calls == [], f"{name}: communicated before failing: {calls}"
        finally:
            A.free()
            if out is not None:
                out.free()
    with pytest.raises(ValueError, match="DistArray"):
        linalg.cholesky(np.eye(3))


# ---------------------------------------------------------------------- kernels it runs
def expected_counts(nb, Pr, Pc, r, c):
    """Kernel calls on rank (r, c): potrf where it owns (k, k); trsm in the panel column where it
    has panel rows below k; per own block column j > k a syrk if it owns (j, j) and a gemm if it has
    block rows below j."""
    rows = [i for i in range(nb) if i % Pr == r]
    out = Counter()
    for k in range(nb):
        out["potrf"] += (k % Pr, k % Pc) == (r, c)
        out["trsm"] += k % Pc == c and any(i > k for i in rows)
        for j in range(k + 1, nb):
            if j % Pc == c:
                out["syrk"] += j % Pr == r
                out["gemm"] += any(i > j for i in rows)
    return {k: v for k, v in out.items() if v}


# by hand, n = 40, b = 8 (5 block columns): {grid: {rank: counts}}
HAND = {
    (1, 1): {0: {"potrf": 5, "trsm": 4, "syrk": 10, "gemm": 6}},
    (2, 1): {0: {"potrf": 3, "trsm": 4, "syrk": 6, "gemm": 6},      # block rows 0, 2, 4
             1: {"potrf": 2, "trsm": 3, "syrk": 4, "gemm": 3}},     # block rows 1, 3
    (1, 2): {0: {"potrf": 3, "trsm": 2, "syrk": 6, "gemm": 2},      # block columns 0, 2, 4
             1: {"potrf": 2, "trsm": 2, "syrk": 4, "gemm": 4}},     # block columns 1, 3
}


@pytest.mark.mpi
@pytest.mark.parametrize("lookahead", [0, 1])
@pytest.mark.parametrize("grid", ["rows", "cols", "auto"])
def test_kernel_names_keys_and_counts(team, grid, lookahead):
    n, b = 40, 8
    A = distributed(spd(n), b, grid_of(team, grid))
    seen = []

    def record(name, key, flops, reset, fn, args, kwargs):
        seen.append((name, key, flops, reset))
        return fn(*args, **kwargs)
    try:
        with intercept_compute(record):
            linalg.cholesky(A, lookahead=lookahead, variant="ring")
        Pr, Pc = A.grid
        r, c = A.pattern.unit_coords(team.rank)
        # the pass zeroing the upper triangle is a kernel of its own (no flops), once, at the end
        assert [s[:3] for s in seen if s[0] == "zero_upper"] == [("zero_upper", (*A.local_shape, b), 0.0)]
        assert seen[-1][0] == "zero_upper"
        seen = seen[:-1]
        counts = dict(Counter(s[0] for s in seen))
        assert counts == expected_counts(5, Pr, Pc, r, c)
        if (Pr, Pc) in HAND:
            assert counts == HAND[(Pr, Pc)][team.rank]
        mr = A.local_shape[0]
        for name, key, flops, reset in seen:
            assert all(isinstance(x, int) for x in key) and flops > 0
            assert (reset is not None) == (name == "potrf")
            if name == "potrf":
                assert key == (8, 1)
            elif name == "syrk":
                assert key == (8, 8, 1, 0)
            elif name == "trsm":                          # all panel rows below k at once
                assert key[1:] == (8, 1, 1, 1) and 0 < key[0] <= mr and key[0] % 8 == 0
            else:                                         # one gemm per block column
                m_, n_, k_, ta, tb = key
                assert (n_, k_, ta, tb) == (8, 8, 0, 1) and 0 < m_ <= mr and flops == 2 * m_ * 8 * 8
    finally:
        A.free()


@pytest.mark.mpi
def test_panels_travel_through_team_methods(team):
    A = distributed(spd(24), 4, (1, team.size))          # panels along the grid row
    names = []
    original = A.local.copy()
    try:
        for variant, lookahead in itertools.product(["bcast", "ring"], [0, 1]):
            A.local[...] = original
            with intercept(lambda t, nm, nb, fn, args, kw: names.append((variant, nm)) or fn(*args, **kw)):
                linalg.cholesky(A, variant=variant, lookahead=lookahead)
        kinds = Counter(names)
        if team.size > 1:
            assert kinds[("bcast", "Bcast")] > 0
            assert kinds[("bcast", "Ibcast")] == kinds[("bcast", "Wait")] > 0
            assert kinds[("ring", "Sendrecv")] > 0 and kinds[("ring", "Bcast")] == 0
    finally:
        A.free()


@pytest.mark.mpi
def test_potrf_reset_makes_every_factorization_succeed(team):
    """An interceptor that resets potrf's input before running it (as the tuner does after skipped
    kernels) gets through a matrix that is not positive definite, on every rank."""
    A = distributed(-np.eye(24), 4, (0, 0))
    blocks = []

    def resetting(name, key, flops, reset, fn, args, kwargs):
        if reset is not None:
            reset()
            blocks.append(args[0].copy())
        return fn(*args, **kwargs)
    try:
        with intercept_compute(resetting):
            linalg.cholesky(A)
        assert team.allreduce(len(blocks)) == 6             # every diagonal block, reset to 4n I
        assert all(np.array_equal(blk, 16.0 * np.eye(4)) for blk in blocks)
        for blk in blocks:
            np.linalg.cholesky(blk)                         # SPD
        assert np.all(np.isfinite(A.to_numpy()))
    finally:
        A.free()


# ---------------------------------------------------------------------- local kernels (serial)
def _views(rng, m, n):
    """The same kind of data as a C view, a Fortran view, a contiguous array and a view without
    unit stride."""
    yield rng.standard_normal((m + 5, n + 7))[2:2 + m, 3:3 + n]
    yield np.asfortranarray(rng.standard_normal((m + 4, n + 3)))[1:1 + m, 2:2 + n]
    yield rng.standard_normal((m, n))
    yield rng.standard_normal((2 * m + 1, 2 * n + 1))[::2, ::2][:m, :n]


def test_gemm_and_syrk_every_layout():
    rng = np.random.default_rng(0)
    for (m, n, k), ta, tb in itertools.product([(5, 7, 3), (1, 4, 6), (4, 1, 1), (3, 2, 0)], [0, 1], [0, 1]):
        for a, b, c in itertools.product(_views(rng, *((k, m) if ta else (m, k))),
                                         _views(rng, *((n, k) if tb else (k, n))), _views(rng, m, n)):
            ref = 0.5 * (a.T if ta else a) @ (b.T if tb else b) + 2.0 * c
            K.gemm(a, b, c, alpha=0.5, beta=2.0, trans_a=bool(ta), trans_b=bool(tb))
            np.testing.assert_allclose(c, ref, atol=1e-13)
    for (n, k), lower, tr in itertools.product([(5, 3), (1, 4), (6, 1)], [True, False], [False, True]):
        for a, c in itertools.product(_views(rng, *((k, n) if tr else (n, k))), _views(rng, n, n)):
            c0, op = c.copy(), (a.T if tr else a)
            K.syrk(a, c, alpha=-1.0, beta=1.0, lower=lower, trans=tr)
            tri, other = (np.tril, np.triu) if lower else (np.triu, np.tril)
            np.testing.assert_allclose(tri(c), tri(c0 - op @ op.T), atol=1e-13)
            np.testing.assert_array_equal(other(c, 1 if lower else -1), other(c0, 1 if lower else -1))


def test_trsm_trmm_potrf_every_layout():
    rng = np.random.default_rng(1)
    for (m, n), right, lower, tr, unit in itertools.product([(5, 3), (1, 4), (3, 3)], *[[False, True]] * 4):
        s = n if right else m
        for a in _views(rng, s, s):
            a += 4 * s * np.eye(s)
            T = (np.tril if lower else np.triu)(a)
            if unit:
                T = T - np.diag(np.diag(T)) + np.eye(s)
            op = T.T if tr else T
            for b in _views(rng, m, n):
                b0 = b.copy()
                K.trsm(a, b, right=right, lower=lower, trans=tr, unit_diag=unit, alpha=2.0)
                inv = np.linalg.inv(op)
                np.testing.assert_allclose(b, 2 * (b0 @ inv if right else inv @ b0), atol=1e-12)
                b[...] = b0
                K.trmm(a, b, right=right, lower=lower, trans=tr, unit_diag=unit, alpha=2.0)
                np.testing.assert_allclose(b, 2 * (b0 @ op if right else op @ b0), atol=1e-12)
    for n, lower in itertools.product([1, 2, 7], [True, False]):
        for a in _views(rng, n, n):
            S = spd(n, seed=n)
            a[...] = S
            a0 = a.copy()
            K.potrf(a, lower=lower)
            F = np.tril(a) if lower else np.triu(a).T
            np.testing.assert_allclose(F @ F.T, S, atol=1e-12)
            keep = (np.triu if lower else np.tril)(np.ones((n, n), bool), 1 if lower else -1)
            np.testing.assert_array_equal(a[keep], a0[keep])   # the other triangle untouched


def test_kernels_run_in_place_on_blocks_of_a_larger_matrix():
    big = np.zeros((10, 10))
    c = big[2:6, 3:8]
    K.gemm(np.ones((4, 2)), np.ones((2, 5)), c, beta=1.0)
    assert np.all(big[2:6, 3:8] == 2.0) and big.sum() == 40.0
    f = np.asfortranarray(np.zeros((10, 10)))
    K.syrk(np.ones((3, 2)), f[1:4, 1:4], lower=True)
    assert f[1:4, 1:4][np.tril_indices(3)].tolist() == [2.0] * 6 and f.sum() == 12.0


def test_potrf_errors_and_reset():
    a = np.array([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(K.NotPositiveDefiniteError, match="block column 3") as exc:
        K.potrf(a.copy(), block=3, offset=48)
    assert isinstance(exc.value, np.linalg.LinAlgError) and exc.value.column == 49
    resets = []

    def grab(name, key, flops, reset, fn, args, kwargs):
        resets.append((name, key, reset))
        reset()
        return fn(*args, **kwargs)
    with intercept_compute(grab):
        K.potrf(a, lower=True)                     # garbage in, reset first: succeeds
    (name, key, _), = resets
    assert (name, key) == ("potrf", (3, 1))
    np.testing.assert_array_equal(np.tril(a), np.sqrt(12.0) * np.eye(3))
    for bad in (np.ones((2, 3)), np.ones((3, 3), np.float32)):
        with pytest.raises(ValueError):
            K.potrf(bad)
    with pytest.raises(ValueError, match="conform"):
        K.gemm(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)))

