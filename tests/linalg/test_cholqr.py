"""``linalg.cholqr2`` on tall-skinny matrices: orthogonality and residual for a condition number of
1e4, R upper triangular and the same on every rank, agreement with NumPy's QR, grids and panel
widths, input layouts that need redistribution, the kernels it runs, and errors (bad arguments
before any communication, rank-deficient input on every rank)."""
from collections import Counter

import numpy as np
import pytest

from hpcsuite import linalg, pgas
from hpcsuite.pgas import BLOCKCYCLIC as BC, BLOCKED, NONE
from hpcsuite.runtime import intercept, intercept_compute


def conditioned(m, n, cond, seed=0):
    """An ``m x n`` matrix with singular values spread evenly in log scale from 1 to 1/cond."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((m, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (u * np.logspace(0, -np.log10(cond), n)) @ v.T


def check_qr(team, A, Q, R, a):
    n = a.shape[1]
    q = Q.to_numpy()
    assert (Q.shape, Q.dist, Q.grid) == (A.shape, A.dist, A.grid)
    orth = np.linalg.norm(q.T @ q - np.eye(n))
    resid = np.linalg.norm(a - q @ R) / np.linalg.norm(a)
    assert orth <= 1e-14, f"||Q^T Q - I|| = {orth:.3g}"
    assert resid <= 3e-15, f"||A - QR|| / ||A|| = {resid:.3g}"
    assert np.array_equal(R, np.triu(R)) and np.all(np.diag(R) > 0)
    assert all(np.array_equal(R, other) for other in team.allgather(R))
    r_np = np.linalg.qr(a, mode="r")
    r_np *= np.sign(np.diag(r_np))[:, None]                # positive diagonal, as Cholesky gives
    assert np.linalg.norm(R - r_np) <= 1e-10 * np.linalg.norm(r_np)
    assert np.array_equal(A.to_numpy(), a), "A must not change"


def grid_of(team, kind):
    return {None: None, "rows": (team.size, 1), "cols": (1, team.size), "auto": (0, 0)}[kind]


@pytest.mark.mpi
@pytest.mark.parametrize("grid,panel", [(None, None), ("rows", None), ("rows", 5), ("rows", 1),
                                        ("cols", 3), ("cols", 1), ("auto", 2), ("auto", None)])
def test_tall_skinny_cond_1e4(team, grid, panel):
    a = conditioned(400, 12, 1e4, seed=1)
    A = pgas.from_numpy(a, dist=(BLOCKED, NONE), root=None)
    Q, R = linalg.cholqr2(A, panel=panel, grid=grid_of(team, grid))
    try:
        check_qr(team, A, Q, R, a)
    finally:
        Q.free()
        A.free()


@pytest.mark.mpi
@pytest.mark.parametrize("dist,grid", [((BC(7), BLOCKED), "auto"), ((BLOCKED, BC(2)), "auto"),
                                       ((BLOCKED, BLOCKED), "cols"), ((pgas.CYCLIC, NONE), "rows")])
def test_other_input_layouts(team, dist, grid):
    a = conditioned(203, 9, 1e3, seed=2)
    A = pgas.from_numpy(a, dist=dist, root=None, grid=grid_of(team, grid) or (0, 0))
    Q, R = linalg.cholqr2(A, grid=(0, 0), panel=2)
    try:
        check_qr(team, A, Q, R, a)
    finally:
        Q.free()
        A.free()


@pytest.mark.mpi
def test_square_and_single_column(team):
    for m, n in [(16, 16), (50, 1)]:
        a = conditioned(m, n, 10.0, seed=m)
        A = pgas.from_numpy(a, dist=(BLOCKED, NONE), root=None)
        Q, R = linalg.cholqr2(A)
        try:
            check_qr(team, A, Q, R, a)
        finally:
            Q.free()
            A.free()


@pytest.mark.mpi
def test_kernels_one_panel_one_grid_column(team):
    """Pc = 1, panel = n: per pass one syrk, one potrf, one trsm; then one trmm for R = R2 R1."""
    m, n = 120, 6
    A = pgas.from_numpy(conditioned(m, n, 10.0), dist=(BLOCKED, NONE), root=None)
    seen = []
    with intercept_compute(lambda nm, key, fl, rs, fn, args, kw: seen.append((nm, key)) or fn(*args, **kw)):
        Q, R = linalg.cholqr2(A)
    try:
        mr = A.local_shape[0]
        assert seen == [("syrk", (n, mr, 1, 1)), ("potrf", (n, 1)), ("trsm", (mr, n, 1, 1, 1))] * 2 \
            + [("trmm", (n, n, 0, 1, 1))]
    finally:
        Q.free()
        A.free()


@pytest.mark.mpi
def test_kernels_with_panels(team):
    """Pc grid columns, panels of 2 over 8 columns (panels 0..3 dealt round-robin): per pass and
    own panel one syrk and, right of panel 0, one gemm for the Gram rows; with Pc > 1 one trsm
    (L^-1) and per own panel one trmm plus, right of panel 0, one gemm for Q."""
    n, w = 8, 2
    Pc = 2 if team.size % 2 == 0 else 1
    A = pgas.from_numpy(conditioned(96, n, 10.0), dist=(BLOCKED, NONE), root=None)
    seen = []
    with intercept_compute(lambda nm, key, fl, rs, fn, args, kw: seen.append(nm) or fn(*args, **kw)):
        Q, R = linalg.cholqr2(A, grid=(team.size // Pc, Pc), panel=w)
    try:
        c = team.rank % Pc
        mine = list(range(c, n // w, Pc))
        gram = {"syrk": len(mine), "gemm": sum(p > 0 for p in mine)}
        per_pass = Counter(potrf=1, trsm=1, **gram)
        if Pc > 1:
            per_pass.update(trmm=len(mine), gemm=sum(p > 0 for p in mine))
        want = Counter({k: 2 * v for k, v in per_pass.items()})
        want["trmm"] += 1
        assert Counter(seen) == want
    finally:
        Q.free()
        A.free()


@pytest.mark.mpi
def test_bad_arguments_raise_value_error_before_communicating(team):
    P = team.size
    tall = pgas.zeros((40, 8), dist=(BLOCKED, NONE))
    wide = pgas.zeros((6, 8), dist=(BLOCKED, NONE))
    cases = [dict(panel=0), dict(panel=-2), dict(panel=2.5), dict(grid=(P + 1, 1)), dict(grid=(1, 1, 1)),
             dict(grid="auto")]
    if P > 1:
        cases.append(dict(grid=(1, P), panel=8))            # one panel, P grid columns
    calls = []
    try:
        with intercept(lambda t, nm, nb, fn, args, kw: calls.append(nm) or fn(*args, **kw)):
            for kw in cases:
                with pytest.raises(ValueError):
                    linalg.cholqr2(tall, **kw)
            with pytest.raises(ValueError, match="DistArray"):
                linalg.cholqr2(np.ones((4, 2)))
            with pytest.raises(ValueError, match="tall"):
                linalg.cholqr2(wide)
        assert calls == []
    finally:
        tall.free()
        wide.free()


@pytest.mark.mpi
@pytest.mark.parametrize("grid", ["rows", "auto"])
def test_rank_deficient_raises_on_every_rank(team, grid):
    a = conditioned(60, 5, 10.0)
    a[:, 3] = 0.0                                           # Gram pivot exactly zero
    A = pgas.from_numpy(a, dist=(BLOCKED, NONE), root=None)
    try:
        with pytest.raises(linalg.NotPositiveDefiniteError, match="rank-deficient") as exc:
            linalg.cholqr2(A, grid=grid_of(team, grid), panel=1)
        assert isinstance(exc.value, np.linalg.LinAlgError) and exc.value.column == 3
        assert team.allgather(str(exc.value)) == [str(exc.value)] * team.size
    finally:
        A.free()


def test_gather_receive_buffers_are_reused_per_size():
    """The Allgatherv receive buffer is kept per size (a few sizes), so its pages stay mapped: a
    tuner run that skips the gather then unpacks from mapped pages, as a real run does."""
    from hpcsuite.linalg import cholqr
    cholqr._RECEIVE.clear()
    a = cholqr._receive_buffer(1000)
    b = cholqr._receive_buffer(2000)
    assert cholqr._receive_buffer(1000) is a and cholqr._receive_buffer(2000) is b
    for n in range(3000, 3000 + cholqr._RECEIVE_KEEP):
        cholqr._receive_buffer(n)
    assert len(cholqr._RECEIVE) == cholqr._RECEIVE_KEEP and 1000 not in cholqr._RECEIVE
    assert cholqr._receive_buffer(1000) is not a          # dropped, made anew
