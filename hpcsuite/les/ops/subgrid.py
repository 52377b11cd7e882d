"""Subgrid-closure operators (DALES modsubgrid, see :mod:`hpcsuite.les.subgrid`): the velocity
gradients on the cell edges (``edges``), ``S_ij S_ij`` (``strain2``), the TKE closure's length scale
and diffusivities (``tke_closure``) and sources (``tke_sources``), the diffusivities on the faces
(``face_diffusivities``), the diffusion of one or several scalars (``scalar_diffusion``,
``scalar_diffusion_many``) and of momentum (``momentum_diffusion``).

All arrays are a rank's blocks with halo; "core" means the block without its outermost x-y rim. The
reference is the array-API source below; ``les.fused`` (numba) and ``les.gpusubgrid`` (CUDA) are
registered for it and do its operations in the same order (bit-identical on the CPU and on the CuPy
stand-in; on a GPU CuPy's ``x ** 2`` is a ``pow`` and may differ from the kernels' product in the
last bit). All functions here are local.
"""
from __future__ import annotations

import numpy as np

from ...runtime.device import concat
from .. import fused, gpusubgrid
from ..constants import GRAV
from .common import core, cuda_arrays, full, interior_add, numba_arrays, random
from .registry import Operator

__all__ = ["face_diffusivities", "scalar_diffusion", "scalar_diffusion_many", "edges", "strain2", "tke_closure",
           "tke_sources", "momentum_diffusion"]

_GPU_ROUNDING = 1e-13        # relative: CuPy's x ** 2 (a pow) against the kernels' x * x on a real GPU


def _level0(xp, a):
    return xp.zeros_like(a[..., :1])


def _example_geometry(case):
    zg = case.zgrid
    return zg.dzf, zg.dzh, float(case.grid.dx), float(case.grid.dy)


# ---------------------------------------------------------------------------------------------
# face_diffusivities(K, dzf, dzh, scale=None) -> (kx, ky, kz) of scale * K
def _face_diffusivities_reference(K, dzf, dzh, scale=None):
    if scale is not None:
        K = scale * K
    kc = core(K)
    return (0.5 * (K[1:, 1:-1, ...] + K[:-1, 1:-1, ...]),
            0.5 * (K[1:-1, 1:, ...] + K[1:-1, :-1, ...]),
            (dzf[1:] * kc[..., :-1] + dzf[:-1] * kc[..., 1:]) / (2.0 * dzh[1:-1]))


def _face_diffusivities_example(case, rng):
    dzf, dzh, _, _ = _example_geometry(case)
    K = random(case, rng, case.fields["thl"].shape, 0.1, 2.0)
    return (K, dzf, dzh), ({"scale": 2.0} if rng.random() < 0.5 else {})


face_diffusivities = Operator("face_diffusivities", _face_diffusivities_reference, example=_face_diffusivities_example)
face_diffusivities.__doc__ = """``(kx, ky, kz)``: the block diffusivity ``scale * K`` (cell centres) on the x
faces (core rows), the y faces (core columns) and the inner z faces (linear in z). Local."""
face_diffusivities.register(
    "numba", lambda K, dzf, dzh, scale=None: fused.face_diffusivities(K if scale is None else scale * K, dzf, dzh),
    lambda K, dzf, dzh, scale=None: numba_arrays(K, dzf))
face_diffusivities.register(
    "cuda", lambda K, dzf, dzh, scale=None: gpusubgrid.face_diffusivities(K, dzf, dzh, scale=1.0 if scale is None
                                                                          else scale),
    lambda K, dzf, dzh, scale=None: cuda_arrays(K, dzf, dzh))


# ---------------------------------------------------------------------------------------------
# scalar_diffusion(xp, s, kx, ky, kz, dzf, dzh, dx2, dy2, flux_bottom=None, into=None, extra=None)
def _scalar_diffusion_reference(xp, s, kx, ky, kz, dzf, dzh, dx2, dy2, flux_bottom=None, into=None, extra=None):
    fx = kx * (s[1:, 1:-1, ...] - s[:-1, 1:-1, ...])
    fy = ky * (s[1:-1, 1:, ...] - s[1:-1, :-1, ...])
    t = (fx[1:, ...] - fx[:-1, ...]) / dx2 + (fy[:, 1:, ...] - fy[:, :-1, ...]) / dy2
    sc = core(s)
    inner = kz * (sc[..., 1:] - sc[..., :-1]) / dzh[1:-1]     # K ds/dz on faces 1..nz-1
    bottom = (_level0(xp, sc) if flux_bottom is None else -core(flux_bottom)[..., None])
    G = concat(xp)([bottom, inner, _level0(xp, sc)], axis=-1)
    out = t + (G[..., 1:] - G[..., :-1]) / dzf
    if into is None:
        return out
    if extra is not None:
        out = out + core(extra)
    interior_add(into[0], out, *into[1:])
    return None


