"""Poisson and Helmholtz solvers for boxes: fast transforms in x and y, a tridiagonal solve in z.

Solves the *discrete* equation ``(L - lam) p = f`` (``lam >= 0``; ``lam = 0``: Poisson) where ``L``
is the 2nd-order finite-volume Laplacian of a staggered (cell-centred, Arakawa C) grid::

    (p[i+1] - 2 p[i] + p[i-1]) / dx^2 + (same in y)
      + ((p[k+1] - p[k]) / dzh[k+1] - (p[k] - p[k-1]) / dzh[k]) / dzf[k]

with a boundary condition per axis:

* x and y: ``"periodic"``, ``"neumann"`` (zero gradient through the end faces: ghost ``p[-1] =
  p[0]``) or ``"dirichlet"`` (zero value on the end faces: ghost ``p[-1] = -p[0]``). Each is
  diagonalised by a transform: the FFT (modified wavenumbers ``-4 sin^2(pi m / n) / dx^2``), the
  DCT-II and the DST-II (``-4 sin^2(pi m / (2 n)) / dx^2``, :mod:`hpcsuite.solvers.r2r`).
* z (walls at the bottom and the top, any layer thicknesses ``dzf``): ``"neumann"`` or
  ``"dirichlet"`` at each wall (for a Dirichlet wall the distance from the first centre to the
  wall, ``dzf[0] / 2``, enters the flux). Each horizontal wavenumber then needs one tridiagonal
  solve in z (Thomas algorithm, factors precomputed, vectorised over the wavenumbers).

The solve is exact to rounding for the discrete operator. With ``lam = 0`` and no Dirichlet side
the operator is singular (constants are in its null space): a solution exists only when the
volume-weighted mean of ``f`` vanishes; :class:`PoissonSolver` then returns the solution with
zero mean (``singular="raise"`` refuses a right-hand side whose mean is not zero to rounding,
``"project"`` removes that mean first: the least-squares solution). :class:`PoissonFFT` (the LES's
pressure solver, periodic in x and y, Neumann walls) fixes the constant by ``p = 0`` in the
lowest level of the mean mode instead, as it always has.

Distribution: the solver works on blocks of a ``(BLOCKED, BLOCKED, NONE)`` layout over a
``px x py`` process grid (z-pencils). Every transpose is a :func:`hpcsuite.pgas.copy` (one
``MPI_Alltoallw``) between two layouts:

* ``"slab"`` (when every rank can hold whole lines: ``P`` at most the lines of the other
  horizontal axis and the first axis's wavenumbers): blocks of whole x-lines (or y-lines when
  ``py = 1``, where the field blocks already are such slabs) for the first transform, then whole
  lines of the other horizontal axis with all of z for the second transform and the tridiagonal
  solve, and back: two redistributions per solve when ``px = 1`` or ``py = 1``, four otherwise.
* ``"pencil"`` (any rank count the grid allows): x-pencils (transform along x), y-pencils
  (transform along y), z-pencils (tridiagonal solve), and back: six redistributions.

On one rank no redistribution happens. :meth:`PoissonSolver.solve` takes and returns
:class:`~hpcsuite.pgas.DistArray` objects of any distribution (others than the z-pencils cost one
more redistribution each way).

Transforms: the first periodic axis of real data gets a real FFT (half the wavenumbers), a periodic
axis of complex data a complex FFT; :mod:`scipy.fft` on the CPU, ``xp.fft`` (cuFFT through CuPy)
and ``cupyx.scipy.fft`` (DCT/DST) on the GPU, one source for both.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..runtime import InputError, Team, agree
from . import r2r, thomas

__all__ = ["PoissonSolver", "PoissonFFT", "BoxSolverBase", "BOUNDARY_CONDITIONS", "MEAN_RTOL",
           "laplacian_eigenvalues", "pencil_grid", "choose_layout"]

#: the boundary conditions of an axis (z: only ``"neumann"`` and ``"dirichlet"``)
BOUNDARY_CONDITIONS = ("periodic", "neumann", "dirichlet")

#: a singular problem's right-hand side counts as mean-free when ``|sum f dV| <= MEAN_RTOL *
#: sum |f| dV`` (rounding in the sums of a mean-free field is ~1e-16 relative times log2 of the cells)
MEAN_RTOL = 1e-9


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


def _spectral_sizes(n, bc, a: int) -> list[int]:
    """Wavenumbers per horizontal axis when axis ``a`` is transformed first: the first periodic
    axis met while the data are still real gets a real FFT (``n // 2 + 1``)."""
    spec = list(n)
    b = 1 - a
    if bc[a] == "periodic":
        spec[a] = n[a] // 2 + 1
    elif bc[b] == "periodic":
        spec[b] = n[b] // 2 + 1
    return spec


def choose_layout(shape, dims, layout: str = "auto", bc=("periodic", "periodic")) -> tuple[str, int]:
    """``(layout, a)``: the transposes the solvers use for ``shape`` on a ``px x py`` process grid,
    and the horizontal axis transformed first. Local.

    ``bc`` are the x and y boundary conditions (they decide how many wavenumbers each axis has).
    Raises ``ValueError`` (the same on every rank) when the ranks fit neither slabs nor pencils.
    """
    nx, ny, nz = (int(n) for n in shape)
    px, py = (int(d) for d in dims)
    P = px * py
    if P == 1:
        return "serial", 0
    a = 1 if (py == 1 and px > 1) else 0          # y-lines are whole in the blocks when py = 1
    n = (nx, ny)
    spec = _spectral_sizes(n, bc, a)
    slab_ok = P <= n[1 - a] and P <= spec[a]
    if layout == "slab" or (layout == "auto" and slab_ok):
        if not slab_ok:
            raise ValueError(f"{P} ranks cannot hold slabs of the {nx} x {ny} plane")
        return "slab", a
    spec = _spectral_sizes(n, bc, 0)
    pencil_grid(P, ny, nz)
    pencil_grid(P, spec[0], nz)
    if px > spec[0]:
        raise ValueError(f"{px} ranks along x exceed the {spec[0]} x-wavenumbers")
    if py > spec[1]:
        raise ValueError(f"{py} ranks along y exceed the {spec[1]} y-wavenumbers")
    return "pencil", 0


class _Axis:
    """The transform of one horizontal axis. Local."""

    def __init__(self, bc: str, n: int, spacing: float, real_in: bool, fft, xp):
        self.bc, self.n, self.h, self.fft, self.xp = bc, n, spacing, fft, xp
        self.periodic = bc == "periodic"
        self.half = self.periodic and real_in                  # real FFT: n // 2 + 1 wavenumbers
        self.m = n // 2 + 1 if self.half else n
        self.complex_out = self.periodic or not real_in
        self.dtype = np.complex128 if self.complex_out else np.float64
        self.in_place = not self.half and self.complex_out == (not real_in)   # same shape and dtype
        self.kind = r2r.KINDS.get(bc)

    def eigenvalues(self) -> np.ndarray:
        if self.periodic:
            return laplacian_eigenvalues(self.n, self.h, half=self.half)
        return r2r.eigenvalues(self.kind, self.n, self.h)

    def forward(self, x, axis: int):
        if self.periodic:
            return self.fft.rfft(x, axis=axis) if self.half else self.fft.fft(x, axis=axis)
        return r2r.forward(self.kind, x, axis, self.xp)

    def inverse(self, y, axis: int):
        if self.periodic:
            return self.fft.irfft(y, n=self.n, axis=axis) if self.half else self.fft.ifft(y, axis=axis)
        return r2r.inverse(self.kind, y, axis, self.xp)


class BoxSolverBase:
    """The transforms, transposes and z-solves shared by :class:`PoissonSolver` and
    :class:`PoissonFFT` (module docstring). Not for direct use: create one of those two."""

    _legacy = False

    # ------------------------------------------------------------------ set-up
    def _setup(self, shape, dx, dy, dzf, dzh, bcs, shift, team, dims, device, xp, layout):
        from .. import pgas
        nx, ny, nz = shape
        self.shape, self.team, self.xp = (nx, ny, nz), team, xp if xp is not None else np
        self.bc, self.lam, self.dims = bcs, shift, (int(dims[0]), int(dims[1]))
        self.serial = team.size == 1
        self._fft = _fft_module(self.xp)
        B, N = pgas.BLOCKED, pgas.NONE
        kw = dict(team=team, device=device)
        P = team.size
        px, py = self.dims
        self.layout, self.a = choose_layout((nx, ny, nz), (px, py), layout, bcs[:2])
        n, h = (nx, ny), (dx, dy)
        a, b = self.a, 1 - self.a
        ax = {a: _Axis(bcs[a], n[a], h[a], True, self._fft, self.xp)}
        ax[b] = _Axis(bcs[b], n[b], h[b], not ax[a].complex_out, self._fft, self.xp)
        self._ax = ax
        self._arrays = []
        if self.serial:
            kx, ky = slice(0, ax[0].m), slice(0, ax[1].m)
        elif self.layout == "slab":
            # whole lines along a, b split over all ranks (R, C1); then a split and b whole (C2):
            # two redistributions per solve, four when the blocks must first become a-lines
            dist_r = [None, None, N]
            dist_r[a], dist_r[b] = N, B
            grid_r = [1, 1, 1]
            grid_r[b] = P
            dist_c = [None, None, N]
            dist_c[a], dist_c[b] = B, N
            grid_c = [1, 1, 1]
            grid_c[a] = P
            cshape = [nx, ny, nz]
            cshape[a] = ax[a].m
            self.direct = (px == 1 and a == 0) or (py == 1 and a == 1)
            self.A = None if self.direct else pgas.zeros((nx, ny, nz), dist=(B, B, N), grid=(px, py, 1), **kw)
            self.R = pgas.zeros((nx, ny, nz), dist=tuple(dist_r), grid=tuple(grid_r), **kw)
            self.C1 = self.R if not ax[a].complex_out else \
                pgas.zeros(tuple(cshape), ax[a].dtype, dist=tuple(dist_r), grid=tuple(grid_r), **kw)
            self.C2 = pgas.zeros(tuple(cshape), ax[a].dtype, dist=tuple(dist_c), grid=tuple(grid_c), **kw)
            self._arrays = _distinct(self.A, self.R, self.C1, self.C2)
            kk = list(self.C2.local_slices[:2])
            kk[b] = slice(0, ax[b].m)
            kx, ky = kk
        else:
            ax0, ax1 = ax[0], ax[1]
            qy, qz = pencil_grid(P, ny, nz)
            rx, rz = pencil_grid(P, ax0.m, nz)
            self.A = pgas.zeros((nx, ny, nz), dist=(B, B, N), grid=(px, py, 1), **kw)
            self.X = pgas.zeros((nx, ny, nz), dist=(N, B, B), grid=(1, qy, qz), **kw)
            cshape = (ax0.m, ny, nz)
            self.Xc = self.X if not ax0.complex_out else \
                pgas.zeros(cshape, ax0.dtype, dist=(N, B, B), grid=(1, qy, qz), **kw)
            self.Yc = pgas.zeros(cshape, ax0.dtype, dist=(B, N, B), grid=(rx, 1, rz), **kw)
            sshape = (ax0.m, ax1.m, nz)
            self.Ys = self.Yc if ax1.in_place else \
                pgas.zeros(sshape, ax1.dtype, dist=(B, N, B), grid=(rx, 1, rz), **kw)
            self.Zc = pgas.zeros(sshape, ax1.dtype, dist=(B, B, N), grid=(px, py, 1), **kw)
            self._arrays = _distinct(self.A, self.X, self.Xc, self.Yc, self.Ys, self.Zc)
            kx, ky, _ = self.Zc.local_slices
        # Thomas factors for the local wavenumbers (z-pencil layout), vectorised over (kx, ky)
        lam = (ax[0].eigenvalues()[kx][:, None] + ax[1].eigenvalues()[ky][None, :])
        a_ = np.zeros(nz)
        c_ = np.zeros(nz)
        a_[1:] = 1.0 / (dzf[1:] * dzh[1:nz])
        c_[:-1] = 1.0 / (dzf[:-1] * dzh[1:nz])
        wall = np.zeros(nz)
        if bcs[2][0] == "dirichlet":
            wall[0] += 1.0 / (dzf[0] * dzh[0])
        if bcs[2][1] == "dirichlet":
            wall[nz - 1] += 1.0 / (dzf[nz - 1] * dzh[nz])
        self.is_singular = shift == 0.0 and "dirichlet" not in bcs[:2] + bcs[2]
        # the (0, 0) mode of a singular problem: pin p = 0 in the lowest level
        self._owns_mean = (self.is_singular and kx.start == 0 and ky.start == 0
                           and kx.stop > 0 and ky.stop > 0)
        m = np.empty((nz,) + lam.shape)
        cp = np.empty_like(m)
        prev = np.zeros(lam.shape)
        for k in range(nz):
            diag = lam - a_[k] - c_[k]
            if wall[k]:
                diag = diag - wall[k]
            if shift:
                diag = diag - shift
            if k == 0 and self._owns_mean:
                diag[0, 0] = np.inf
            m[k] = 1.0 / (diag - a_[k] * prev)
            cp[k] = c_[k] * m[k]
            prev = cp[k]
        put = lambda arr: self.xp.asarray(np.ascontiguousarray(arr))    # noqa: E731
        self._m, self._cp, self._a = put(m), put(cp), [float(x) for x in a_]
        self._a_dev = put(a_)                    # for the GPU kernel (solvers.thomas)
        self._dzf = dzf
        self._w = put(dzf)                       # volume weights along z (dx dy are constant)
        self._wsum = float(dzf.sum())

    # ------------------------------------------------------------------ the solve
    def _tridiag(self, f):
        """Solve every z-column of ``f`` (local ``(kx, ky, nz)`` block) in place. Local."""
        xp, nz = self.xp, self.shape[2]
        if thomas.usable(f, self._m, self._cp, self._a_dev):   # one GPU kernel, not 4 nz launches
            thomas.thomas_columns(f, self._m, self._cp, self._a_dev)
            return f
        view = xp.moveaxis(f, 2, 0)              # (nz, kx, ky) view
        # NumPy: the levels of a z-contiguous block are strided slices (a cache line per value);
        # the loop runs on a level-major copy instead (the same operations, the same results)
        d = np.ascontiguousarray(view) if isinstance(f, np.ndarray) and nz > 1 else view
        m, cp, a = self._m, self._cp, self._a
        d[0, ...] = d[0, ...] * m[0, ...]        # (", ...": the array API has no implicit trailing axes)
        for k in range(1, nz):
            d[k, ...] = (d[k, ...] - a[k] * d[k - 1, ...]) * m[k, ...]
        for k in range(nz - 2, -1, -1):
            d[k, ...] = d[k, ...] - cp[k, ...] * d[k + 1, ...]
        if d is not view:
            view[...] = d
        return f

    def _spectral(self, f):
        """The z-solves of the local spectral block ``f``, in place. Local.

        For a singular problem (not :class:`PoissonFFT`) the rank holding the mean mode removes
        its right-hand side's weighted mean first and the solution's afterwards (zero-mean ``p``).
        """
        if not self._owns_mean or self._legacy:
            return self._tridiag(f)
        xp = self.xp
        col = f[0, 0, :]
        col[...] = col - xp.sum(col * self._w) / self._wsum
        self._tridiag(f)
        col[...] = col - xp.sum(col * self._w) / self._wsum
        return f

    def _solve_block(self, rhs):
        """``p`` (a new block) from this rank's z-pencil block ``rhs``. Collective, unchecked."""
        ax = self._ax
        if self.serial:
            fh = ax[0].forward(rhs, 0)
            fh = ax[1].forward(fh, 1)
            self._spectral(fh)
            fh = ax[1].inverse(fh, 1)
            return ax[0].inverse(fh, 0)
        from .. import pgas
        if self.layout == "slab":
            a, b = self.a, 1 - self.a
            if self.direct:
                self.R.local[...] = rhs
            else:
                self.A.local[...] = rhs
                pgas.copy(self.A, self.R)
            self.C1.local[...] = ax[a].forward(self.R.local, a)
            pgas.copy(self.C1, self.C2)
            c2 = self.C2.local
            if ax[b].in_place:
                c2[...] = ax[b].forward(c2, b)
                self._spectral(c2)
                c2[...] = ax[b].inverse(c2, b)
            else:
                t = ax[b].forward(c2, b)
                self._spectral(t)
                c2[...] = ax[b].inverse(t, b)
            pgas.copy(self.C2, self.C1)
            self.R.local[...] = ax[a].inverse(self.C1.local, a)
            if self.direct:
                return self.R.local.copy()
            pgas.copy(self.R, self.A)
            return self.A.local.copy()
        self.A.local[...] = rhs
        pgas.copy(self.A, self.X)
        self.Xc.local[...] = ax[0].forward(self.X.local, 0)
        pgas.copy(self.Xc, self.Yc)
        self.Ys.local[...] = ax[1].forward(self.Yc.local, 1)
        pgas.copy(self.Ys, self.Zc)
        self._spectral(self.Zc.local)
        pgas.copy(self.Zc, self.Ys)
        self.Yc.local[...] = ax[1].inverse(self.Ys.local, 1)
        pgas.copy(self.Yc, self.Xc)
        self.X.local[...] = ax[0].inverse(self.Xc.local, 0)
        pgas.copy(self.X, self.A)
        return self.A.local.copy()          # A is reused by the next solve

    def free(self) -> None:
        """Release the distributed work arrays. Collective."""
        for arr in self._arrays:
            arr.free()
        self._arrays = []


class PoissonSolver(BoxSolverBase):
    """Poisson / Helmholtz solver ``(L - lam) p = f`` on a box with per-axis boundary conditions.
    Creating one is collective over ``team``.

    Parameters
    ----------
    shape : (int, int, int)
        Global cells ``(nx, ny, nz)``.
    spacing : (float, float, float or array_like)
        ``(dx, dy, dz)``; ``dz`` is one number or the ``nz`` layer thicknesses (a stretched grid;
        the centres are mid-layer).
    bc : str or sequence, default ``("periodic", "periodic", "neumann")``
        Boundary conditions of x, y and z (one string for all three). x and y: ``"periodic"``,
        ``"neumann"`` or ``"dirichlet"``; z: ``"neumann"`` or ``"dirichlet"``, or a pair
        ``(bottom, top)``. Boundary values are zero (homogeneous); put inhomogeneous ones into
        ``f`` (``f[0] -= 2 g / dx^2`` for a Dirichlet value ``g`` on the face at ``x = 0``,
        ``f[0] += q / dx`` for a gradient ``dp/dx = q`` there).
    lam : float, default 0
        The Helmholtz shift (``>= 0``).
    team : Team, optional
        The ranks (default: the world).
    grid : (int, int), optional
        The ``px x py`` process grid of the solver's z-pencil layout (default: MPI's choice, the
        grid :func:`hpcsuite.pgas.zeros` picks for ``grid=(0, 0, 1)``).
    device : {"cpu", "gpu"}
        Where the arrays live (GPU: CuPy, cuFFT and ``cupyx.scipy.fft``).
    layout : {"auto", "slab", "pencil"}
        The transposes (module docstring); ``"auto"`` takes slabs when they fit.
    singular : {"raise", "project"}
        For a singular problem (``lam = 0``, no Dirichlet side): refuse a right-hand side whose
        volume-weighted mean is not zero to rounding (:data:`MEAN_RTOL`), or remove that mean.

    Raises
    ------
    InputError
        On every rank, before any communication other than one agreement, for a bad shape,
        spacing, boundary condition, shift or option, or a process grid that does not fit the
        grid (too many ranks).

    Notes
    -----
    For a singular problem the returned ``p`` has zero volume-weighted mean. Each solve costs
    O(N log N) work and the redistributions of the module docstring; the solver's work arrays stay
    allocated until :meth:`free`.

    Examples
    --------
    On 2 ranks, each holding half of a 32 x 24 x 16 z-pencil array::

        solver = PoissonSolver((32, 24, 16), (1/32, 1/24, 1/16), bc=("periodic", "dirichlet", "neumann"))
        f = solver.zeros()                  # z-pencils: f.local is this rank's (16, 24, 16) block
        f.local[...] = ...                  # the right-hand side
        p = solver.solve(f)                 # a new DistArray like f
        solver.free()
    """

    def __init__(self, shape, spacing, bc=("periodic", "periodic", "neumann"), lam: float = 0.0, *,
                 team: Team | None = None, grid=None, device: str = "cpu", layout: str = "auto",
                 singular: str = "raise"):
        from .. import pgas
        team = team if team is not None else Team.world()

        def check():
            if not isinstance(team, Team):
                raise InputError(f"PoissonSolver: team must be a hpcsuite Team, got {type(team).__name__}")
            n = _check_shape(shape)
            bcs = _check_bc(bc)
            dx, dy, dzf = _check_spacing(spacing, n[2])
            shift = _check_lam(lam)
            if layout not in ("auto", "slab", "pencil"):
                raise InputError(f"PoissonSolver: layout must be 'auto', 'slab' or 'pencil', got {layout!r}")
            if singular not in ("raise", "project"):
                raise InputError(f"PoissonSolver: singular must be 'raise' or 'project', got {singular!r}")
            if device not in ("cpu", "gpu"):
                raise InputError(f"PoissonSolver: device must be 'cpu' or 'gpu', got {device!r}")
            dims = _check_grid(grid, team.size, n)
            try:
                choose_layout(n, dims, layout, bcs[:2])
            except ValueError as exc:
                raise InputError(f"PoissonSolver: {team.size} ranks on a {dims[0]}x{dims[1]} grid cannot "
                                 f"solve a {n[0]}x{n[1]}x{n[2]} box ({exc}); use fewer ranks or more "
                                 f"cells") from None
            return n, bcs, dx, dy, dzf, shift, dims

        n, bcs, dx, dy, dzf, shift, dims = agree(team, check)
        nz = n[2]
        dzh = np.empty(nz + 1)
        dzh[1:nz] = 0.5 * (dzf[:-1] + dzf[1:])           # centre to centre
        dzh[0], dzh[nz] = 0.5 * dzf[0], 0.5 * dzf[-1]     # centre to wall (Dirichlet walls)
        self.singular = singular
        self.device = device
        B, N = pgas.BLOCKED, pgas.NONE
        self._io = pgas.zeros(n, dist=(B, B, N), grid=(dims[0], dims[1], 1), team=team, device=device)
        self._setup(n, dx, dy, dzf, dzh, bcs, shift, team, dims, device, self._io.device.xp, layout)
        self._arrays.append(self._io)

    def _check_mean(self, block, where: str) -> None:
        """Refuse a singular problem's right-hand side with a nonzero mean. Collective."""
        if not self.is_singular or self.singular != "raise":
            return
        xp = self.xp
        w = self._w
        sums = np.array([float(xp.sum(block * w)), float(xp.sum(xp.abs(block) * w))])
        if not self.serial:
            sums = self.team.allreduce(sums)
        if not np.isfinite(sums).all():
            raise InputError(f"{where}: f has NaN or inf entries")
        if abs(sums[0]) > MEAN_RTOL * sums[1]:
            vol = self._wsum * self.shape[0] * self.shape[1]
            raise InputError(f"{where}: the problem is singular (lam = 0, no Dirichlet side) and f has a "
                             f"nonzero mean ({sums[0] / vol:.3g}; relative {abs(sums[0]) / sums[1]:.1e} > "
                             f"{MEAN_RTOL:g}): subtract the mean or pass singular='project'")

    # ------------------------------------------------------------------ public calls
    @property
    def local_shape(self) -> tuple[int, ...]:
        """This rank's block of the solver's z-pencil layout (what :meth:`solve_block` takes)."""
        return tuple(self._io.local_shape)

    def zeros(self):
        """A new zero :class:`~hpcsuite.pgas.DistArray` in the solver's z-pencil layout (solving it
        needs no extra redistribution). Collective."""
        from .. import pgas
        return pgas.zeros(self.shape, dist=self._io.dist, grid=self._io.grid, team=self.team, device=self.device)

    def solve(self, f, out=None):
        """``p`` with ``(L - lam) p = f``. Collective.

        Parameters
        ----------
        f : DistArray
            The right-hand side, global shape ``(nx, ny, nz)``, any distribution (the solver's
            z-pencil layout, :meth:`zeros`, saves two redistributions), real, on the solver's device.
            Not modified.
        out : DistArray, optional
            Where to write ``p`` (any distribution with the same global shape; its halo is not
            updated). Default: a new array with ``f``'s distribution (no halo).

        Returns
        -------
        DistArray
            ``out``, or the new array.

        Raises
        ------
        InputError
            On every rank, before communicating: ``f`` or ``out`` not a DistArray of the solver's
            shape, team and device, or complex; a singular problem with a nonzero-mean ``f``
            (after one reduction).
        """
        from .. import pgas
        where = "PoissonSolver.solve"
        self._alive(where)
        for name, arr in (("f", f), ("out", out)):
            if arr is None and name == "out":
                continue
            if not isinstance(arr, pgas.DistArray):
                raise InputError(f"{where}: {name} must be a DistArray of shape {self.shape}, got "
                                 f"{type(arr).__name__}")
            if tuple(arr.shape) != self.shape:
                raise InputError(f"{where}: {name} has shape {tuple(arr.shape)}, the solver {self.shape}")
            if arr.dtype.kind not in "fiu":
                raise InputError(f"{where}: {name} must be real, got dtype {arr.dtype}")
            if arr.device.is_gpu != (self.device == "gpu"):
                raise InputError(f"{where}: {name} lives on the {'gpu' if arr.device.is_gpu else 'cpu'}, the "
                                 f"solver on the {self.device}")
            if arr.team.size != self.team.size:
                raise InputError(f"{where}: {name} lives on {arr.team.size} ranks, the solver on "
                                 f"{self.team.size}")
        io = self._io
        if f.pattern == io.pattern and f.dtype == np.float64:
            block = f.local
        else:
            pgas.copy(f, io)
            block = io.local
        self._check_mean(block, where)
        p = self._solve_block(block)
        if out is None:
            out = pgas.zeros(self.shape, dist=f.dist, grid=f.grid, team=self.team, device=self.device)
        if out.pattern == io.pattern:
            out.local[...] = p
        else:
            io.local[...] = p
            pgas.copy(io, out)
        return out

    def solve_block(self, block):
        """``p`` with ``(L - lam) p = f`` for this rank's block of ``f`` in the solver's z-pencil
        layout (shape :attr:`local_shape`; NumPy or CuPy, float64); returns a new block. Collective.

        Raises
        ------
        InputError
            On every rank (one agreement) when a rank's block has the wrong shape or dtype.
        """
        where = "PoissonSolver.solve_block"
        self._alive(where)
        want = self.local_shape

        def check():
            shape = tuple(getattr(block, "shape", ()))
            if shape != want:
                raise InputError(f"{where}: the block on rank {self.team.rank} has shape {shape}, the "
                                 f"solver's layout {want}")
            if getattr(block, "dtype", None) != np.float64:
                raise InputError(f"{where}: the block must be float64, got {getattr(block, 'dtype', None)}")
        agree(self.team, check)
        self._check_mean(block, where)
        return self._solve_block(block)

    def _alive(self, where: str) -> None:
        if not self._arrays:
            raise InputError(f"{where}: the solver was freed")

    def free(self) -> None:
        """Release the solver's distributed work arrays (it cannot solve afterwards). Collective."""
        super().free()


class PoissonFFT(BoxSolverBase):
    """FFT/tridiagonal Poisson solver of the LES (periodic x and y, Neumann walls in z) on local
    blocks. Creating one is collective over ``team``.

    The same operator and transposes as :class:`PoissonSolver` with ``bc=("periodic", "periodic",
    "neumann")``, with the LES's grid description and conventions: :meth:`solve` takes and returns
    local blocks without checks, and the constant of the singular problem is fixed by ``p = 0`` in
    the lowest level of the mean mode (no mean check).

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

    _legacy = True

    def __init__(self, shape, dx: float, dy: float, dzf, dzh, team, dims=(1, 1), device: str = "cpu",
                 xp=None, layout: str = "auto"):
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
        self.nxh = nx // 2 + 1
        self.device = device
        self._setup((nx, ny, nz), dx, dy, dzf, dzh, ("periodic", "periodic", ("neumann", "neumann")), 0.0,
                    team, (px, py), device, xp, layout)

    def solve(self, rhs):
        """``p`` with ``L p = rhs``. Collective.

        ``rhs`` is this rank's ``(nxl, nyl, nz)`` block (no halo) of the z-pencil layout; the
        result is a new block of the same shape. The mean of ``rhs`` must vanish (it does for the
        divergence of a velocity field with walls at the bottom and top).
        """
        return self._solve_block(rhs)

    def free(self) -> None:
        """Release the distributed work arrays. Collective."""
        super().free()


# ---------------------------------------------------------------------- argument checks (local)
def _check_shape(shape) -> tuple[int, int, int]:
    try:
        n = tuple(int(s) for s in shape)
        ok = len(n) == 3 and all(s >= 1 and s == v for s, v in zip(n, shape))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"PoissonSolver: shape must be three positive integers (nx, ny, nz), got {shape!r}")
    return n


def _check_bc(bc):
    names = "'periodic', 'neumann' or 'dirichlet'"
    if isinstance(bc, str):
        bc = (bc, bc, bc)
    try:
        bc = tuple(bc)
    except TypeError:
        raise InputError(f"PoissonSolver: bc must be a string or three of them (x, y, z), got {bc!r}") from None
    if len(bc) != 3:
        raise InputError(f"PoissonSolver: bc must be a string or three of them (x, y, z), got {bc!r}")
    out = []
    for axis, b in zip("xy", bc[:2]):
        if not isinstance(b, str) or b.lower() not in BOUNDARY_CONDITIONS:
            raise InputError(f"PoissonSolver: bc of {axis} must be {names}, got {b!r}")
        out.append(b.lower())
    z = bc[2]
    zs = (z, z) if isinstance(z, str) else tuple(z) if isinstance(z, (tuple, list)) else (z,)
    if len(zs) != 2 or not all(isinstance(b, str) and b.lower() in ("neumann", "dirichlet") for b in zs):
        raise InputError(f"PoissonSolver: bc of z must be 'neumann' or 'dirichlet' or a pair (bottom, top) of "
                         f"them (z has walls: a periodic z is not supported), got {z!r}")
    return (out[0], out[1], tuple(b.lower() for b in zs))


def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _check_spacing(spacing, nz: int):
    try:
        dx, dy, dz = spacing
    except (TypeError, ValueError):
        raise InputError(f"PoissonSolver: spacing must be (dx, dy, dz), got {spacing!r}") from None
    for name, v in (("dx", dx), ("dy", dy)):
        if not _number(v) or v <= 0:
            raise InputError(f"PoissonSolver: spacing {name} must be a positive number, got {v!r}")
    if _number(dz):
        dzf = np.full(nz, float(dz))
    else:
        try:
            dzf = np.asarray(dz, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise InputError(f"PoissonSolver: spacing dz must be a number or {nz} layer thicknesses, "
                             f"got {dz!r}") from None
        if dzf.shape != (nz,):
            raise InputError(f"PoissonSolver: spacing dz has {dzf.size} layer thicknesses, nz is {nz}")
    if not (np.isfinite(dzf).all() and (dzf > 0).all()):
        raise InputError("PoissonSolver: spacing dz must be positive and finite")
    return float(dx), float(dy), dzf


def _check_lam(lam) -> float:
    if not _number(lam) or lam < 0:
        raise InputError(f"PoissonSolver: lam must be a finite number >= 0 ((L - lam) p = f), got {lam!r}")
    return float(lam)


def _check_grid(grid, size: int, n) -> tuple[int, int]:
    if grid is None:
        from mpi4py import MPI
        px, py = (int(d) for d in MPI.Compute_dims(size, 2))
    else:
        try:
            px, py = (int(g) for g in grid)
        except (TypeError, ValueError):
            raise InputError(f"PoissonSolver: grid must be (px, py), got {grid!r}") from None
        if px < 1 or py < 1 or px * py != size:
            raise InputError(f"PoissonSolver: grid {grid!r} does not multiply to the {size} ranks")
    if px > n[0] or py > n[1]:
        raise InputError(f"PoissonSolver: grid {px}x{py} has more ranks than cells along x or y ({n[0]}x{n[1]})")
    return px, py


def _distinct(*arrays) -> list:
    """The arrays that are not None, each once (aliases: a transform that keeps shape and dtype
    writes back into its input's array)."""
    out = []
    for x in arrays:
        if x is not None and all(x is not y for y in out):
            out.append(x)
    return out


def _fft_module(xp):
    """:mod:`scipy.fft` for NumPy arrays (faster, same pocketfft), else the namespace's ``fft``."""
    name = getattr(xp, "__name__", "")
    if name in ("numpy", "array_api_compat.numpy"):
        import scipy.fft
        return scipy.fft
    return xp.fft
