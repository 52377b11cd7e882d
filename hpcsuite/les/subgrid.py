"""Subgrid (subfilter) diffusion: constant viscosity, Smagorinsky and the Deardorff TKE closure.

The discretisation is DALES' (modsubgrid): the momentum diffusion is the divergence of the subgrid
stress ``ekm (du_i/dx_j + du_j/dx_i)`` on the staggered grid, with the eddy viscosity averaged to
the cell edges (linearly in z on a stretched grid); scalars are diffused with ``ekh`` averaged to the
faces. Boundaries: the surface fluxes of ``ctx.diag['surface']`` (``uw``, ``vw``, ``wthl``,
``wqt``, ``w<name>`` for other scalars; zero when absent) enter as the flux through the bottom face,
the rigid lid has zero flux. The subgrid TKE (``e12 = sqrt(e)``) has zero flux at both walls.

Closures
--------
* :class:`ConstantViscosity`: ``nu`` times the discrete Laplacian of ``u, v, w`` and ``kappa`` times
  that of every scalar (the verification cases).
* :class:`Smagorinsky`: ``ekm = (cs Delta)^2 sqrt(2 S_ij S_ij)``, ``ekh = ekm / Pr``.
* :class:`SubgridTKE`: ``ekm = cm l e12``, ``ekh = (ch1 + ch2 l / Delta) ekm`` with the stability
  length ``l = min(Delta, cn e12 / N)`` in stable air (``N^2 = g/thv dthv/dz > 0``), ``l = Delta``
  otherwise, and the prognostic equation of ``e12``: shear production ``ekm 2 S_ij S_ij / (2 e12)``,
  buoyancy ``-ekh N^2 / (2 e12)``, dissipation ``-(ce1 + ce2 l / Delta) e12^2 / (2 l)``, diffusion
  with ``2 ekm``. ``Delta = (dx dy dz)^(1/3)``.

``S_ij S_ij`` is DALES' ``strain2``: squared diagonal gradients plus the averages of the squared
off-diagonal sums over the four edges around a cell. At the surface the vertical shear is the
neutral surface-layer shear ``dU/dz = u* / (kappa z1)`` along the wind (``-uw / (u* kappa z1)``),
zero without a surface friction velocity; at the lid it is zero. ``dthv/dz`` is the centred
difference of ``diag['thv']`` (one-sided at the walls).

All arrays are local blocks with halo (the fields' halos must be valid on entry). ``ekm``/``ekh``
(``diag['ekm']``, ``diag['ekh']``) are valid on the interior and one cell around it, which is all
the diffusion reads, so no halo exchange is needed. Every term here is local (no communication).

The discrete operators themselves (with their array-API reference and the numba and CUDA kernels
registered for them) are in :mod:`hpcsuite.les.ops.subgrid`; the terms here call them and never
choose.
"""
from __future__ import annotations

from ..runtime import InputError
from .ops import subgrid as ops
from .ops.common import core as _c
from .ops.common import interior_add
from .state import zgrid_of

__all__ = ["ConstantViscosity", "Smagorinsky", "SubgridTKE", "ScalarDiffusion", "diffuse_scalar", "momentum_diffusion",
           "strain2", "KARMAN", "EKMIN", "E12MIN"]

KARMAN = 0.4       # von Karman constant (DALES fkar)
EKMIN = 1e-6       # m^2/s, lower bound of ekm and ekh (DALES ekmin)
E12MIN = 5e-5      # m/s, lower bound of e12 (DALES e12min)
_MOMENTUM = ("u", "v", "w")


class _Geo:
    """Grid quantities of the subgrid terms; :meth:`of` makes them once per context."""

    @classmethod
    def of(cls, ctx) -> "_Geo":
        cached = getattr(ctx, "_subgrid_geo", None)
        if (cached is None or cached[0] is not getattr(ctx, "zgrid", None) or cached[1].xp is not ctx.xp
                or (cached[1].dx, cached[1].dy) != (float(ctx.grid.dx), float(ctx.grid.dy))):
            geo = cls(ctx)
            ctx._subgrid_geo = (ctx.zgrid, geo)
            return geo
        return cached[1]

    def __init__(self, ctx):
        zg = zgrid_of(ctx)
        self.xp = ctx.xp
        self.dx, self.dy = float(ctx.grid.dx), float(ctx.grid.dy)
        self.dzf, self.dzh, self.zf = zg.dzf, zg.dzh, zg.zf
        self.delta = (self.dx * self.dy * self.dzf) ** (1.0 / 3.0)
        self.shear_scale = None         # (ustar field, -max(ustar, 1e-10) kappa z1): _surface_shear