def _scalar_diffusion_check(xp, s, kx, ky, kz, dzf, dzh, dx2, dy2, flux_bottom=None, into=None, extra=None):
    if into is None and extra is not None:
        raise ValueError("les.ops.scalar_diffusion: extra is added into a tendency: give into")
    if into is not None and into[0].shape != s.shape:
        raise ValueError(f"les.ops.scalar_diffusion: the tendency must have the field's shape, got "
                         f"{into[0].shape} and {s.shape}")
    if extra is not None and extra.shape != s.shape:
        raise ValueError(f"les.ops.scalar_diffusion: extra must have the field's shape, got {extra.shape}")


def _k_on(test, kx, ky, kz) -> bool:
    return isinstance(kx, float) or test(kx, ky, kz)


def _scalar_diffusion_numba_ok(xp, s, kx, ky, kz, dzf, dzh, dx2, dy2, flux_bottom=None, into=None, extra=None):
    return numba_arrays(s, dzf, *(() if into is None else (into[0],)), *(() if extra is None else (extra,))) \
        and _k_on(numba_arrays, kx, ky, kz)


def _scalar_diffusion_cuda_ok(xp, s, kx, ky, kz, dzf, dzh, dx2, dy2, flux_bottom=None, into=None, extra=None):
    return cuda_arrays(s, dzf, dzh, *(() if into is None else (into[0],)), *(() if extra is None else (extra,))) \
        and _k_on(cuda_arrays, kx, ky, kz)


def _scalar_diffusion_example(case, rng):
    g = case.grid
    dzf, dzh, dx, dy = _example_geometry(case)
    shape = case.fields["thl"].shape
    s = random(case, rng, shape, 290.0, 310.0)
    if rng.random() < 0.3:
        kx = ky = kz = 0.7
    else:
        kx, ky, kz = face_diffusivities.reference(random(case, rng, shape, 0.1, 2.0), dzf, dzh)
    flux = random(case, rng, shape[:2], -0.01, 0.01) if rng.random() < 0.7 else None
    kw = {}
    if rng.random() < 0.7:
        kw["into"] = (random(case, rng, shape), g.h, g.nxl, g.nyl)
        if rng.random() < 0.5:
            kw["extra"] = random(case, rng, shape)
    return (case.xp, s, kx, ky, kz, dzf, dzh, dx ** 2, dy ** 2, flux), kw


scalar_diffusion = Operator("scalar_diffusion", _scalar_diffusion_reference, check=_scalar_diffusion_check,
                            example=_scalar_diffusion_example)
scalar_diffusion.__doc__ = """``div(K grad s)`` of a cell-centred block ``s`` with the face diffusivities
``(kx, ky, kz)`` (arrays of :data:`face_diffusivities`, or one float), the kinematic surface flux
``flux_bottom`` (2-D block, upwards positive; None: zero) and zero flux at the lid. Local.

Returns the core-shaped tendency; with ``into = (tend, h, nxl, nyl)`` adds it (plus the core of the
block ``extra`` if given) to the interior of ``tend`` instead and returns None."""
scalar_diffusion.register("numba", lambda xp, *a, **k: fused.scalar_diffusion(*a, **k), _scalar_diffusion_numba_ok)
scalar_diffusion.register("cuda", lambda xp, *a, **k: gpusubgrid.scalar_diffusion(*a, **k),
                          _scalar_diffusion_cuda_ok, tolerance_gpu=_GPU_ROUNDING)


# ---------------------------------------------------------------------------------------------
# scalar_diffusion_many(xp, fields, kx, ky, kz, dzf, dzh, dx2, dy2, fluxes, into=(tends, h, nxl, nyl))
def _scalar_diffusion_many_reference(xp, fields, kx, ky, kz, dzf, dzh, dx2, dy2, fluxes, into) -> None:
    tends, h, nxl, nyl = into
    for s, flux, t in zip(fields, fluxes, tends):
        scalar_diffusion(xp, s, kx, ky, kz, dzf, dzh, dx2, dy2, flux, into=(t, h, nxl, nyl))


