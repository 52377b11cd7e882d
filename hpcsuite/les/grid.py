"""The LES grid: a staggered (Arakawa C) mesh, periodic in x and y, surface and rigid lid in z.

Staggering follows DALES: ``u[i, j, k]`` sits on the west face of cell ``i`` (``x = i dx``), ``v`` on
the south face (``y = j dy``), both at the cell-centre height ``zf[k]``; ``w[i, j, k]`` sits on the
bottom face ``zh[k]`` of cell ``k`` (``nz + 1`` levels, ``w = 0`` at ``zh[0] = 0`` and ``zh[nz]``);
scalars sit at cell centres.

Vertical spacings (the DALES names)::

    dzf[k] = zh[k+1] - zh[k]                      k = 0 .. nz-1   (cell thickness)
    dzh[k] = zf[k] - zf[k-1]                      k = 1 .. nz-1   (between centres)
    dzh[0] = 2 zf[0],  dzh[nz] = 2 (zh[nz] - zf[nz-1])            (mirror images at the walls)

A :class:`Grid` also describes this rank's block: the owned cells ``i0 .. i0+nxl-1`` along x,
``j0 .. j0+nyl-1`` along y (all of z), stored with a halo of ``h`` cells in x and y.

Examples
--------
>>> g = Grid.uniform(64, 64, 80, 6400.0, 6400.0, 3200.0)
>>> g.dx, g.zf[0], g.zh[-1]
(100.0, 20.0, 3200.0)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Grid", "HALO"]

#: Halo width in x and y: the 5th-order upwind stencil reaches three cells.
HALO = 3


@dataclass(frozen=True, eq=False)          # arrays inside: compare grids by identity
class Grid:
    """Global grid and this rank's block. Local (no communication); host NumPy arrays.

    Attributes
    ----------
    nx, ny, nz : int
        Cells along x, y, z (global).
    dx, dy : float
        Horizontal spacing; ``xsize = nx dx``, ``ysize = ny dy``.
    zf, zh, dzf, dzh : numpy.ndarray
        Cell-centre heights (nz), face heights (nz + 1), cell thicknesses (nz), centre distances
        (nz + 1), as in the module docstring.
    i0, j0, nxl, nyl : int
        Global index of this rank's first owned cell and the number of owned cells in x and y.
    h : int
        Halo width in x and y.
    """

    nx: int
    ny: int
    nz: int
    dx: float
    dy: float
    xsize: float
    ysize: float
    zf: np.ndarray = field(repr=False)
    zh: np.ndarray = field(repr=False)
    dzf: np.ndarray = field(repr=False)
    dzh: np.ndarray = field(repr=False)
    i0: int = 0
    j0: int = 0
    nxl: int = -1
    nyl: int = -1
    h: int = HALO

    def __post_init__(self):
        if self.nxl < 0:
            object.__setattr__(self, "nxl", self.nx)
        if self.nyl < 0:
            object.__setattr__(self, "nyl", self.ny)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def uniform(cls, nx: int, ny: int, nz: int, xsize: float, ysize: float, zsize: float) -> "Grid":
        """A grid with uniform spacing in all three directions (the whole domain as one block)."""
        for name, n in (("nx", nx), ("ny", ny), ("nz", nz)):
            if int(n) != n or n < 1:
                raise ValueError(f"Grid.uniform: {name} must be a positive integer, got {n!r}")
        if not zsize > 0:
            raise ValueError(f"Grid.uniform: zsize must be > 0, got {zsize!r}")
        return cls.stretched(nx, ny, xsize, ysize, np.linspace(0.0, float(zsize), int(nz) + 1))

    @classmethod
    def stretched(cls, nx: int, ny: int, xsize: float, ysize: float, zh) -> "Grid":
        """A grid with the face heights ``zh`` (``zh[0] = 0``, strictly increasing)."""
        zh = np.asarray(zh, dtype=np.float64).copy()
        if zh.ndim != 1 or zh.size < 2:
            raise ValueError(f"Grid.stretched: zh must be a 1-D array of at least 2 face heights, got shape {zh.shape}")
        if zh[0] != 0.0 or np.any(np.diff(zh) <= 0):
            raise ValueError("Grid.stretched: zh must start at 0 and increase strictly")
        for name, n in (("nx", nx), ("ny", ny)):
            if int(n) != n or n < 1:
                raise ValueError(f"Grid.stretched: {name} must be a positive integer, got {n!r}")
        for name, s in (("xsize", xsize), ("ysize", ysize)):
            if not s > 0:
                raise ValueError(f"Grid.stretched: {name} must be > 0, got {s!r}")
        nz = zh.size - 1
        zf = 0.5 * (zh[:-1] + zh[1:])
        dzf = np.diff(zh)
        dzh = np.empty(nz + 1)
        dzh[1:nz] = np.diff(zf)
        dzh[0] = 2.0 * zf[0]
        dzh[nz] = 2.0 * (zh[nz] - zf[nz - 1])
        for a in (zf, zh, dzf, dzh):
            a.setflags(write=False)
        nx, ny = int(nx), int(ny)
        return cls(nx, ny, nz, float(xsize) / nx, float(ysize) / ny, float(xsize), float(ysize),
                   zf, zh, dzf, dzh)

    def block(self, i0: int, j0: int, nxl: int, nyl: int, h: int = HALO) -> "Grid":
        """The same grid describing the block ``[i0, i0+nxl) x [j0, j0+nyl)`` with halo ``h``."""
        if not (0 <= i0 and i0 + nxl <= self.nx and 0 <= j0 and j0 + nyl <= self.ny):
            raise ValueError(f"Grid.block: block ({i0}+{nxl}, {j0}+{nyl}) outside {self.nx}x{self.ny}")
        return dataclasses.replace(self, i0=int(i0), j0=int(j0), nxl=int(nxl), nyl=int(nyl), h=int(h))

    # ------------------------------------------------------------------ derived quantities
    @property
    def zsize(self) -> float:
        return float(self.zh[-1])

    @property
    def cell_shape(self) -> tuple[int, int, int]:
        """Local shape of a cell-type array including the halo: ``(nxl+2h, nyl+2h, nz)``."""
        return (self.nxl + 2 * self.h, self.nyl + 2 * self.h, self.nz)

    @property
    def w_shape(self) -> tuple[int, int, int]:
        """Local shape of ``w`` including the halo: ``(nxl+2h, nyl+2h, nz+1)``."""
        return (self.nxl + 2 * self.h, self.nyl + 2 * self.h, self.nz + 1)

    @property
    def interior(self) -> tuple[slice, slice]:
        """The owned cells of a local array: ``[h:h+nxl, h:h+nyl]``."""
        return (slice(self.h, self.h + self.nxl), slice(self.h, self.h + self.nyl))

    def x_cells(self) -> np.ndarray:
        """Cell-centre x of the local columns including the halo (``nxl + 2h`` values)."""
        return (np.arange(self.i0 - self.h, self.i0 + self.nxl + self.h) + 0.5) * self.dx

    def y_cells(self) -> np.ndarray:
        """Cell-centre y of the local rows including the halo (``nyl + 2h`` values)."""
        return (np.arange(self.j0 - self.h, self.j0 + self.nyl + self.h) + 0.5) * self.dy

    def x_faces(self) -> np.ndarray:
        """x of the west faces (``u`` points) of the local columns including the halo."""
        return np.arange(self.i0 - self.h, self.i0 + self.nxl + self.h) * self.dx

    def y_faces(self) -> np.ndarray:
        """y of the south faces (``v`` points) of the local rows including the halo."""
        return np.arange(self.j0 - self.h, self.j0 + self.nyl + self.h) * self.dy

    @property
    def uniform_z(self) -> bool:
        """Whether the vertical spacing is uniform (to rounding)."""
        return bool(np.allclose(self.dzf, self.dzf[0], rtol=1e-12, atol=0))
