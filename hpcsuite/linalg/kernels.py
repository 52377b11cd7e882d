"""Local BLAS/LAPACK kernels of the distributed factorizations, each one observable.

Every kernel runs through :func:`hpcsuite.runtime.compute` with its routine name, an integer key
(dimensions and flags, never data) and its flop count, so ``hpcsuite.tune`` can time, count or skip
it. Keys, in order:

=========  ===============================  ===============================
kernel     key                              flops
=========  ===============================  ===============================
``potrf``  ``(n, lower)``                   ``n^3/3 + n^2/2 + n/6``
``trsm``   ``(m, n, right, lower, trans)``  ``m n^2`` right, ``n m^2`` left
``trmm``   ``(m, n, right, lower, trans)``  as ``trsm``
``syrk``   ``(n, k, lower, trans)``         ``k n (n + 1)``
``gemm``   ``(m, n, k, trans_a, trans_b)``  ``2 m n k``
=========  ===============================  ===============================

(flags are 0 or 1; ``m, n`` are the output's shape, ``k`` the inner dimension.)

Why not the ``scipy.linalg.blas`` wrappers: they take whole contiguous arrays and have no
leading-dimension arguments, so updating a sub-block of a rank's local matrix in place would copy it
in and out around every call (measured: the same blocked Cholesky of n = 4000 on one BLAS thread
ran 1.2x (b = 512) to 1.7x (b = 64) slower that way). The kernels below call the very same routines
(SciPy's own BLAS/LAPACK: the Fortran entry points SciPy exports in ``scipy.linalg.cython_blas`` /
``cython_lapack``) with pointers and leading dimensions, so any NumPy view with unit stride along one
axis (C or Fortran order, a block of a larger matrix) is read and written in place. A C-ordered view
is handed to BLAS as the transpose of a column-major matrix, with the transposition folded into the
routine's flags. Other views (no unit stride) are copied into a Fortran-ordered temporary and back.

All kernels are local (no communication) and only accept float64 arrays.
"""
from __future__ import annotations

import ctypes

import numpy as np
from scipy.linalg import cython_blas, cython_lapack

from ..runtime import compute

__all__ = ["potrf", "trsm", "trmm", "syrk", "gemm", "spd_reset", "NotPositiveDefiniteError"]


class NotPositiveDefiniteError(np.linalg.LinAlgError):
    """A matrix (block) handed to Cholesky is not positive definite.

    Attributes
    ----------
    column : int or None
        Global index of the column where the factorization broke down (the leading minor of order
        ``column + 1`` is not positive definite), when known.
    block : int or None
        The block column that was being factored, when known.
    """

    def __init__(self, msg: str, column: int | None = None, block: int | None = None):
        super().__init__(msg)
        self.column, self.block = column, block


# ---------------------------------------------------------------------- raw routines
_P = ctypes.c_void_p