def _add_interior(ctx, name, core_tend, levels=None):
    """Add a core-shaped tendency to the interior of ``ctx.tend[name]``."""
    g = ctx.grid
    interior_add(ctx.tend[name], core_tend, ctx.h, g.nxl, g.nyl, levels)


def _surface(ctx, key):
    s = ctx.diag.get("surface")
    return None if s is None else s.get(key)


# ---------------------------------------------------------------------------------------------
# discrete operators
class ScalarDiffusion:
    """``div(K grad s)`` of cell-centred fields with one diffusivity ``K``. Local.

    The face diffusivities are computed once (``K`` a float or a block array at cell centres) and
    reused for every field; each face flux is computed once and differenced (flux form, so the
    domain integral changes only by the boundary fluxes). With ``scale`` the diffusivity is
    ``scale * K`` (on a GPU formed inside the face kernel, one launch fewer).
    """

    def __init__(self, xp, K, geo, scale: float | None = None):
        self.xp, self.geo = xp, geo
        self._raw, self._scale = K, scale
        self._K = K if scale is None else (scale * K if isinstance(K, float) else None)
        self._faces = None

    @property
    def K(self):
        """The diffusivity (``scale * K``, formed on first use)."""
        if self._K is None:
            self._K = self._scale * self._raw
        return self._K

    @property
    def faces(self):
        """``(kx, ky, kz)``: the diffusivity on the x, y (core rows / columns) and inner z faces
        (formed on first use, once for every field diffused with ``K``; :data:`ops.face_diffusivities`)."""
        if self._faces is None:
            if self._K is not None and isinstance(self._K, float):
                self._faces = (self._K, self._K, self._K)
            else:
                self._faces = ops.face_diffusivities(self._raw, self.geo.dzf, self.geo.dzh, scale=self._scale)
        return self._faces

    def add_into(self, ctx, name: str, flux_bottom=None, extra=None) -> None:
        """Add the tendency of field ``name`` (plus the core of the block ``extra`` if given) to the
        interior of ``ctx.tend[name]`` (:data:`ops.scalar_diffusion`, into the tendency). Local."""
        geo, g = self.geo, ctx.grid
        ops.scalar_diffusion(self.xp, ctx.fields[name], *self.faces, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2,
                             flux_bottom, into=(ctx.tend[name], g.h, g.nxl, g.nyl), extra=extra)

    def add_many_into(self, ctx, names, fluxes) -> None:
        """:meth:`add_into` of several fields (``fluxes``: each one's surface flux or None); on a GPU
        one launch for all of them. Local."""
        if not names:
            return
        geo, g = self.geo, ctx.grid
        ops.scalar_diffusion_many(self.xp, [ctx.fields[n] for n in names], *self.faces, geo.dzf, geo.dzh,
                                  geo.dx ** 2, geo.dy ** 2, list(fluxes),
                                  ([ctx.tend[n] for n in names], g.h, g.nxl, g.nyl))

    def __call__(self, s, flux_bottom=None):
        """Core-shaped tendency of ``s``; ``flux_bottom`` a 2-D block array of the kinematic surface
        flux (upwards positive) or None (zero flux). Zero flux at the lid."""
        geo = self.geo
        return ops.scalar_diffusion(self.xp, s, *self.faces, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2, flux_bottom)


def diffuse_scalar(xp, s, K, geo, flux_bottom=None):
    """Core-shaped tendency ``div(K grad s)`` of a cell-centred field. Local.

    ``K`` is a float or a block array at cell centres; ``flux_bottom`` a 2-D block array of the
    kinematic surface flux (upwards positive) or None (zero flux). Zero flux at the lid.
    """
    return ScalarDiffusion(xp, K, geo)(s, flux_bottom)


def _edges(xp, u, v, w, geo):
    """Velocity-gradient sums on the cell edges (:data:`ops.edges`)."""
    return ops.edges(xp, u, v, w, geo.dzh, geo.dx, geo.dy)