def _scalar_diffusion_many_check(xp, fields, kx, ky, kz, dzf, dzh, dx2, dy2, fluxes, into) -> None:
    if not len(fields) == len(fluxes) == len(into[0]):
        raise ValueError("les.ops.scalar_diffusion_many: one tendency and one flux (or None) per field")


def _scalar_diffusion_many_cuda_ok(xp, fields, kx, ky, kz, dzf, dzh, dx2, dy2, fluxes, into) -> bool:
    arrays = (*fields, *into[0])
    return len(fields) >= 2 and cuda_arrays(*arrays, dzf, dzh) and _k_on(cuda_arrays, kx, ky, kz) \
        and len({a.shape for a in arrays}) == 1 and all(f is None or cuda_arrays(f) for f in fluxes)


def _scalar_diffusion_many_example(case, rng):
    g = case.grid
    dzf, dzh, dx, dy = _example_geometry(case)
    shape = case.fields["thl"].shape
    fields = [random(case, rng, shape, 290.0, 310.0), random(case, rng, shape, 0.0, 0.02)]
    kx, ky, kz = face_diffusivities.reference(random(case, rng, shape, 0.1, 2.0), dzf, dzh)
    fluxes = [random(case, rng, shape[:2], -0.01, 0.01), None]
    tends = [random(case, rng, shape), random(case, rng, shape)]
    return (case.xp, fields, kx, ky, kz, dzf, dzh, dx ** 2, dy ** 2, fluxes, (tends, g.h, g.nxl, g.nyl)), {}


scalar_diffusion_many = Operator("scalar_diffusion_many", _scalar_diffusion_many_reference,
                                 check=_scalar_diffusion_many_check, example=_scalar_diffusion_many_example)
scalar_diffusion_many.__doc__ = """:data:`scalar_diffusion` of several fields with one diffusivity, each
added into its tendency (``into = (tends, h, nxl, nyl)``); on a GPU one launch for all. Local."""
scalar_diffusion_many.register("cuda", lambda xp, *a: gpusubgrid.scalar_diffusion_many(*a[:-1], into=a[-1]),
                               _scalar_diffusion_many_cuda_ok, tolerance_gpu=_GPU_ROUNDING)


# ---------------------------------------------------------------------------------------------
# edges(xp, u, v, w, dzh, dx, dy) -> (suv, suw, svw)
def _edges_reference(xp, u, v, w, dzh, dx, dy):
    dzh = dzh[1:-1]
    shape2 = u.shape[:2]
    suv = full(xp, (core(u) - core(u, 0, -1)) / dy + (core(v) - core(v, -1, 0)) / dx, shape2)
    uc, vc, wc = core(u), core(v), core(w)
    suw = full(xp, (uc[..., 1:] - uc[..., :-1]) / dzh + (wc[..., 1:-1] - core(w, -1, 0)[..., 1:-1]) / dx, shape2)
    svw = full(xp, (vc[..., 1:] - vc[..., :-1]) / dzh + (wc[..., 1:-1] - core(w, 0, -1)[..., 1:-1]) / dy, shape2)
    return suv, suw, svw


def _velocities(case, rng):
    return tuple(random(case, rng, case.fields[n].shape) for n in "uvw")


def _edges_example(case, rng):
    _, dzh, dx, dy = _example_geometry(case)
    return (case.xp, *_velocities(case, rng), dzh, dx, dy), {}


edges = Operator("edges", _edges_reference, example=_edges_example)
edges.__doc__ = """Velocity-gradient sums on the cell edges (blocks, valid at index >= 1 in x and y):
``suv[i, j]`` at (x = i dx, y = j dy): du/dy + dv/dx; ``suw[i, j, m]`` at (x = i dx, zh[m+1]):
du/dz + dw/dx on the inner faces; ``svw`` likewise at (y = j dy, zh[m+1]). Local."""
edges.register("numba", lambda xp, *a: fused.edges(*a), lambda xp, u, v, w, dzh, dx, dy: numba_arrays(u, v, w, dzh))
edges.register("cuda", lambda xp, *a: gpusubgrid.edges(*a), lambda xp, u, v, w, dzh, dx, dy: cuda_arrays(u, v, w, dzh),
               tolerance_gpu=_GPU_ROUNDING)


