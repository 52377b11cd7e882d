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
"""
from __future__ import annotations

import numpy as np

from ..runtime import InputError
from . import fused, gpukernels, gpusubgrid
from .constants import GRAV
from .state import add_at, zgrid_of
from .thermo import concat

__all__ = ["ConstantViscosity", "Smagorinsky", "SubgridTKE", "ScalarDiffusion", "diffuse_scalar", "momentum_diffusion",
           "strain2", "KARMAN", "EKMIN", "E12MIN"]

KARMAN = 0.4       # von Karman constant (DALES fkar)
EKMIN = 1e-6       # m^2/s, lower bound of ekm and ekh (DALES ekmin)
E12MIN = 5e-5      # m/s, lower bound of e12 (DALES e12min)
_MOMENTUM = ("u", "v", "w")


# ---------------------------------------------------------------------------------------------
# helpers: "core" views (the block without its outermost rim) shifted by (di, dj)
def _c(a, di: int = 0, dj: int = 0):
    nx, ny = a.shape[0], a.shape[1]
    return a[1 + di:nx - 1 + di, 1 + dj:ny - 1 + dj, ...]


def _full(xp, core, shape2):
    """A block-shaped array holding ``core`` inside a zero rim of one cell."""
    out = xp.zeros(tuple(shape2) + tuple(core.shape[2:]), dtype=core.dtype, **_dev(xp, core))
    out[1:-1, 1:-1, ...] = core
    return out


def _dev(xp, like) -> dict:
    """``device=`` for array_api_strict's non-default device (NumPy and CuPy need none)."""
    return {"device": like.device} if getattr(xp, "__name__", "").startswith("array_api_strict") else {}


def _k(K, di=0, dj=0):
    return K if isinstance(K, float) else _c(K, di, dj)