def _surface_shear_parts(ctx, geo, key_flux):
    """``(flux, scale)`` with ``flux / scale`` the surface shear dU/dz = -uw / (u* kappa z1), or None
    without a flux or u*."""
    flux, ustar = _surface(ctx, key_flux), _surface(ctx, "ustar")
    if flux is None or ustar is None:
        return None
    # the denominator only changes with the u* field (a constant one is the same object every
    # call); negating it instead of the flux gives the same bits (IEEE division is sign-symmetric)
    if geo.shear_scale is None or geo.shear_scale[0] is not ustar:
        geo.shear_scale = (ustar, -(ctx.xp.maximum(ustar, 1e-10) * KARMAN * geo.zf[0]))
    return flux, geo.shear_scale[1]


def strain2(ctx, geo, edges):
    """``S_ij S_ij`` at cell centres (block array valid on the core; :data:`ops.strain2`). Local."""
    f = ctx.fields
    parts = [_surface_shear_parts(ctx, geo, key) for key in ("uw", "vw")]
    scale = next((p[1] for p in parts if p is not None), None)
    return ops.strain2(ctx.xp, f["u"], f["v"], f["w"], edges, *(None if p is None else p[0] for p in parts), scale,
                       geo.dzf, geo.dx, geo.dy)


def momentum_diffusion(ctx, geo, ekm, edges) -> None:
    """Add the divergence of the subgrid stress (DALES diffu, diffv, diffw) to u, v, w
    (:data:`ops.momentum_diffusion`). Local."""
    f, g = ctx.fields, ctx.grid
    ops.momentum_diffusion(ctx.xp, f["u"], f["v"], f["w"], ekm, edges, geo.dzf, geo.dzh, geo.dx, geo.dy,
                           _surface(ctx, "uw"), _surface(ctx, "vw"), tuple(ctx.tend.get(n) for n in "uvw"),
                           g.h, g.nxl, g.nyl)


def _scalars(ctx):
    return [n for n in ctx.fields if n not in _MOMENTUM and n != "e12" and n in ctx.tend]


def _diffuse_scalars(ctx, geo, ekh) -> None:
    names = _scalars(ctx)
    ScalarDiffusion(ctx.xp, ekh, geo).add_many_into(ctx, names, [_surface(ctx, "w" + n) for n in names])


# ---------------------------------------------------------------------------------------------
# closures (terms)
class ConstantViscosity:
    """``nu`` times the Laplacian of u, v, w and ``kappa`` times that of every scalar. Local.

    Surface fluxes from ``ctx.diag['surface']`` are used when present (zero flux otherwise, i.e.
    free slip), zero flux at the lid; ``w`` is zero on both walls.
    """

    def __init__(self, nu: float, kappa: float | None = None):
        self.nu = float(nu)
        self.kappa = self.nu if kappa is None else float(kappa)
        if self.nu < 0 or self.kappa < 0:
            raise InputError(f"subgrid: nu and kappa must be >= 0, got nu={nu!r}, kappa={kappa!r}")

    def __call__(self, ctx) -> None:
        xp, geo, f = ctx.xp, _Geo.of(ctx), ctx.fields
        for name, key in (("u", "uw"), ("v", "vw")):
            if name in f and name in ctx.tend:
                _add_interior(ctx, name, diffuse_scalar(xp, f[name], self.nu, geo, _surface(ctx, key)))
        if "w" in f and "w" in ctx.tend and f["w"].shape[-1] > 2:
            w = f["w"]
            wc = _c(w)[..., 1:-1]
            lap = (_c(w, 1, 0)[..., 1:-1] - 2 * wc + _c(w, -1, 0)[..., 1:-1]) / geo.dx ** 2
            lap = lap + (_c(w, 0, 1)[..., 1:-1] - 2 * wc + _c(w, 0, -1)[..., 1:-1]) / geo.dy ** 2
            full = _c(w)
            lap = lap + ((full[..., 2:] - wc) / geo.dzf[1:] - (wc - full[..., :-2]) / geo.dzf[:-1]) / geo.dzh[1:-1]
            _add_interior(ctx, "w", self.nu * lap, slice(1, -1))
        op = ScalarDiffusion(xp, self.kappa, geo)
        for name in _scalars(ctx):
            op.add_into(ctx, name, _surface(ctx, "w" + name))