# ---------------------------------------------------------------------------------------------
# strain2(xp, u, v, w, edges, flux_uw, flux_vw, scale, dzf, dx, dy) -> S_ij S_ij (block, zero rim)
def _shear(xp, flux, scale, u):
    """dU/dz at the surface: ``flux / scale`` (``scale = -u* kappa z1``), zero without a flux."""
    return _level0(xp, u) if flux is None else (flux / scale)[..., None]


def _strain2_reference(xp, u, v, w, edges, flux_uw, flux_vw, scale, dzf, dx, dy):
    suv, suw, svw = edges
    wc = core(w)
    s2 = (((core(u, 1, 0) - core(u)) / dx) ** 2 + ((core(v, 0, 1) - core(v)) / dy) ** 2
          + ((wc[..., 1:] - wc[..., :-1]) / dzf) ** 2)
    s2 = s2 + 0.125 * (core(suv) ** 2 + core(suv, 0, 1) ** 2 + core(suv, 1, 0) ** 2 + core(suv, 1, 1) ** 2)
    top = xp.zeros_like(u[..., :1])
    for sx, flux, (di, dj) in ((suw, flux_uw, (1, 0)), (svw, flux_vw, (0, 1))):
        whole = concat(xp)([_shear(xp, flux, scale, u), sx, top], axis=-1)     # faces 0..nz
        a, b = core(whole), core(whole, di, dj)
        s2 = s2 + 0.125 * (a[..., :-1] ** 2 + a[..., 1:] ** 2 + b[..., :-1] ** 2 + b[..., 1:] ** 2)
    return full(xp, s2, u.shape[:2])


def _strain2_numba(xp, u, v, w, edges, flux_uw, flux_vw, scale, dzf, dx, dy):
    return fused.strain2(u, v, w, edges, _shear(xp, flux_uw, scale, u)[..., 0], _shear(xp, flux_vw, scale, u)[..., 0],
                         dzf, dx, dy)


def _strain2_cuda(xp, u, v, w, edges, flux_uw, flux_vw, scale, dzf, dx, dy):
    if flux_uw is not None and flux_vw is not None:            # (the kernel divides)
        return gpusubgrid.strain2(u, v, w, edges, flux_uw, flux_vw, dzf, dx, dy, scale=scale)
    return gpusubgrid.strain2(u, v, w, edges, _shear(xp, flux_uw, scale, u)[..., 0],
                              _shear(xp, flux_vw, scale, u)[..., 0], dzf, dx, dy)


def _surface_example(case, rng, shape2):
    """Surface momentum fluxes and the shear scale ``-u* kappa z1`` (or None: no surface)."""
    if rng.random() < 0.2:
        return None, None, None
    scale = -(random(case, rng, shape2, 0.1, 0.4) * 0.4 * float(case.zgrid.zf[0]))
    return random(case, rng, shape2, -0.1, 0.1), random(case, rng, shape2, -0.1, 0.1), scale


def _strain2_example(case, rng):
    dzf, dzh, dx, dy = _example_geometry(case)
    u, v, w = _velocities(case, rng)
    e = edges.reference(case.xp, u, v, w, dzh, dx, dy)
    return (case.xp, u, v, w, e, *_surface_example(case, rng, u.shape[:2]), dzf, dx, dy), {}


strain2 = Operator("strain2", _strain2_reference, example=_strain2_example)
strain2.__doc__ = """``S_ij S_ij`` at cell centres (DALES' ``strain2``; a block, valid on the core, zero
on the rim) from the velocities and their :data:`edges`; at the surface the shear is ``flux / scale``
(``scale = -u* kappa z1``, a 2-D block; a flux None: no shear), zero at the lid. Local."""
strain2.register("numba", _strain2_numba, lambda xp, u, v, w, e, fu, fv, sc, dzf, dx, dy: numba_arrays(u, v, w, dzf))
strain2.register("cuda", _strain2_cuda, lambda xp, u, v, w, e, fu, fv, sc, dzf, dx, dy: cuda_arrays(u, v, w, dzf, *e),
                 tolerance_gpu=_GPU_ROUNDING)


