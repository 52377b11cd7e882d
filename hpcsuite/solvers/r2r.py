"""Real-to-real transforms of the cell-centred (staggered) grid: DCT-II and DST-II and their inverses.

On a grid of ``n`` cell centres ``x_j = (j + 1/2) h`` the discrete Laplacian with a zero gradient
at both end faces (Neumann) is diagonalised by the DCT-II, modes ``cos(pi m (j + 1/2) / n)``,
``m = 0 .. n-1``; with a zero value at both end faces (Dirichlet, ghost ``p[-1] = -p[0]``) by the
DST-II, modes ``sin(pi m (j + 1/2) / n)``, ``m = 1 .. n``. The eigenvalue of mode ``m`` is
``-4 sin^2(pi m / (2 n)) / h^2`` in both cases (:func:`eigenvalues`).

The transforms are SciPy's unnormalised ("backward") definitions: ``dct2(x) = scipy.fft.dct(x,
type=2)``, ``idct2`` its inverse (``scipy.fft.idct(y, type=2)``, a DCT-III divided by ``2 n``), and
the same for the DST. Which implementation runs depends on the array namespace:

* NumPy: :func:`scipy.fft.dct` / :func:`scipy.fft.dst` (pocketfft; complex input is transformed
  part by part).
* CuPy: ``cupyx.scipy.fft.dct`` / ``dst`` (CuPy implements types 2 and 3, exactly the ones needed
  here), the real and imaginary parts of complex input separately (CuPy documents real input only).
* Anything else, and a CuPy without ``cupyx.scipy.fft`` (older CuPy; also the CPU stand-in of the
  tests): the DCT-II by one complex FFT of length ``n`` of the even/odd reordered input (Makhoul,
  1980), the DST-II from the DCT-II of ``(-1)^j x_j`` reversed. Written against the array API
  (``xp.fft``, ``xp.flip``, ``xp.concat``), so it runs on CuPy, NumPy and ``array_api_strict``; it
  costs about twice the library transform (a complex FFT of a real sequence) and is checked
  against SciPy in ``tests/solvers/test_poisson_public.py``.

All functions are local.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["KINDS", "eigenvalues", "forward", "inverse", "dct2", "idct2", "dst2", "idst2", "implementation"]

#: boundary condition -> transform
KINDS = {"neumann": "dct", "dirichlet": "dst"}


def eigenvalues(kind: str, n: int, spacing: float) -> np.ndarray:
    """Eigenvalues of the cell-centred 2nd difference in the order of the transform's output. Local.

    ``kind`` is ``"dct"`` (Neumann: modes ``m = 0 .. n-1``) or ``"dst"`` (Dirichlet: ``m = 1 .. n``);
    the eigenvalue of mode ``m`` is ``-4 sin^2(pi m / (2 n)) / spacing^2``.
    """
    m = np.arange(n) + (1 if kind == "dst" else 0)
    return -4.0 * np.sin(np.pi * m / (2 * n)) ** 2 / spacing ** 2


def _name(xp) -> str:
    return getattr(xp, "__name__", "")


@functools.lru_cache(maxsize=None)
def _cupyx_fft():
    """``cupyx.scipy.fft`` when it has the DCT/DST (CuPy >= 12), else None."""
    try:
        import cupyx.scipy.fft as cfft
    except Exception:  # noqa: BLE001 - no cupyx.scipy.fft (older CuPy, the test stand-in)
        return None
    return cfft if all(hasattr(cfft, f) for f in ("dct", "idct", "dst", "idst")) else None


def implementation(xp) -> str:
    """``"scipy"``, ``"cupyx"`` or ``"fft"``: what runs the transforms for namespace ``xp``. Local."""
    name = _name(xp)
    if name in ("numpy", "array_api_compat.numpy"):
        return "scipy"
    if name.split(".")[0] == "cupy" and _cupyx_fft() is not None:
        return "cupyx"
    return "fft"


def _library(xp, fname: str, x, axis: int):
    if implementation(xp) == "scipy":
        import scipy.fft
        return getattr(scipy.fft, fname)(x, type=2, axis=axis)
    f = getattr(_cupyx_fft(), fname)
    if x.dtype.kind == "c":
        return f(x.real, type=2, axis=axis) + 1j * f(x.imag, type=2, axis=axis)
    return f(x, type=2, axis=axis)


def _is_complex(xp, x) -> bool:
    return x.dtype == xp.complex64 or x.dtype == xp.complex128


def _concat(xp, arrays, axis: int):
    """``xp.concat`` (array API), ``xp.concatenate`` where the namespace predates it (CuPy < 14)."""
    f = getattr(xp, "concat", None) or xp.concatenate
    return f(arrays, axis=axis)


def _astype(xp, x, dtype):
    return xp.astype(x, dtype) if hasattr(xp, "astype") else x.astype(dtype)


def _join(xp, re, im):
    """``re + i im`` for two real arrays."""
    return _astype(xp, re, xp.complex128) + _astype(xp, im, xp.complex128) * 1j


def _twiddle(xp, n: int, sign: float):
    """``exp(sign i pi k / (2 n))``, ``k = 0 .. n-1``, as a complex128 array of ``xp``."""
    k = xp.arange(n, dtype=xp.float64)
    return xp.exp(_astype(xp, k * (sign * np.pi / (2 * n)), xp.complex128) * 1j)


def _dct2_fft(xp, x, axis: int):
    """Unnormalised DCT-II along ``axis`` by one complex FFT (Makhoul). Local."""
    if _is_complex(xp, x):
        return _join(xp, _dct2_fft(xp, xp.real(x), axis), _dct2_fft(xp, xp.imag(x), axis))
    v = xp.moveaxis(x, axis, -1)
    n = v.shape[-1]
    # v[j] = x[2j] (j < ceil(n/2)), v[n-1-j] = x[2j+1]
    w = _concat(xp, (v[..., ::2], xp.flip(v[..., 1::2], axis=-1)), axis=-1)
    V = xp.fft.fft(_astype(xp, w, xp.complex128), axis=-1)
    y = 2.0 * xp.real(V * _twiddle(xp, n, -1.0))
    return xp.moveaxis(y, -1, axis)


def _idct2_fft(xp, y, axis: int):
    """Inverse of :func:`_dct2_fft` (a DCT-III divided by ``2 n``) by one complex inverse FFT. Local."""
    if _is_complex(xp, y):
        return _join(xp, _idct2_fft(xp, xp.real(y), axis), _idct2_fft(xp, xp.imag(y), axis))
    u = xp.moveaxis(y, axis, -1)
    n = u.shape[-1]
    # V[k] = exp(i pi k / 2n) (y[k] - i y[n-k]) / 2, with y[n] = 0
    rev = _concat(xp, (u[..., :1] * 0.0, xp.flip(u[..., 1:], axis=-1)), axis=-1)
    V = (_astype(xp, u, xp.complex128) - 1j * _astype(xp, rev, xp.complex128)) * (_twiddle(xp, n, 1.0) * 0.5)
    v = xp.real(xp.fft.ifft(V, axis=-1))
    # x[2j] = v[j], x[2j+1] = v[n-1-j]: interleave by stacking (no strided assignment: array API)
    h = (n + 1) // 2
    even, odd = v[..., :h], xp.flip(v[..., h:], axis=-1)
    if odd.shape[-1] < h:
        odd = _concat(xp, (odd, even[..., :1] * 0.0), axis=-1)
    x = xp.reshape(xp.stack((even, odd), axis=-1), tuple(v.shape[:-1]) + (2 * h,))[..., :n]
    return xp.moveaxis(x, -1, axis)


def _signs(xp, n: int, ndim: int, axis: int):
    s = 1.0 - 2.0 * _astype(xp, xp.arange(n) % 2, xp.float64)
    shape = [1] * ndim
    shape[axis] = n
    return xp.reshape(s, tuple(shape))


def dct2(x, axis: int, xp=np):
    """Unnormalised DCT-II of ``x`` along ``axis`` (as ``scipy.fft.dct(x, type=2)``). Local."""
    if implementation(xp) != "fft":
        return _library(xp, "dct", x, axis)
    return _dct2_fft(xp, x, axis)


def idct2(y, axis: int, xp=np):
    """Inverse of :func:`dct2` (as ``scipy.fft.idct(y, type=2)``). Local."""
    if implementation(xp) != "fft":
        return _library(xp, "idct", y, axis)
    return _idct2_fft(xp, y, axis)


def dst2(x, axis: int, xp=np):
    """Unnormalised DST-II of ``x`` along ``axis`` (as ``scipy.fft.dst(x, type=2)``). Local.

    Fallback: ``DST-II(x)[k] = DCT-II((-1)^j x_j)[n-1-k]``.
    """
    if implementation(xp) != "fft":
        return _library(xp, "dst", x, axis)
    axis = axis % x.ndim
    return xp.flip(_dct2_fft(xp, x * _signs(xp, x.shape[axis], x.ndim, axis), axis), axis=axis)


def idst2(y, axis: int, xp=np):
    """Inverse of :func:`dst2` (as ``scipy.fft.idst(y, type=2)``). Local."""
    if implementation(xp) != "fft":
        return _library(xp, "idst", y, axis)
    axis = axis % y.ndim
    return _idct2_fft(xp, xp.flip(y, axis=axis), axis) * _signs(xp, y.shape[axis], y.ndim, axis)


def forward(kind: str, x, axis: int, xp=np):
    """``dct2`` (``kind="dct"``) or ``dst2`` (``"dst"``) of ``x`` along ``axis``. Local."""
    return (dct2 if kind == "dct" else dst2)(x, axis, xp)


def inverse(kind: str, y, axis: int, xp=np):
    """``idct2`` or ``idst2`` of ``y`` along ``axis``. Local."""
    return (idct2 if kind == "dct" else idst2)(y, axis, xp)
