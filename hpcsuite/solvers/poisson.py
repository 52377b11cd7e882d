"""Poisson solver for a box periodic in x and y with walls in z: FFTs in x and y, tridiagonal in z.

Solves the *discrete* equation ``L p = f`` where ``L`` is the 2nd-order finite-volume Laplacian of
a staggered (Arakawa C) grid::

    (p[i+1] - 2 p[i] + p[i-1]) / dx^2 + (same in y)
      + ((p[k+1] - p[k]) / dzh[k+1] - (p[k] - p[k-1]) / dzh[k]) / dzf[k]

with zero gradient through the bottom and top walls (``dzh[0]``/``dzh[nz]`` terms absent). In
Fourier space along x and y the periodic second differences become the *modified wavenumbers*
``-4 sin^2(pi m / n) / dx^2``, so the solve is exact to rounding for the discrete operator (a
projection built on it leaves a discretely divergence-free field); each horizontal wavenumber then
needs one tridiagonal solve in z (Thomas algorithm, factors precomputed, vectorised over the
wavenumbers). The mean (0, 0) mode is defined up to a constant, fixed by ``p = 0`` in the lowest
level.

Distribution: the right-hand side comes as blocks of a ``(BLOCKED, BLOCKED, NONE)`` layout over a
``px x py`` process grid (z-pencils). Every transpose is a :func:`hpcsuite.pgas.copy` (one
``MPI_Alltoallw``) between two layouts:

* ``"slab"`` (when every rank can hold whole lines, ``P <= ny`` and ``P <= nx/2 + 1``): blocks of
  whole x-lines (or y-lines when ``py = 1``, where the field blocks already are such slabs) for the
  real FFT, then whole lines of the other horizontal axis with all of z for the complex FFT and the
  tridiagonal solve, and back: two redistributions per solve when ``px = 1`` or ``py = 1``, four
  otherwise.
* ``"pencil"`` (any rank count the grid allows): x-pencils (real FFT along x), y-pencils (complex
  FFT along y), z-pencils (tridiagonal solve), and back: six redistributions.

On one rank no redistribution happens.

FFTs: :mod:`scipy.fft` on the CPU, ``xp.fft`` (cuFFT through CuPy) on the GPU.
"""
from __future__ import annotations

import math

import numpy as np

from . import thomas

__all__ = ["PoissonFFT", "laplacian_eigenvalues", "pencil_grid", "choose_layout"]