# ---------------------------------------------------------------------------------------------
# tke_closure(xp, e12f, thv, zf, thvf, delta, cm, cn, ch1, ch2, e12min, ekmin) -> (ekm, ekh, zlt, e12, n2)
def _dthvdz(xp, thv, zf):
    if thv.shape[-1] < 2:
        return xp.zeros_like(thv)
    inner = (thv[..., 2:] - thv[..., :-2]) / (zf[2:] - zf[:-2])
    bot = (thv[..., 1:2] - thv[..., 0:1]) / (zf[1] - zf[0])
    top = (thv[..., -1:] - thv[..., -2:-1]) / (zf[-1] - zf[-2])
    return concat(xp)([bot, inner, top], axis=-1)


def _tke_closure_reference(xp, e12f, thv, zf, thvf, delta, cm, cn, ch1, ch2, e12min, ekmin):
    e12 = xp.maximum(e12f, e12min)
    n2 = (GRAV / thvf) * _dthvdz(xp, thv, zf)
    stable_l = cn * e12 / xp.sqrt(xp.maximum(n2, 1e-30))
    zlt = xp.where(n2 > 0, xp.minimum(delta, stable_l), delta + 0.0 * e12)
    ekm = cm * zlt * e12
    ekh = (ch1 + ch2 * zlt / delta) * ekm
    return xp.maximum(ekm, ekmin), xp.maximum(ekh, ekmin), zlt, e12, n2


def _grav_thvf(xp, thvf, nz):
    return GRAV / (xp.full(nz, thvf) if isinstance(thvf, float) else thvf)


def _tke_closure_numba(xp, e12f, thv, zf, thvf, delta, *c):
    return fused.tke_closure(e12f, thv, zf, _grav_thvf(xp, thvf, thv.shape[-1]), delta, *c)


def _tke_closure_cuda(xp, e12f, thv, zf, thvf, delta, *c):
    if not isinstance(thvf, float):         # (the kernel divides g by thv_ref itself: one launch fewer)
        return gpusubgrid.tke_closure(e12f, thv, zf, thvf, delta, *c, grav=GRAV)
    return gpusubgrid.tke_closure(e12f, thv, zf, _grav_thvf(xp, thvf, thv.shape[-1]), delta, *c)


def _tke_closure_example(case, rng):
    g = case.grid
    dzf, _, dx, dy = _example_geometry(case)
    shape = case.fields["thl"].shape
    z = np.linspace(0.0, 1.0, g.nz)
    thv = case.xp.asarray(300.0 + 3.0 * z + rng.uniform(-0.3, 0.3, shape))        # stable and unstable
    thvf = 300.0 if rng.random() < 0.3 else random(case, rng, (g.nz,), 299.0, 303.0)
    delta = (dx * dy * dzf) ** (1.0 / 3.0)
    return (case.xp, random(case, rng, shape, 0.0, 0.8), thv, case.zgrid.zf, thvf, delta,
            0.12, 0.76, 1.0, 2.0, 5e-5, 1e-6), {}


def _nz2(thv) -> bool:
    return thv.shape[-1] >= 2


tke_closure = Operator("tke_closure", _tke_closure_reference, example=_tke_closure_example)
tke_closure.__doc__ = """``(ekm, ekh, zlt, e12, n2)`` of the Deardorff closure from the subgrid TKE
field ``e12f`` and ``thv`` (blocks), the reference ``thvf`` (a float or a profile) and ``delta``
(a profile); ``e12 = max(e12f, e12min)``, ``N^2 = g/thvf dthv/dz`` (centred, one-sided at the walls),
``zlt = min(delta, cn e12 / N)`` where stable, ``ekm = cm zlt e12``, ``ekh = (ch1 + ch2 zlt/delta) ekm``,
both at least ``ekmin``. Local."""
tke_closure.register("numba", _tke_closure_numba,
                     lambda xp, e12f, thv, zf, thvf, delta, *c: numba_arrays(e12f, thv, zf) and _nz2(thv))
tke_closure.register("cuda", _tke_closure_cuda,
                     lambda xp, e12f, thv, zf, thvf, delta, *c: cuda_arrays(e12f, thv, zf, delta) and _nz2(thv)
                     and (isinstance(thvf, float) or cuda_arrays(thvf)), tolerance_gpu=_GPU_ROUNDING)


