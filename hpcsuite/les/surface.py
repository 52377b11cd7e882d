"""Prescribed surface fluxes (BOMEX, dry CBL): kinematic heat and moisture fluxes and ``u*``.

The momentum flux follows DALES for a prescribed friction velocity: at each ``u`` point
``uw = -ustar^2 * U / |U|`` with ``U`` the ground-relative wind of the lowest level interpolated to
that point (``|U|`` bounded below by 0.1 m/s so that a calm start has a defined direction), and
likewise ``vw`` at each ``v`` point. The fields are relative to the Galilean frame, so the shift
``ctx.galilean = (cu, cv)`` is added back.

Writes ``ctx.diag['surface']``: 2-D ``(nxl+2h, nyl+2h)`` arrays ``ustar``, ``wthl``, ``wqt`` (cell
centres), ``uw`` (``u`` points), ``vw`` (``v`` points). Only the interior and one cell around it are
set for ``uw``/``vw`` (what the subgrid diffusion reads); the outermost halo rim holds zeros.
"""
from __future__ import annotations

from ..runtime import InputError
from .ops import dynamics as ops

__all__ = ["PrescribedSurface", "HORV_MIN"]

HORV_MIN = 0.1      # m/s, the DALES lower bound of the surface wind speed


class PrescribedSurface:
    """Prescribed surface fluxes. Local (no communication).

    Parameters
    ----------
    params : dict
        ``wthl`` (K m/s), ``wqt`` (m/s, default 0), ``ustar`` (m/s, default 0).
    """

    def __init__(self, params):
        params = dict(params or {})
        try:
            self.wthl = float(params.get("wthl", 0.0))
            self.wqt = float(params.get("wqt", 0.0))
            self.ustar = float(params.get("ustar", 0.0))
        except (TypeError, ValueError) as exc:
            raise InputError(f"surface: wthl, wqt and ustar must be numbers ({exc})") from None
        if self.ustar < 0:
            raise InputError(f"surface: ustar must be >= 0, got {self.ustar}")

    def __call__(self, ctx) -> None:
        xp, f = ctx.xp, ctx.fields
        cu, cv = getattr(ctx, "galilean", (0.0, 0.0))
        us2 = self.ustar ** 2
        uw, vw = ops.surface_momentum(xp, f["u"], f["v"], cu, cv, us2, HORV_MIN)
        ctx.diag["surface"] = dict(self._constant(xp, uw), uw=uw, vw=vw)

    def _constant(self, xp, like) -> dict:
        """The constant fields ``ustar``, ``wthl``, ``wqt`` shaped as ``like``: made once (readers
        must not write into them)."""
        key = (like.shape, type(like))
        if getattr(self, "_const_key", None) != key:
            self._const_key = key
            self._const = {"ustar": xp.full_like(like, self.ustar), "wthl": xp.full_like(like, self.wthl),
                           "wqt": xp.full_like(like, self.wqt)}
        return self._const
