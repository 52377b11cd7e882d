"""Fused CPU kernels (numba) for the hottest LES operators, one pass over memory each.

The array-API source in :mod:`hpcsuite.les.subgrid` stays the reference and the GPU path; on NumPy
arrays these kernels replace it. They perform the same floating-point operations in the same order
(no fastmath: no reassociation, no FMA contraction), so both paths agree bit for bit, which
``tests/les/test_fused.py`` checks. Why numba and not more NumPy: a scalar diffusion in NumPy makes
about fifteen passes over memory with a fresh temporary each; fused it is one.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["scalar_diffusion"]


@numba.njit(parallel=True, fastmath=False, cache=True)
def _scalar_diffusion(s, kx, ky, kz, kconst, dzf, dzh, dx2, dy2, fb, out):  # pragma: no cover - compiled
    # out[i, j, k]: the tendency at core cell (i, j, k) = block cell (i + 1, j + 1, k). kx, ky, kz
    # are the face diffusivities (shapes as in subgrid.ScalarDiffusion) or unused when kconst >= 0
    ni, nj, nz = out.shape
    for i in numba.prange(ni):
        for j in range(nj):
            for k in range(nz):
                c = s[i + 1, j + 1, k]
                if kconst >= 0.0:
                    fxp = kconst * (s[i + 2, j + 1, k] - c)
                    fxm = kconst * (c - s[i, j + 1, k])
                    fyp = kconst * (s[i + 1, j + 2, k] - c)
                    fym = kconst * (c - s[i + 1, j, k])
                else:
                    fxp = kx[i + 1, j, k] * (s[i + 2, j + 1, k] - c)
                    fxm = kx[i, j, k] * (c - s[i, j + 1, k])
                    fyp = ky[i, j + 1, k] * (s[i + 1, j + 2, k] - c)
                    fym = ky[i, j, k] * (c - s[i + 1, j, k])
                t = (fxp - fxm) / dx2 + (fyp - fym) / dy2
                if k + 1 < nz:
                    kk = kconst if kconst >= 0.0 else kz[i, j, k]
                    gp = kk * (s[i + 1, j + 1, k + 1] - c) / dzh[k + 1]
                else:
                    gp = 0.0
                if k > 0:
                    kk = kconst if kconst >= 0.0 else kz[i, j, k - 1]
                    gm = kk * (c - s[i + 1, j + 1, k - 1]) / dzh[k]
                else:
                    gm = -fb[i + 1, j + 1] if fb.shape[0] > 0 else 0.0
                out[i, j, k] = t + (gp - gm) / dzf[k]


_EMPTY2 = np.zeros((0, 0))
_EMPTY3 = np.zeros((0, 0, 0))


def scalar_diffusion(s, kx, ky, kz, dzf, dzh, dx2: float, dy2: float, flux_bottom=None):
    """The core-shaped tendency ``div(K grad s)`` (see ``subgrid.ScalarDiffusion``) in one pass.
    ``kx``, ``ky``, ``kz``: the face diffusivities, or one float for all. Local."""
    out = np.empty((s.shape[0] - 2, s.shape[1] - 2, s.shape[2]))
    const = isinstance(kx, float)
    fb = _EMPTY2 if flux_bottom is None else np.ascontiguousarray(flux_bottom, dtype=np.float64)
    _scalar_diffusion(s, _EMPTY3 if const else kx, _EMPTY3 if const else ky, _EMPTY3 if const else kz,
                      float(kx) if const else -1.0, dzf, dzh, float(dx2), float(dy2), fb, out)
    return out