# ---------------------------------------------------------------------------------------------
# tke_sources(ekm, ekh, zlt, e12, n2, s2, delta, ce1, ce2) -> (shear, buoyancy, dissipation, total)
def _tke_sources_reference(ekm, ekh, zlt, e12, n2, s2, delta, ce1, ce2):
    shear = ekm * (2.0 * s2) / (2.0 * e12)
    buoy = -ekh * n2 / (2.0 * e12)
    diss = -(ce1 + ce2 * zlt / delta) * e12 ** 2 / (2.0 * zlt)
    return shear, buoy, diss, shear + buoy + diss


def _tke_sources_example(case, rng):
    shape = case.fields["thl"].shape
    dzf, _, dx, dy = _example_geometry(case)
    pos = [random(case, rng, shape, 1e-3, 1.0) for _ in range(4)]            # ekm, ekh, zlt, e12
    return (*pos, random(case, rng, shape, -1e-4, 1e-4), random(case, rng, shape, 0.0, 1e-2),
            (dx * dy * dzf) ** (1.0 / 3.0), 0.19, 0.51), {}


tke_sources = Operator("tke_sources", _tke_sources_reference, example=_tke_sources_example)
tke_sources.__doc__ = """The subgrid TKE's shear production ``ekm 2 S2 / (2 e12)``, buoyancy term
``-ekh N^2 / (2 e12)``, dissipation ``-(ce1 + ce2 zlt/delta) e12^2 / (2 zlt)`` and their sum. Local."""
tke_sources.register("numba", lambda *a: fused.tke_sources(*a),
                     lambda ekm, ekh, zlt, e12, n2, s2, delta, ce1, ce2: numba_arrays(ekm, ekh, zlt, e12, n2, s2, delta)
                     and len({a.shape for a in (ekm, ekh, zlt, e12, n2, s2)}) == 1 and delta.shape == ekm.shape[-1:])
tke_sources.register("cuda", lambda *a: gpusubgrid.tke_sources(*a),
                     lambda ekm, ekh, zlt, e12, n2, s2, delta, ce1, ce2: cuda_arrays(ekm, ekh, zlt, e12, n2, s2, delta),
                     tolerance_gpu=_GPU_ROUNDING)


# ---------------------------------------------------------------------------------------------
# momentum_diffusion(xp, u, v, w, ekm, edges, dzf, dzh, dx, dy, flux_uw, flux_vw, tends, h, nxl, nyl)
def _momentum_diffusion_reference(xp, u, v, w, ekm, edges, dzf, dzh, dx, dy, flux_uw, flux_vw, tends, h, nxl, nyl):
    suv, suw, svw = edges
    tu, tv, tw = tends
    shape2 = u.shape[:2]
    e = core(ekm)
    zero = xp.zeros_like(e[..., :1])

    def zedge(ek2):                     # two columns' ekm summed -> the inner z faces
        return (dzf[1:] * ek2[..., :-1] + dzf[:-1] * ek2[..., 1:]) / (4.0 * dzh[1:-1])

    # edge stresses (valid at index >= 2 of the block): uv edges (x = i dx, y = j dy), uw edges
    # (x = i dx, zh), vw edges (y = j dy, zh)
    tau_uv = full(xp, 0.25 * (e + core(ekm, -1, 0) + core(ekm, 0, -1) + core(ekm, -1, -1)) * core(suv), shape2)
    tau_uw = full(xp, zedge(e + core(ekm, -1, 0)) * core(suw), shape2)
    tau_vw = full(xp, zedge(e + core(ekm, 0, -1)) * core(svw), shape2)

    def vertical(tau, flux):
        bottom = zero if flux is None else -core(flux)[..., None]
        G = concat(xp)([bottom, core(tau), zero], axis=-1)
        return (G[..., 1:] - G[..., :-1]) / dzf

    if tu is not None:
        fx = full(xp, e * (core(u, 1, 0) - core(u)), shape2)           # 2 ekm du/dx / 2 at centres
        t = (core(fx) - core(fx, -1, 0)) * (2.0 / dx ** 2)
        t = t + (core(tau_uv, 0, 1) - core(tau_uv)) / dy + vertical(tau_uw, flux_uw)
        interior_add(tu, t, h, nxl, nyl)
    if tv is not None:
        fy = full(xp, e * (core(v, 0, 1) - core(v)), shape2)
        t = (core(fy) - core(fy, 0, -1)) * (2.0 / dy ** 2)
        t = t + (core(tau_uv, 1, 0) - core(tau_uv)) / dx + vertical(tau_vw, flux_vw)
        interior_add(tv, t, h, nxl, nyl)
    if tw is not None and w.shape[-1] > 2:
        t = (core(tau_uw, 1, 0) - core(tau_uw)) / dx + (core(tau_vw, 0, 1) - core(tau_vw)) / dy
        wc = core(w)
        t = t + (e[..., 1:] * (wc[..., 2:] - wc[..., 1:-1]) / dzf[1:]
                 - e[..., :-1] * (wc[..., 1:-1] - wc[..., :-2]) / dzf[:-1]) * 2.0 / dzh[1:-1]
        interior_add(tw, t, h, nxl, nyl, slice(1, -1))