class Smagorinsky:
    """Smagorinsky closure (DALES ``lsmagorinsky``). Local.

    Parameters
    ----------
    params : dict, optional
        ``cs`` (default 0.22), ``prandtl`` (default 1/3, so ``ekh = 3 ekm``).
    """

    def __init__(self, params=None):
        params = dict(params or {})
        self.cs = float(params.get("cs", 0.22))
        self.prandtl = float(params.get("prandtl", 1.0 / 3.0))
        if not (self.cs > 0 and self.prandtl > 0):
            raise InputError(f"subgrid: cs and prandtl must be > 0, got cs={self.cs}, prandtl={self.prandtl}")

    def viscosity(self, ctx, geo, edges):
        """``(ekm, ekh)`` block arrays from the current velocities. Local."""
        xp = ctx.xp
        s2 = strain2(ctx, geo, edges)
        ekm = xp.maximum((self.cs * geo.delta) ** 2 * xp.sqrt(2.0 * s2), EKMIN)
        return ekm, xp.maximum(ekm / self.prandtl, EKMIN)

    def __call__(self, ctx) -> None:
        f, geo = ctx.fields, _Geo.of(ctx)
        edges = _edges(ctx.xp, f["u"], f["v"], f["w"], geo)
        ekm, ekh = self.viscosity(ctx, geo, edges)
        ctx.diag["ekm"], ctx.diag["ekh"] = ekm, ekh
        momentum_diffusion(ctx, geo, ekm, edges)
        _diffuse_scalars(ctx, geo, ekh)


class SubgridTKE:
    """Deardorff subgrid-TKE closure with prognostic ``e12`` (DALES default). Local.

    Parameters
    ----------
    params : dict, optional
        ``cm`` (0.12), ``cn`` (0.76), ``ce1`` (0.19), ``ce2`` (0.51), ``ch1`` (1), ``ch2`` (2).
    """

    def __init__(self, params=None):
        params = dict(params or {})
        c = {"cm": 0.12, "cn": 0.76, "ce1": 0.19, "ce2": 0.51, "ch1": 1.0, "ch2": 2.0}
        for k in c:
            if k in params:
                c[k] = float(params[k])
                if c[k] < 0:
                    raise InputError(f"subgrid: {k} must be >= 0, got {c[k]}")
        self.cm, self.cn, self.ce1, self.ce2, self.ch1, self.ch2 = (c[k] for k in
                                                                      ("cm", "cn", "ce1", "ce2", "ch1", "ch2"))

    def closure(self, ctx, geo):
        """``(ekm, ekh, zlt, e12, n2, thvf)`` from ``e12`` and the stratification
        (:data:`ops.tke_closure`). Local."""
        thvf = ctx.diag.get("thvref")
        if thvf is None:
            thvf = getattr(ctx.base, "th0", 300.0)
        thv = ctx.diag.get("thv", ctx.fields.get("thl"))
        ekm, ekh, zlt, e12, n2 = ops.tke_closure(ctx.xp, ctx.fields["e12"], thv, geo.zf, thvf, geo.delta, self.cm,
                                                 self.cn, self.ch1, self.ch2, E12MIN, EKMIN)
        return ekm, ekh, zlt, e12, n2, thvf

    def sources(self, ctx, geo, ekm, ekh, zlt, e12, n2, s2):
        """Shear production, buoyancy production/destruction and dissipation of ``e12``. Local.

        Returns the three block arrays ``(shear, buoyancy, dissipation)`` (d e12 / dt).
        """
        return ops.tke_sources.reference(ekm, ekh, zlt, e12, n2, s2, geo.delta, self.ce1, self.ce2)[:3]

    def __call__(self, ctx) -> None:
        xp, f, geo = ctx.xp, ctx.fields, _Geo.of(ctx)
        edges = _edges(xp, f["u"], f["v"], f["w"], geo)
        ekm, ekh, zlt, e12, n2, _ = self.closure(ctx, geo)
        ctx.diag["ekm"], ctx.diag["ekh"] = ekm, ekh
        momentum_diffusion(ctx, geo, ekm, edges)
        _diffuse_scalars(ctx, geo, ekh)
        if "e12" in ctx.tend:
            s2 = strain2(ctx, geo, edges)
            if type(self).sources is SubgridTKE.sources:
                shear, buoy, diss, total = ops.tke_sources(ekm, ekh, zlt, e12, n2, s2, geo.delta, self.ce1, self.ce2)
            else:
                shear, buoy, diss = self.sources(ctx, geo, ekm, ekh, zlt, e12, n2, s2)
                total = shear + buoy + diss
            ctx.diag["tke_budget"] = {"shear": shear, "buoyancy": buoy, "dissipation": diss}
            # (diffusion with 2 ekm and the sources added in one pass)
            ScalarDiffusion(xp, ekm, geo, scale=2.0).add_into(ctx, "e12", None, extra=total)