def _zeros_like_level(xp, a):
    return xp.zeros_like(a[..., :1])


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
    g, h = ctx.grid, ctx.h
    t = ctx.tend[name]
    src = core_tend[h - 1:h - 1 + g.nxl, h - 1:h - 1 + g.nyl, ...]
    if levels is None:
        add_at(t, (slice(h, h + g.nxl), slice(h, h + g.nyl), ...), src)
    else:
        add_at(t, (slice(h, h + g.nxl), slice(h, h + g.nyl), levels), src)


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
        (formed on first use, once for every field diffused with ``K``)."""
        if self._faces is None and self._K is None and _gpu(self._raw, self.geo.dzf, self.geo.dzh):
            self._faces = gpusubgrid.face_diffusivities(self._raw, self.geo.dzf, self.geo.dzh, scale=self._scale)
        if self._faces is None:
            K, dzf, dzh = self.K, self.geo.dzf, self.geo.dzh
            if isinstance(K, float):
                self._faces = (K, K, K)
            elif _fusable(K, dzf):
                self._faces = fused.face_diffusivities(K, dzf, dzh)      # the same operations in one pass
            elif _gpu(K, dzf, dzh):
                self._faces = gpusubgrid.face_diffusivities(K, dzf, dzh)
            else:
                kc = _c(K)
                self._faces = (0.5 * (K[1:, 1:-1, ...] + K[:-1, 1:-1, ...]),
                               0.5 * (K[1:-1, 1:, ...] + K[1:-1, :-1, ...]),
                               (dzf[1:] * kc[..., :-1] + dzf[:-1] * kc[..., 1:]) / (2.0 * dzh[1:-1]))
        return self._faces

    def add_into(self, ctx, name: str, flux_bottom=None, extra=None) -> bool:
        """Add the tendency of field ``name`` to the interior of ``ctx.tend[name]`` (on a GPU by the
        diffusion kernel itself: one launch, not two). Local.

        ``extra``: a block array whose core is added to the tendency before it goes into
        ``ctx.tend`` (``tend += diffusion + extra``); only the kernels (numba, CUDA) take it:
        without them nothing is added and False is returned (the caller adds both). True when added.
        """
        s, t, geo, g = ctx.fields[name], ctx.tend[name], self.geo, ctx.grid
        kx, ky, kz = self.faces
        if _fusable(s, t, geo.dzf) and isinstance(self.K, (float, np.ndarray)) and t.shape == s.shape \
                and (extra is None or (isinstance(extra, np.ndarray) and extra.shape == s.shape)):
            # (numba: computed on the interior and added there, no temporaries)
            fused.scalar_diffusion(s, kx, ky, kz, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2, flux_bottom,
                                   into=(t, g.h, g.nxl, g.nyl), extra=extra)
            return True
        if _gpu(s, t, geo.dzf, geo.dzh) and (isinstance(kx, float) or _gpu(kx, ky, kz)) \
                and (extra is None or _gpu(extra)):
            gpusubgrid.scalar_diffusion(s, kx, ky, kz, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2, flux_bottom,
                                        into=(t, g.h, g.nxl, g.nyl), extra=extra)
            return True
        if extra is not None:
            return False
        _add_interior(ctx, name, self(s, flux_bottom))
        return True

    def add_many_into(self, ctx, names, fluxes) -> None:
        """:meth:`add_into` of several fields (``fluxes``: each one's surface flux or None); on a GPU
        one launch for all of them. Local."""
        geo, g = self.geo, ctx.grid
        kx, ky, kz = self.faces if len(names) >= 2 else (None, None, None)
        arrays = [a for n in names for a in (ctx.fields[n], ctx.tend[n])]
        if len(names) >= 2 and _gpu(*arrays, geo.dzf, geo.dzh) and (isinstance(kx, float) or _gpu(kx, ky, kz)) \
                and len({a.shape for a in arrays}) == 1 and all(f is None or _gpu(f) for f in fluxes):
            gpusubgrid.scalar_diffusion_many([ctx.fields[n] for n in names], kx, ky, kz, geo.dzf, geo.dzh,
                                             geo.dx ** 2, geo.dy ** 2, list(fluxes),
                                             into=([ctx.tend[n] for n in names], g.h, g.nxl, g.nyl))
            return
        for name, flux in zip(names, fluxes):
            self.add_into(ctx, name, flux)

    def __call__(self, s, flux_bottom=None):
        """Core-shaped tendency of ``s``; ``flux_bottom`` a 2-D block array of the kinematic surface
        flux (upwards positive) or None (zero flux). Zero flux at the lid."""
        xp, geo = self.xp, self.geo
        kx, ky, kz = self.faces
        if _fusable(s, geo.dzf) and (isinstance(self.K, (float, np.ndarray))):
            # the same operations in one pass (numba)
            return fused.scalar_diffusion(s, kx, ky, kz, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2, flux_bottom)
        if _gpu(s, geo.dzf, geo.dzh) and (isinstance(kx, float) or _gpu(kx, ky, kz)):
            return gpusubgrid.scalar_diffusion(s, kx, ky, kz, geo.dzf, geo.dzh, geo.dx ** 2, geo.dy ** 2, flux_bottom)
        fx = kx * (s[1:, 1:-1, ...] - s[:-1, 1:-1, ...])
        fy = ky * (s[1:-1, 1:, ...] - s[1:-1, :-1, ...])
        t = (fx[1:, ...] - fx[:-1, ...]) / geo.dx ** 2 + (fy[:, 1:, ...] - fy[:, :-1, ...]) / geo.dy ** 2
        sc = _c(s)
        inner = kz * (sc[..., 1:] - sc[..., :-1]) / geo.dzh[1:-1]     # K ds/dz on faces 1..nz-1
        bottom = (_zeros_like_level(xp, sc) if flux_bottom is None else -_c(flux_bottom)[..., None])
        G = concat(xp)([bottom, inner, _zeros_like_level(xp, sc)], axis=-1)
        return t + (G[..., 1:] - G[..., :-1]) / geo.dzf


def diffuse_scalar(xp, s, K, geo, flux_bottom=None):
    """Core-shaped tendency ``div(K grad s)`` of a cell-centred field. Local.

    ``K`` is a float or a block array at cell centres; ``flux_bottom`` a 2-D block array of the
    kinematic surface flux (upwards positive) or None (zero flux). Zero flux at the lid.
    """
    return ScalarDiffusion(xp, K, geo)(s, flux_bottom)


def _fusable(*arrays) -> bool:
    """Whether the fused numba kernels apply (NumPy arrays; see :mod:`hpcsuite.les.fused`)."""
    return fused.on_cpu() and all(isinstance(a, np.ndarray) for a in arrays)


def _gpu(*arrays) -> bool:
    """Whether their CUDA counterparts apply (contiguous CuPy arrays; :mod:`hpcsuite.les.gpusubgrid`)."""
    return gpukernels.usable(*arrays)


def _edges(xp, u, v, w, geo):
    """Velocity-gradient sums on the cell edges (block arrays, valid at index >= 1 in x and y).

    ``suv[i, j]`` at (x = i dx, y = j dy): du/dy + dv/dx; ``suw[i, j, m]`` at (x = i dx, zh[m+1]):
    du/dz + dw/dx for the inner faces; ``svw`` likewise at (y = j dy, zh[m+1]).
    """
    if _fusable(u, v, w, geo.dzh):
        return fused.edges(u, v, w, geo.dzh, geo.dx, geo.dy)           # the same operations in one pass
    if _gpu(u, v, w, geo.dzh):
        return gpusubgrid.edges(u, v, w, geo.dzh, geo.dx, geo.dy)
    dzh = geo.dzh[1:-1]
    shape2 = u.shape[:2]
    suv = _full(xp, (_c(u) - _c(u, 0, -1)) / geo.dy + (_c(v) - _c(v, -1, 0)) / geo.dx, shape2)
    uc, vc, wc = _c(u), _c(v), _c(w)
    suw = _full(xp, (uc[..., 1:] - uc[..., :-1]) / dzh
                + (wc[..., 1:-1] - _c(w, -1, 0)[..., 1:-1]) / geo.dx, shape2)
    svw = _full(xp, (vc[..., 1:] - vc[..., :-1]) / dzh
                + (wc[..., 1:-1] - _c(w, 0, -1)[..., 1:-1]) / geo.dy, shape2)
    return suv, suw, svw


def _surface_shear_parts(ctx, geo, key_flux):
    """``(flux, scale)`` with ``flux / scale`` the surface shear of :func:`_surface_shear`, or None
    without a flux or u*."""
    flux, ustar = _surface(ctx, key_flux), _surface(ctx, "ustar")
    if flux is None or ustar is None:
        return None
    # the denominator only changes with the u* field (a constant one is the same object every
    # call); negating it instead of the flux gives the same bits (IEEE division is sign-symmetric)
    if geo.shear_scale is None or geo.shear_scale[0] is not ustar:
        geo.shear_scale = (ustar, -(ctx.xp.maximum(ustar, 1e-10) * KARMAN * geo.zf[0]))
    return flux, geo.shear_scale[1]


def _surface_shear(ctx, geo, key_flux, like):
    """dU/dz at the surface on u (or v) points: -uw / (u* kappa z1); zero without u*."""
    parts = _surface_shear_parts(ctx, geo, key_flux)
    if parts is None:
        return ctx.xp.zeros_like(like[..., :1])
    return (parts[0] / parts[1])[..., None]


def strain2(ctx, geo, edges):
    """``S_ij S_ij`` at cell centres (block array valid on the core). Local."""
    xp, f = ctx.xp, ctx.fields
    u, v, w = f["u"], f["v"], f["w"]
    if _fusable(u, v, w, geo.dzf):                   # the same operations in one pass
        shear = [_surface_shear(ctx, geo, key, u)[..., 0] for key in ("uw", "vw")]
        return fused.strain2(u, v, w, edges, shear[0], shear[1], geo.dzf, geo.dx, geo.dy)
    if _gpu(u, v, w, geo.dzf, *edges):
        parts = [_surface_shear_parts(ctx, geo, key) for key in ("uw", "vw")]
        if all(p is not None for p in parts) and parts[0][1] is parts[1][1]:     # (one u* scale)
            return gpusubgrid.strain2(u, v, w, edges, parts[0][0], parts[1][0], geo.dzf, geo.dx, geo.dy,
                                      scale=parts[0][1])              # (the kernel divides)
        shear = [_surface_shear(ctx, geo, key, u)[..., 0] for key in ("uw", "vw")]
        return gpusubgrid.strain2(u, v, w, edges, shear[0], shear[1], geo.dzf, geo.dx, geo.dy)
    suv, suw, svw = edges
    wc = _c(w)
    s2 = (((_c(u, 1, 0) - _c(u)) / geo.dx) ** 2 + ((_c(v, 0, 1) - _c(v)) / geo.dy) ** 2
          + ((wc[..., 1:] - wc[..., :-1]) / geo.dzf) ** 2)
    s2 = s2 + 0.125 * (_c(suv) ** 2 + _c(suv, 0, 1) ** 2 + _c(suv, 1, 0) ** 2 + _c(suv, 1, 1) ** 2)
    top = xp.zeros_like(u[..., :1])
    for sx, key, (di, dj) in ((suw, "uw", (1, 0)), (svw, "vw", (0, 1))):
        full = concat(xp)([_surface_shear(ctx, geo, key, u), sx, top], axis=-1)   # faces 0..nz
        a, b = _c(full), _c(full, di, dj)
        s2 = s2 + 0.125 * (a[..., :-1] ** 2 + a[..., 1:] ** 2 + b[..., :-1] ** 2 + b[..., 1:] ** 2)
    return _full(xp, s2, u.shape[:2])


def momentum_diffusion(ctx, geo, ekm, edges) -> None:
    """Add the divergence of the subgrid stress (DALES diffu, diffv, diffw) to u, v, w. Local.

    The stresses are formed once on the cell edges (``ekm`` averaged to the edge, linearly in z)
    and on the cell centres, and differenced for each velocity component (flux form).
    """
    xp, f = ctx.xp, ctx.fields
    u, v, w = f["u"], f["v"], f["w"]
    suv, suw, svw = edges
    dx, dy, dzf, dzh = geo.dx, geo.dy, geo.dzf, geo.dzh
    one_pass = None
    if fused.on_cpu() and isinstance(u, np.ndarray) and isinstance(dzf, np.ndarray) and not isinstance(ekm, float):
        one_pass = fused.momentum_diffusion           # the same operations in one pass (numba)
    elif not isinstance(ekm, float) and _gpu(u, v, w, ekm, dzf, dzh, *edges):
        one_pass = gpusubgrid.momentum_diffusion      # (CUDA)
    g = ctx.grid
    into_ok = all(n in ctx.tend for n in "uvw") and w.shape[-1] > 2 \
        and all(ctx.tend[n].shape == f[n].shape for n in "uvw")
    if one_pass is fused.momentum_diffusion and into_ok \
            and all(isinstance(ctx.tend[n], np.ndarray) for n in "uvw"):    # added into the tendencies
        one_pass(u, v, w, ekm, edges, dzf, dzh, dx, dy, _surface(ctx, "uw"), _surface(ctx, "vw"),
                 into=(ctx.tend["u"], ctx.tend["v"], ctx.tend["w"], g.h, g.nxl, g.nyl))
        return
    if one_pass is gpusubgrid.momentum_diffusion and into_ok \
            and _gpu(*(ctx.tend[n] for n in "uvw")):         # added into the tendencies by the kernel
        one_pass(u, v, w, ekm, edges, dzf, dzh, dx, dy, _surface(ctx, "uw"), _surface(ctx, "vw"),
                 into=(ctx.tend["u"], ctx.tend["v"], ctx.tend["w"], g.h, g.nxl, g.nyl))
        return
    if one_pass is not None:
        tu, tv, tw = one_pass(u, v, w, ekm, edges, dzf, dzh, dx, dy, _surface(ctx, "uw"), _surface(ctx, "vw"))
        if "u" in ctx.tend:
            _add_interior(ctx, "u", tu)
        if "v" in ctx.tend:
            _add_interior(ctx, "v", tv)
        if "w" in ctx.tend and w.shape[-1] > 2:
            _add_interior(ctx, "w", tw, slice(1, -1))
        return
    shape2 = u.shape[:2]
    e = _c(ekm)
    zero = xp.zeros_like(e[..., :1])

    def zedge(ek2):                     # two columns' ekm summed -> the inner z faces
        return (dzf[1:] * ek2[..., :-1] + dzf[:-1] * ek2[..., 1:]) / (4.0 * dzh[1:-1])

    # edge stresses (valid at index >= 2 of the block): uv edges (x = i dx, y = j dy), uw edges
    # (x = i dx, zh), vw edges (y = j dy, zh)
    tau_uv = _full(xp, 0.25 * (e + _c(ekm, -1, 0) + _c(ekm, 0, -1) + _c(ekm, -1, -1)) * _c(suv), shape2)
    tau_uw = _full(xp, zedge(e + _c(ekm, -1, 0)) * _c(suw), shape2)
    tau_vw = _full(xp, zedge(e + _c(ekm, 0, -1)) * _c(svw), shape2)

    def vertical(tau, key):
        flux = _surface(ctx, key)
        bottom = zero if flux is None else -_c(flux)[..., None]
        G = concat(xp)([bottom, _c(tau), zero], axis=-1)
        return (G[..., 1:] - G[..., :-1]) / dzf

    if "u" in ctx.tend:
        fx = _full(xp, e * (_c(u, 1, 0) - _c(u)), shape2)           # 2 ekm du/dx / 2 at centres
        t = (_c(fx) - _c(fx, -1, 0)) * (2.0 / dx ** 2)
        t = t + (_c(tau_uv, 0, 1) - _c(tau_uv)) / dy + vertical(tau_uw, "uw")
        _add_interior(ctx, "u", t)
    if "v" in ctx.tend:
        fy = _full(xp, e * (_c(v, 0, 1) - _c(v)), shape2)
        t = (_c(fy) - _c(fy, 0, -1)) * (2.0 / dy ** 2)
        t = t + (_c(tau_uv, 1, 0) - _c(tau_uv)) / dx + vertical(tau_vw, "vw")
        _add_interior(ctx, "v", t)
    if "w" in ctx.tend and w.shape[-1] > 2:
        t = (_c(tau_uw, 1, 0) - _c(tau_uw)) / dx + (_c(tau_vw, 0, 1) - _c(tau_vw)) / dy
        wc = _c(w)
        t = t + (e[..., 1:] * (wc[..., 2:] - wc[..., 1:-1]) / dzf[1:]
                 - e[..., :-1] * (wc[..., 1:-1] - wc[..., :-2]) / dzf[:-1]) * 2.0 / dzh[1:-1]
        _add_interior(ctx, "w", t, slice(1, -1))


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

    def _dthvdz(self, ctx, geo):
        xp = ctx.xp
        thv = ctx.diag.get("thv", ctx.fields.get("thl"))
        zf = geo.zf
        if thv.shape[-1] < 2:
            return xp.zeros_like(thv)
        inner = (thv[..., 2:] - thv[..., :-2]) / (zf[2:] - zf[:-2])
        bot = (thv[..., 1:2] - thv[..., 0:1]) / (zf[1] - zf[0])
        top = (thv[..., -1:] - thv[..., -2:-1]) / (zf[-1] - zf[-2])
        return concat(xp)([bot, inner, top], axis=-1)

    def closure(self, ctx, geo):
        """``(ekm, ekh, zlt, e12, dthvdz, thvf)`` from ``e12`` and the stratification. Local."""
        xp = ctx.xp
        thvf = ctx.diag.get("thvref")
        if thvf is None:
            thvf = getattr(ctx.base, "th0", 300.0)
        thv = ctx.diag.get("thv", ctx.fields.get("thl"))
        one_pass = None
        if _fusable(ctx.fields["e12"], thv, geo.zf) and thv.shape[-1] >= 2:
            one_pass = fused.tke_closure                  # the same operations in one pass
        elif _gpu(ctx.fields["e12"], thv, geo.zf, geo.delta) and thv.shape[-1] >= 2 \
                and (isinstance(thvf, float) or _gpu(thvf)):
            one_pass = gpusubgrid.tke_closure             # (CUDA)
        if one_pass is gpusubgrid.tke_closure and not isinstance(thvf, float):
            # (the kernel divides g by thv_ref itself: one launch fewer per call)
            ekm, ekh, zlt, e12, n2 = one_pass(ctx.fields["e12"], thv, geo.zf, thvf, geo.delta, self.cm,
                                              self.cn, self.ch1, self.ch2, E12MIN, EKMIN, grav=GRAV)
            return ekm, ekh, zlt, e12, n2, thvf
        if one_pass is not None:
            grav_thvf = GRAV / (xp.full(thv.shape[-1], thvf) if isinstance(thvf, float) else thvf)
            ekm, ekh, zlt, e12, n2 = one_pass(ctx.fields["e12"], thv, geo.zf, grav_thvf, geo.delta, self.cm,
                                              self.cn, self.ch1, self.ch2, E12MIN, EKMIN)
            return ekm, ekh, zlt, e12, n2, thvf
        e12 = xp.maximum(ctx.fields["e12"], E12MIN)
        dthvdz = self._dthvdz(ctx, geo)
        n2 = (GRAV / thvf) * dthvdz
        stable_l = self.cn * e12 / xp.sqrt(xp.maximum(n2, 1e-30))
        zlt = xp.where(n2 > 0, xp.minimum(geo.delta, stable_l), geo.delta + 0.0 * e12)
        ekm = self.cm * zlt * e12
        ekh = (self.ch1 + self.ch2 * zlt / geo.delta) * ekm
        return xp.maximum(ekm, EKMIN), xp.maximum(ekh, EKMIN), zlt, e12, n2, thvf

    def sources(self, ctx, geo, ekm, ekh, zlt, e12, n2, s2):
        """Shear production, buoyancy production/destruction and dissipation of ``e12``. Local.

        Returns the three block arrays ``(shear, buoyancy, dissipation)`` (d e12 / dt).
        """
        shear = ekm * (2.0 * s2) / (2.0 * e12)
        buoy = -ekh * n2 / (2.0 * e12)
        diss = -(self.ce1 + self.ce2 * zlt / geo.delta) * e12 ** 2 / (2.0 * zlt)
        return shear, buoy, diss

    def __call__(self, ctx) -> None:
        xp, f, geo = ctx.xp, ctx.fields, _Geo.of(ctx)
        edges = _edges(xp, f["u"], f["v"], f["w"], geo)
        ekm, ekh, zlt, e12, n2, _ = self.closure(ctx, geo)
        ctx.diag["ekm"], ctx.diag["ekh"] = ekm, ekh
        momentum_diffusion(ctx, geo, ekm, edges)
        _diffuse_scalars(ctx, geo, ekh)
        if "e12" in ctx.tend:
            s2 = strain2(ctx, geo, edges)
            if type(self).sources is SubgridTKE.sources and _gpu(ekm, ekh, zlt, e12, n2, s2, geo.delta):
                shear, buoy, diss, total = gpusubgrid.tke_sources(ekm, ekh, zlt, e12, n2, s2, geo.delta,
                                                                  self.ce1, self.ce2)    # (CUDA, one pass)
            elif type(self).sources is SubgridTKE.sources and _fusable(ekm, ekh, zlt, e12, n2, s2, geo.delta) \
                    and len({a.shape for a in (ekm, ekh, zlt, e12, n2, s2)}) == 1 \
                    and geo.delta.shape == ekm.shape[-1:]:
                shear, buoy, diss, total = fused.tke_sources(ekm, ekh, zlt, e12, n2, s2, geo.delta,
                                                             self.ce1, self.ce2)         # (numba, one pass)
            else:
                shear, buoy, diss = self.sources(ctx, geo, ekm, ekh, zlt, e12, n2, s2)
                total = shear + buoy + diss
            ctx.diag["tke_budget"] = {"shear": shear, "buoyancy": buoy, "dissipation": diss}
            op = ScalarDiffusion(xp, ekm, geo, scale=2.0)
            if not op.add_into(ctx, "e12", None, extra=total):      # (CUDA: diffusion + sources in one launch)
                _add_interior(ctx, "e12", op(f["e12"]) + _c(total))