def _routine(module, name: str, nargs: int):
    """The Fortran routine ``name`` SciPy exports in ``module`` as a ctypes function (all
    arguments by pointer, as Fortran passes them)."""
    cap = module.__pyx_capi__[name]
    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = ctypes.c_char_p, [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    sig = api.PyCapsule_GetName(cap)
    if b"int *" not in sig:     # 32-bit integer (LP64) interface, as SciPy's wheels and builds use
        raise ImportError(f"hpcsuite.linalg: unexpected signature of scipy's {name}: {sig!r}")
    return ctypes.CFUNCTYPE(None, *([_P] * nargs))(api.PyCapsule_GetPointer(cap, sig))


_dgemm = _routine(cython_blas, "dgemm", 13)
_dsyrk = _routine(cython_blas, "dsyrk", 10)
_dtrsm = _routine(cython_blas, "dtrsm", 11)
_dtrmm = _routine(cython_blas, "dtrmm", 11)
_dpotrf = _routine(cython_lapack, "dpotrf", 5)

_CH = {c: ctypes.c_char(c.encode()) for c in "NTLRUD"}


def _c(flag: str):
    return ctypes.byref(_CH[flag])


def _i(v: int):
    return ctypes.byref(ctypes.c_int(int(v)))


def _d(v: float):
    return ctypes.byref(ctypes.c_double(float(v)))


class _Mat:
    """A 2-D float64 view seen as a column-major matrix ``M`` with ``x == M`` or ``x == M.T``.

    ``t`` says which; ``ptr``/``ld`` address ``M``. A view without a unit stride is replaced by a
    Fortran-ordered copy, written back by :meth:`done` when the kernel wrote to it.
    """

    __slots__ = ("x", "tmp", "ptr", "ld", "t")

    def __init__(self, x: np.ndarray, name: str, write: bool = False):
        if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != np.float64:
            raise ValueError(f"{name} must be a 2-D float64 NumPy array, got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        if write and not x.flags.writeable:
            raise ValueError(f"{name} is read-only")
        self.x, self.tmp = x, None
        m, n = x.shape
        s0, s1 = x.strides
        it = x.itemsize
        if (s0 == it or m <= 1) and (n <= 1 or (s1 >= max(m, 1) * it and s1 % it == 0)):
            self.t, self.ld = False, max(s1 // it if n > 1 else m, 1)
        elif (s1 == it or n <= 1) and (m <= 1 or (s0 >= max(n, 1) * it and s0 % it == 0)):
            self.t, self.ld = True, max(s0 // it if m > 1 else n, 1)
        else:                       # no unit stride (or negative strides): work on a copy
            self.tmp = np.asfortranarray(x)
            self.t, self.ld = False, max(m, 1)
        self.ptr = _P((self.tmp if self.tmp is not None else x).ctypes.data)

    def done(self) -> None:
        if self.tmp is not None:
            self.x[...] = self.tmp


def _flip(flag: bool, t: bool) -> str:
    return "T" if flag != t else "N"


def _uplo(lower: bool, t: bool) -> str:
    return "L" if lower != t else "U"


# ---------------------------------------------------------------------- raw calls (no hook)
def _gemm_raw(a, b, c, alpha, beta, trans_a, trans_b):
    m, n = c.shape
    k = a.shape[0] if trans_a else a.shape[1]
    if m == 0 or n == 0:
        return c
    if k == 0:
        c *= beta
        return c
    A, B, C = _Mat(a, "a"), _Mat(b, "b"), _Mat(c, "c", write=True)
    if not C.t:      # C = alpha op(a) op(b) + beta C
        _dgemm(_c(_flip(trans_a, A.t)), _c(_flip(trans_b, B.t)), _i(m), _i(n), _i(k), _d(alpha),
               A.ptr, _i(A.ld), B.ptr, _i(B.ld), _d(beta), C.ptr, _i(C.ld))
    else:            # C^T = alpha op(b)^T op(a)^T + beta C^T
        _dgemm(_c(_flip(not trans_b, B.t)), _c(_flip(not trans_a, A.t)), _i(n), _i(m), _i(k),
               _d(alpha), B.ptr, _i(B.ld), A.ptr, _i(A.ld), _d(beta), C.ptr, _i(C.ld))
    C.done()
    return c


def _syrk_raw(a, c, alpha, beta, lower, trans):
    n = c.shape[0]
    k = a.shape[0] if trans else a.shape[1]
    if n == 0:
        return c
    A, C = _Mat(a, "a"), _Mat(c, "c", write=True)
    # op(a) op(a)^T is symmetric, so C^T gets the same update: only the triangle flips
    _dsyrk(_c(_uplo(lower, C.t)), _c(_flip(trans, A.t)), _i(n), _i(k), _d(alpha), A.ptr,
           _i(A.ld), _d(beta), C.ptr, _i(C.ld))
    C.done()
    return c


def _tr_raw(routine, a, b, alpha, right, lower, trans, unit):
    m, n = b.shape
    if m == 0 or n == 0:
        return b
    A, B = _Mat(a, "a"), _Mat(b, "b", write=True)
    uplo, ta = _uplo(lower, A.t), _flip(trans, A.t)
    side = "R" if right else "L"
    if B.t:          # B^T: the other side, the transposed operator
        side = "L" if right else "R"
        ta = "N" if ta == "T" else "T"
        m, n = n, m
    routine(_c(side), _c(uplo), _c(ta), _c("U" if unit else "N"), _i(m), _i(n), _d(alpha),
            A.ptr, _i(A.ld), B.ptr, _i(B.ld))
    B.done()
    return b


def _potrf_raw(a, lower) -> int:
    n = a.shape[0]
    if n == 0:
        return 0
    A = _Mat(a, "a", write=True)
    info = ctypes.c_int(0)
    _dpotrf(_c(_uplo(lower, A.t)), _i(n), A.ptr, _i(A.ld), ctypes.byref(info))
    A.done()
    return info.value


# ---------------------------------------------------------------------- validation
def _square(a, name: str) -> int:
    if getattr(a, "ndim", 0) != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{name} must be a square 2-D array, got shape {getattr(a, 'shape', None)}")
    return a.shape[0]


def _shape_error(what: str, *shapes) -> ValueError:
    return ValueError(f"{what}: shapes do not conform: " + ", ".join(str(s) for s in shapes))


# ---------------------------------------------------------------------- public kernels
def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, *, alpha: float = 1.0, beta: float = 0.0,
         trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """``c = alpha op(a) op(b) + beta c`` in place (BLAS ``dgemm``); returns ``c``. Local.

    ``op(x)`` is ``x.T`` when the matching ``trans_*`` flag is set. Key ``(m, n, k, trans_a,
    trans_b)`` with ``c`` of shape ``m x n``.
    """
    ka, kb_ = (a.shape[::-1] if trans_a else a.shape), (b.shape[::-1] if trans_b else b.shape)
    if ka[0] != c.shape[0] or kb_[1] != c.shape[1] or ka[1] != kb_[0]:
        raise _shape_error("gemm", a.shape, b.shape, c.shape)
    m, n, k = c.shape[0], c.shape[1], ka[1]
    return compute("gemm", (m, n, k, int(trans_a), int(trans_b)), _gemm_raw, a, b, c, alpha, beta,
                   trans_a, trans_b, flops=2.0 * m * n * k)


def syrk(a: np.ndarray, c: np.ndarray, *, alpha: float = 1.0, beta: float = 0.0, lower: bool = True,
         trans: bool = False) -> np.ndarray:
    """``c = alpha op(a) op(a)^T + beta c`` on one triangle of ``c`` (BLAS ``dsyrk``). Local.

    ``op(a)`` is ``a`` (``n x k``) or, with ``trans``, ``a.T``. Only the ``lower`` (or upper)
    triangle of ``c`` is written; the other is left alone. Key ``(n, k, lower, trans)``.
    """
    n = _square(c, "syrk: c")
    an, k = a.shape[::-1] if trans else a.shape
    if an != n:
        raise _shape_error("syrk", a.shape, c.shape)
    return compute("syrk", (n, k, int(lower), int(trans)), _syrk_raw, a, c, alpha, beta, lower,
                   trans, flops=float(k) * n * (n + 1))


def _tr_check(name, a, b, right):
    s = _square(a, f"{name}: a")
    if b.ndim != 2 or b.shape[1 if right else 0] != s:
        raise _shape_error(name, a.shape, b.shape)
    m, n = b.shape
    return m, n, (m * n * n if right else n * m * m)


def trsm(a: np.ndarray, b: np.ndarray, *, right: bool = False, lower: bool = True, trans: bool = False,
         unit_diag: bool = False, alpha: float = 1.0) -> np.ndarray:
    """Triangular solve in place (BLAS ``dtrsm``): ``b = alpha op(a)^-1 b``, or with ``right``
    ``b = alpha b op(a)^-1``; returns ``b``. Local.

    ``a`` is triangular (``lower`` or upper; the other triangle is not referenced), ``op(a)`` is
    ``a.T`` with ``trans``. Key ``(m, n, right, lower, trans)`` with ``b`` of shape ``m x n``.
    """
    m, n, flops = _tr_check("trsm", a, b, right)
    return compute("trsm", (m, n, int(right), int(lower), int(trans)), _tr_raw, _dtrsm, a, b,
                   alpha, right, lower, trans, unit_diag, flops=float(flops))


def trmm(a: np.ndarray, b: np.ndarray, *, right: bool = False, lower: bool = True, trans: bool = False,
         unit_diag: bool = False, alpha: float = 1.0) -> np.ndarray:
    """Triangular product in place (BLAS ``dtrmm``): ``b = alpha op(a) b``, or with ``right``
    ``b = alpha b op(a)``; returns ``b``. Local. Arguments and key as :func:`trsm`."""
    m, n, flops = _tr_check("trmm", a, b, right)
    return compute("trmm", (m, n, int(right), int(lower), int(trans)), _tr_raw, _dtrmm, a, b,
                   alpha, right, lower, trans, unit_diag, flops=float(flops))


def spd_reset(a: np.ndarray) -> None:
    """Overwrite the square block ``a`` with ``4n I`` (symmetric positive definite, condition
    number 1): what :func:`potrf` hands an interceptor as its ``reset``. Local."""
    n = a.shape[0]
    a[...] = 0.0
    a[np.diag_indices(n)] = 4.0 * max(n, 1)


def _potrf_checked(a, lower, block, offset):
    info = _potrf_raw(a, lower)
    if info < 0:                                  # a wrong argument: a bug in this module
        raise RuntimeError(f"potrf: LAPACK dpotrf rejected argument {-info}")
    what = "is not positive"
    if info == 0:
        # OpenBLAS's dpotrf lets NaN through (only reference LAPACK tests for it): a non-finite
        # diagonal means NaN or inf in the input (an O(n) check)
        bad = np.flatnonzero(~np.isfinite(np.diagonal(a)))
        if not bad.size:
            return a
        info, what = int(bad[0]) + 1, "is not finite (NaN or inf in the input)"
    col = offset + info - 1
    where = f"block column {block}, global column {col}" if block is not None else f"column {col}"
    raise NotPositiveDefiniteError(f"potrf: the matrix is not positive definite: the leading minor "
                                   f"of order {col + 1} {what} ({where})", column=col, block=block)


def potrf(a: np.ndarray, *, lower: bool = True, block: int | None = None, offset: int = 0) -> np.ndarray:
    """Cholesky factorization of the square block ``a`` in place (LAPACK ``dpotrf``). Local.

    With ``lower`` the lower triangle becomes ``L`` (``a = L L^T``), else the upper triangle becomes
    ``U`` (``a = U^T U``); the other triangle is neither read nor written. Key ``(n, lower)``.
    ``reset`` (for an interceptor) overwrites ``a`` with :func:`spd_reset`.

    Parameters
    ----------
    block, offset : int, optional
        Only for the error message: the block column this block is, and the global index of its
        first column.

    Raises
    ------
    NotPositiveDefiniteError
        (a ``numpy.linalg.LinAlgError``) when a leading minor is not positive definite (or NaN);
        its message and attributes name the global column and the block column.
    """
    n = _square(a, "potrf: a")
    return compute("potrf", (n, int(lower)), _potrf_checked, a, lower, block, offset,
                   flops=n ** 3 / 3.0 + n ** 2 / 2.0 + n / 6.0, reset=lambda: spd_reset(a))