def _momentum_diffusion_check(xp, u, v, w, ekm, edges, dzf, dzh, dx, dy, flux_uw, flux_vw, tends, h, nxl, nyl):
    if isinstance(ekm, float):
        raise ValueError("les.ops.momentum_diffusion: ekm must be a block array (a constant viscosity "
                         "diffuses with scalar_diffusion)")
    for t, a in zip(tends, (u, v, w)):
        if t is not None and t.shape != a.shape:
            raise ValueError(f"les.ops.momentum_diffusion: a tendency of shape {t.shape} for a field of {a.shape}")


def _momentum_diffusion_kernel(module, test):
    """The numba (``module = fused``) or CUDA (``gpusubgrid``) implementation: added into the three
    tendencies by the kernel when all are there, else returned and added here."""

    def run(xp, u, v, w, ekm, edges, dzf, dzh, dx, dy, flux_uw, flux_vw, tends, h, nxl, nyl):
        if all(t is not None for t in tends) and w.shape[-1] > 2 and test(*tends):
            module.momentum_diffusion(u, v, w, ekm, edges, dzf, dzh, dx, dy, flux_uw, flux_vw,
                                      into=(*tends, h, nxl, nyl))
            return
        tu, tv, tw = module.momentum_diffusion(u, v, w, ekm, edges, dzf, dzh, dx, dy, flux_uw, flux_vw)
        for t, c, levels in zip(tends, (tu, tv, tw), (None, None, slice(1, -1))):
            if t is not None and (levels is None or w.shape[-1] > 2):
                interior_add(t, c, h, nxl, nyl, levels)
    return run


def _momentum_diffusion_example(case, rng):
    g = case.grid
    dzf, dzh, dx, dy = _example_geometry(case)
    u, v, w = _velocities(case, rng)
    e = edges.reference(case.xp, u, v, w, dzh, dx, dy)
    flux_uw, flux_vw, _ = _surface_example(case, rng, u.shape[:2])
    tends = [random(case, rng, a.shape) for a in (u, v, w)]
    if rng.random() < 0.3:
        tends[int(rng.integers(3))] = None
    ekm = random(case, rng, u.shape, 1e-3, 2.0)
    return (case.xp, u, v, w, ekm, e, dzf, dzh, dx, dy, flux_uw, flux_vw, tuple(tends), g.h, g.nxl, g.nyl), {}


momentum_diffusion = Operator("momentum_diffusion", _momentum_diffusion_reference, check=_momentum_diffusion_check,
                              example=_momentum_diffusion_example)
momentum_diffusion.__doc__ = """Add the divergence of the subgrid stress (DALES diffu, diffv, diffw) to the
interiors of ``tends = (tu, tv, tw)`` (None: that component is skipped; ``tw`` only with more than
one inner level). The stresses are formed once on the cell edges (``ekm`` averaged to the edge,
linearly in z) and on the cell centres; the surface fluxes ``flux_uw``, ``flux_vw`` (2-D blocks or
None) enter at the bottom face, the lid has zero flux. Local."""
momentum_diffusion.register(
    "numba", _momentum_diffusion_kernel(fused, numba_arrays),
    lambda xp, u, v, w, ekm, *rest: numba_arrays(u, rest[1], ekm))
momentum_diffusion.register(
    "cuda", _momentum_diffusion_kernel(gpusubgrid, cuda_arrays),
    lambda xp, u, v, w, ekm, e, dzf, dzh, *rest: cuda_arrays(u, v, w, ekm, dzf, dzh, *e), tolerance_gpu=_GPU_ROUNDING)