def laplacian_eigenvalues(n: int, spacing: float, half: bool = False) -> np.ndarray:
    """Eigenvalues ``-4 sin^2(pi m / n) / spacing^2`` of the periodic 2nd difference, in FFT order
    (``m = 0 .. n-1``, or ``0 .. n//2`` for a real FFT with ``half=True``). Local."""
    m = np.arange(n // 2 + 1 if half else n)
    return -4.0 * np.sin(np.pi * m / n) ** 2 / spacing ** 2


def pencil_grid(p: int, n1: int, n2: int) -> tuple[int, int]:
    """``(q1, q2)`` with ``q1 q2 = p``, ``q1 <= n1``, ``q2 <= n2``, as balanced as possible. Local.

    Raises ``ValueError`` when no such split exists (too many ranks for the grid).
    """
    best = None
    for q2 in range(1, p + 1):
        if p % q2:
            continue
        q1 = p // q2
        if q1 <= n1 and q2 <= n2:
            score = abs(math.log(q1 / q2))
            if best is None or score < best[0]:
                best = (score, q1, q2)
    if best is None:
        raise ValueError(f"{p} ranks cannot be split into pencils over a {n1} x {n2} plane")
    return best[1], best[2]


def choose_layout(shape, dims, layout: str = "auto") -> tuple[str, int]:
    """``(layout, a)``: the transposes :class:`PoissonFFT` uses for ``shape`` on a ``px x py``
    process grid, and the axis of its real FFT. Local.

    Raises ``ValueError`` (the same on every rank) when the ranks fit neither slabs nor pencils.
    """
    nx, ny, nz = (int(n) for n in shape)
    px, py = (int(d) for d in dims)
    P = px * py
    if P == 1:
        return "serial", 0
    a = 1 if (py == 1 and px > 1) else 0          # y-lines are whole in the blocks when py = 1
    n = (nx, ny)
    slab_ok = P <= n[1 - a] and P <= n[a] // 2 + 1
    if layout == "slab" or (layout == "auto" and slab_ok):
        if not slab_ok:
            raise ValueError(f"{P} ranks cannot hold slabs of the {nx} x {ny} plane")
        return "slab", a
    pencil_grid(P, ny, nz)
    pencil_grid(P, nx // 2 + 1, nz)
    if px > nx // 2 + 1:
        raise ValueError(f"{px} ranks along x exceed the {nx // 2 + 1} x-wavenumbers")
    return "pencil", 0


class PoissonFFT:
    """FFT/tridiagonal Poisson solver. Creating one is collective over ``team``.

    Parameters
    ----------
    shape : (int, int, int)
        Global cells ``(nx, ny, nz)``.
    dx, dy : float
        Horizontal spacing.
    dzf, dzh : array_like
        Layer thicknesses (``nz``) and centre distances (``nz + 1``; first and last unused).
    team : Team
        The ranks.
    dims : (int, int)
        The ``px x py`` process grid of the right-hand-side blocks (z-pencils).
    device : {"cpu", "gpu"}
        Where the arrays live.
    xp : module
        The array namespace of the blocks passed to :meth:`solve`.
    layout : {"auto", "slab", "pencil"}
        The transposes (module docstring); ``"auto"`` takes slabs when they fit.
    """

    def __init__(self, shape, dx: float, dy: float, dzf, dzh, team, dims=(1, 1), device: str = "cpu",
                 xp=None, layout: str = "auto"):
        from .. import pgas
        nx, ny, nz = (int(n) for n in shape)
        dzf, dzh = np.asarray(dzf, dtype=np.float64), np.asarray(dzh, dtype=np.float64)
        if dzf.shape != (nz,) or dzh.shape != (nz + 1,):
            raise ValueError(f"PoissonFFT: dzf must have {nz} and dzh {nz + 1} entries, got "
                             f"{dzf.shape} and {dzh.shape}")
        px, py = (int(d) for d in dims)
        if px * py != team.size:
            raise ValueError(f"PoissonFFT: dims {px}x{py} do not match {team.size} ranks")
        if layout not in ("auto", "slab", "pencil"):
            raise ValueError(f"PoissonFFT: layout must be 'auto', 'slab' or 'pencil', got {layout!r}")
        self.shape, self.team, self.xp = (nx, ny, nz), team, xp if xp is not None else np
        self.nxh = nx // 2 + 1
        self.serial = team.size == 1
        self._fft = _fft_module(self.xp)
        B, N = pgas.BLOCKED, pgas.NONE
        kw = dict(team=team, device=device)
        P = team.size
        self.layout, self.a = choose_layout((nx, ny, nz), (px, py), layout)
        n = (nx, ny)
        half = n[self.a] // 2 + 1
        self._arrays = []
        if self.serial:
            kx, ky = slice(0, self.nxh), slice(0, ny)
        elif self.layout == "slab":
            # whole lines along a, b split over all ranks (R, C1); then a split and b whole (C2):
            # two redistributions per solve, four when the blocks must first become a-lines
            a, b = self.a, 1 - self.a
            dist_r = [None, None, N]
            dist_r[a], dist_r[b] = N, B
            grid_r = [1, 1, 1]
            grid_r[b] = P
            dist_c = [None, None, N]
            dist_c[a], dist_c[b] = B, N
            grid_c = [1, 1, 1]
            grid_c[a] = P
            cshape = [nx, ny, nz]
            cshape[a] = half
            self.direct = (px == 1 and a == 0) or (py == 1 and a == 1)
            self.A = None if self.direct else pgas.zeros((nx, ny, nz), dist=(B, B, N), grid=(px, py, 1), **kw)
            self.R = pgas.zeros((nx, ny, nz), dist=tuple(dist_r), grid=tuple(grid_r), **kw)
            self.C1 = pgas.zeros(tuple(cshape), np.complex128, dist=tuple(dist_r), grid=tuple(grid_r), **kw)
            self.C2 = pgas.zeros(tuple(cshape), np.complex128, dist=tuple(dist_c), grid=tuple(grid_c), **kw)
            self._arrays = [x for x in (self.A, self.R, self.C1, self.C2) if x is not None]
            kx, ky, _ = self.C2.local_slices
        else:
            qy, qz = pencil_grid(P, ny, nz)
            rx, rz = pencil_grid(P, self.nxh, nz)
            self.A = pgas.zeros((nx, ny, nz), dist=(B, B, N), grid=(px, py, 1), **kw)
            self.X = pgas.zeros((nx, ny, nz), dist=(N, B, B), grid=(1, qy, qz), **kw)
            cshape = (self.nxh, ny, nz)
            self.Xc = pgas.zeros(cshape, np.complex128, dist=(N, B, B), grid=(1, qy, qz), **kw)
            self.Yc = pgas.zeros(cshape, np.complex128, dist=(B, N, B), grid=(rx, 1, rz), **kw)
            self.Zc = pgas.zeros(cshape, np.complex128, dist=(B, B, N), grid=(px, py, 1), **kw)
            self._arrays = [self.A, self.X, self.Xc, self.Yc, self.Zc]
            kx, ky, _ = self.Zc.local_slices
        # Thomas factors for the local wavenumbers (z-pencil layout), vectorised over (kx, ky)
        lam = (laplacian_eigenvalues(nx, dx, half=self.a == 0)[kx][:, None]
               + laplacian_eigenvalues(ny, dy, half=self.a == 1)[ky][None, :])
        a = np.zeros(nz)
        c = np.zeros(nz)
        a[1:] = 1.0 / (dzf[1:] * dzh[1:nz])
        c[:-1] = 1.0 / (dzf[:-1] * dzh[1:nz])
        m = np.empty((nz,) + lam.shape)
        cp = np.empty_like(m)
        prev = np.zeros(lam.shape)
        for k in range(nz):
            diag = lam - a[k] - c[k]
            if k == 0 and kx.start == 0 and ky.start == 0:
                diag[0, 0] = np.inf          # the (0, 0) mode: pin p = 0 in the lowest level
            m[k] = 1.0 / (diag - a[k] * prev)
            cp[k] = c[k] * m[k]
            prev = cp[k]
        put = lambda arr: self.xp.asarray(np.ascontiguousarray(arr))    # noqa: E731
        self._m, self._cp, self._a = put(m), put(cp), [float(x) for x in a]
        self._a_dev = put(a)                     # for the GPU kernel (solvers.thomas)

    # ------------------------------------------------------------------ the solve
    def _tridiag(self, f):
        """Solve every z-column of ``f`` (local ``(kx, ky, nz)`` complex block) in place. Local."""
        xp, nz = self.xp, self.shape[2]
        if thomas.usable(f, self._m, self._cp, self._a_dev):   # one GPU kernel, not 4 nz launches
            thomas.thomas_columns(f, self._m, self._cp, self._a_dev)
            return f
        d = xp.moveaxis(f, 2, 0)                 # (nz, kx, ky) view
        m, cp, a = self._m, self._cp, self._a
        d[0] = d[0] * m[0]
        for k in range(1, nz):
            d[k] = (d[k] - a[k] * d[k - 1]) * m[k]
        for k in range(nz - 2, -1, -1):
            d[k] = d[k] - cp[k] * d[k + 1]
        return f

    def solve(self, rhs):
        """``p`` with ``L p = rhs``. Collective.

        ``rhs`` is this rank's ``(nxl, nyl, nz)`` block (no halo) of the z-pencil layout; the
        result is a new block of the same shape. The mean of ``rhs`` must vanish (it does for the
        divergence of a velocity field with walls at the bottom and top).
        """
        fft, nx = self._fft, self.shape[0]
        if self.serial:
            fh = fft.rfft(rhs, axis=0)
            fh = fft.fft(fh, axis=1)
            self._tridiag(fh)
            fh = fft.ifft(fh, axis=1)
            return fft.irfft(fh, n=nx, axis=0)
        from .. import pgas
        if self.layout == "slab":
            a, b = self.a, 1 - self.a
            n_a = self.shape[a]
            if self.direct:
                self.R.local[...] = rhs
            else:
                self.A.local[...] = rhs
                pgas.copy(self.A, self.R)
            self.C1.local[...] = fft.rfft(self.R.local, axis=a)
            pgas.copy(self.C1, self.C2)
            c2 = self.C2.local
            c2[...] = fft.fft(c2, axis=b)
            self._tridiag(c2)
            c2[...] = fft.ifft(c2, axis=b)
            pgas.copy(self.C2, self.C1)
            self.R.local[...] = fft.irfft(self.C1.local, n=n_a, axis=a)
            if self.direct:
                return self.R.local.copy()
            pgas.copy(self.R, self.A)
            return self.A.local.copy()
        self.A.local[...] = rhs
        pgas.copy(self.A, self.X)
        self.Xc.local[...] = fft.rfft(self.X.local, axis=0)
        pgas.copy(self.Xc, self.Yc)
        self.Yc.local[...] = fft.fft(self.Yc.local, axis=1)
        pgas.copy(self.Yc, self.Zc)
        self._tridiag(self.Zc.local)
        pgas.copy(self.Zc, self.Yc)
        self.Yc.local[...] = fft.ifft(self.Yc.local, axis=1)
        pgas.copy(self.Yc, self.Xc)
        self.X.local[...] = fft.irfft(self.Xc.local, n=nx, axis=0)
        pgas.copy(self.X, self.A)
        return self.A.local.copy()          # A is reused by the next solve

    def free(self) -> None:
        """Release the distributed work arrays. Collective."""
        for arr in self._arrays:
            arr.free()
        self._arrays = []


def _fft_module(xp):
    """:mod:`scipy.fft` for NumPy arrays (faster, same pocketfft), else the namespace's ``fft``."""
    name = getattr(xp, "__name__", "")
    if name in ("numpy", "array_api_compat.numpy"):
        import scipy.fft
        return scipy.fft
    return xp.fft
