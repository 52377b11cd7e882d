"""Large-scale forcing operators: Coriolis (``coriolis``), first-order upwind subsidence of one or
several scalars (``subsidence``, ``subsidence_many``), prescribed profile tendencies
(``add_profiles_many``) and the sponge layer's relaxation towards a profile (``sponge``).

The reference is the array-API source below; ``les.fused`` (numba) and ``les.gpukernels`` (CUDA)
are registered for it, bit-identical. All functions here are local.
"""
from __future__ import annotations

import numpy as np

from ...runtime.device import concat
from .. import fused, gpukernels
from ..state import add_at
from .common import cuda_arrays, numba_arrays, random
from .registry import Operator

__all__ = ["coriolis", "subsidence", "subsidence_many", "add_profiles_many", "sponge"]


def _interior(h, nxl, nyl):
    return slice(h, h + nxl), slice(h, h + nyl), Ellipsis


# ---------------------------------------------------------------------------------------------
# coriolis(u, v, tu, tv, h, nxl, nyl, f, cu, cv, ug, vg)
def _coriolis_reference(u, v, tu, tv, h, nxl, nyl, f, cu, cv, ug, vg) -> None:
    I, J, E = _interior(h, nxl, nyl)
    im = slice(I.start - 1, I.stop - 1)
    jp, jm = slice(J.start + 1, J.stop + 1), slice(J.start - 1, J.stop - 1)
    ip = slice(I.start + 1, I.stop + 1)
    v_at_u = 0.25 * (v[I, J, E] + v[I, jp, E] + v[im, J, E] + v[im, jp, E]) + cv
    u_at_v = 0.25 * (u[I, J, E] + u[ip, J, E] + u[I, jm, E] + u[ip, jm, E]) + cu
    tu[I, J, E] += f * (v_at_u - vg)
    tv[I, J, E] -= f * (u_at_v - ug)


def _coriolis_numba(u, v, tu, tv, h, nxl, nyl, f, cu, cv, ug, vg) -> None:
    nz = u.shape[2]
    fused.coriolis(u, v, tu, tv, h, nxl, nyl, f, cu, cv, np.broadcast_to(np.asarray(ug, dtype=np.float64), (nz,)),
                   np.broadcast_to(np.asarray(vg, dtype=np.float64), (nz,)))


def _coriolis_example(case, rng):
    g, f = case.grid, case.fields
    nz = g.nz
    return (random(case, rng, f["u"].shape), random(case, rng, f["v"].shape), random(case, rng, f["u"].shape),
            random(case, rng, f["v"].shape), g.h, g.nxl, g.nyl, 3.77e-5, float(rng.uniform(-5, 5)),
            float(rng.uniform(-1, 1)), random(case, rng, (nz,), -10.0, 0.0), random(case, rng, (nz,), -1.0, 1.0)), {}


coriolis = Operator("coriolis", _coriolis_reference, example=_coriolis_example)
coriolis.__doc__ = """``tu += f (v - vg)``, ``tv -= f (u - ug)`` on the interior, ``v`` averaged to the ``u``
points from its four neighbours and ``u`` to the ``v`` points (DALES), with the Galilean shift
``(cu, cv)`` added back; ``ug``, ``vg`` profiles or floats. Local."""
coriolis.register("numba", _coriolis_numba, lambda u, v, tu, tv, *rest: numba_arrays(u, v, tu, tv))
coriolis.register("cuda", lambda *a: gpukernels.coriolis(*a),
                  lambda u, v, tu, tv, h, nxl, nyl, f, cu, cv, ug, vg: cuda_arrays(u, v, tu, tv, ug, vg)
                  and ug.shape == vg.shape == (u.shape[2],))


# ---------------------------------------------------------------------------------------------
# subsidence(xp, s, t, h, nxl, nyl, wls, dzh): t -= w_ls ds/dz, upwind
def _subsidence_reference(xp, s_block, t, h, nxl, nyl, wls, dzh) -> None:
    I, J, E = _interior(h, nxl, nyl)
    s = s_block[I, J, E]
    zero = xp.zeros_like(s[..., :1])
    grad = (s[..., 1:] - s[..., :-1]) / dzh[1:-1]               # on the inner faces
    up = concat(xp)([grad, zero], axis=-1)                      # face above each cell
    down = concat(xp)([zero, grad], axis=-1)                    # face below each cell
    t[I, J, E] -= xp.where(wls < 0, wls * up, wls * down)


def _subsidence_check(xp, s, t, h, nxl, nyl, wls, dzh) -> None:
    if s.shape != t.shape:
        raise ValueError(f"les.ops.subsidence: field and tendency of one shape, got {s.shape} and {t.shape}")


def _subsidence_example(case, rng):
    g, zg = case.grid, case.zgrid
    shape = case.fields["thl"].shape
    wls = case.xp.asarray(np.where(np.arange(g.nz) < g.nz // 2, 0.004, -0.006) * rng.uniform(0.5, 1.5, g.nz))
    return (case.xp, random(case, rng, shape, 290.0, 310.0), random(case, rng, shape), g.h, g.nxl, g.nyl, wls,
            zg.dzh), {}


subsidence = Operator("subsidence", _subsidence_reference, check=_subsidence_check, example=_subsidence_example)
subsidence.__doc__ = """Large-scale vertical advection ``t -= w_ls ds/dz`` on the interior, first-order
upwind (the gradient from the level above where ``w_ls < 0``, from below otherwise; none beyond the
walls). Local."""
subsidence.register("numba", lambda xp, *a: fused.subsidence(*a),
                    lambda xp, s, t, h, nxl, nyl, wls, dzh: numba_arrays(s, t, wls))
subsidence.register("cuda", lambda xp, *a: gpukernels.subsidence(*a),
                    lambda xp, s, t, h, nxl, nyl, wls, dzh: cuda_arrays(s, t, wls, dzh)
                    and wls.shape == (s.shape[2],))


# ---------------------------------------------------------------------------------------------
# subsidence_many(xp, fields, tends, h, nxl, nyl, wls, dzh)
def _subsidence_many_reference(xp, fields, tends, h, nxl, nyl, wls, dzh) -> None:
    for s, t in zip(fields, tends):
        subsidence(xp, s, t, h, nxl, nyl, wls, dzh)


def _subsidence_many_check(xp, fields, tends, h, nxl, nyl, wls, dzh) -> None:
    if len(fields) != len(tends):
        raise ValueError("les.ops.subsidence_many: one tendency per field")


def _subsidence_many_cuda_ok(xp, fields, tends, h, nxl, nyl, wls, dzh) -> bool:
    return len(fields) >= 2 and len({a.shape for a in (*fields, *tends)}) == 1 \
        and cuda_arrays(*fields, *tends, wls, dzh) and wls.shape == (fields[0].shape[2],)


def _subsidence_many_example(case, rng):
    (xp, s, t, h, nxl, nyl, wls, dzh), _ = _subsidence_example(case, rng)
    shape = s.shape
    return (xp, [s, random(case, rng, shape, 0.0, 0.02)], [t, random(case, rng, shape)], h, nxl, nyl, wls, dzh), {}


subsidence_many = Operator("subsidence_many", _subsidence_many_reference, check=_subsidence_many_check,
                           example=_subsidence_many_example)
subsidence_many.__doc__ = """:data:`subsidence` of several fields (on a GPU one launch for all). Local."""
subsidence_many.register("cuda", lambda xp, *a: gpukernels.subsidence_many(*a), _subsidence_many_cuda_ok)


# ---------------------------------------------------------------------------------------------
# add_profiles_many(tends, profiles, h, nxl, nyl): t[interior] += profile
def _add_profiles_reference(tends, profiles, h, nxl, nyl) -> None:
    for t, p in zip(tends, profiles):
        add_at(t, _interior(h, nxl, nyl), p)


def _add_profiles_cuda_ok(tends, profiles, h, nxl, nyl) -> bool:
    return len(tends) >= 2 and len({t.shape for t in tends}) == 1 and cuda_arrays(*tends, *profiles) \
        and all(p.shape == (tends[0].shape[2],) for p in profiles)


def _add_profiles_example(case, rng):
    g = case.grid
    shape = case.fields["thl"].shape
    return ([random(case, rng, shape), random(case, rng, shape)],
            [random(case, rng, (g.nz,), -1e-5, 1e-5), random(case, rng, (g.nz,), -1e-8, 1e-8)], g.h, g.nxl, g.nyl), {}


add_profiles_many = Operator("add_profiles_many", _add_profiles_reference, example=_add_profiles_example,
                             check=lambda tends, profiles, *rest: None if len(tends) == len(profiles) else
                             _raise("les.ops.add_profiles_many: one profile per tendency"))
add_profiles_many.__doc__ = """Add a profile (or a float) to the interior of each tendency (on a GPU one
launch for all). Local."""
add_profiles_many.register("cuda", lambda *a: gpukernels.add_profiles_many(*a), _add_profiles_cuda_ok)


def _raise(message: str):
    raise ValueError(message)


# ---------------------------------------------------------------------------------------------
# sponge(s, t, h, nxl, nyl, rate, target): t -= rate (s - target) on the top len(rate) levels
def _sponge_reference(s, t, h, nxl, nyl, rate, target) -> None:
    I, J, _ = _interior(h, nxl, nyl)
    K = slice(s.shape[2] - rate.shape[0], s.shape[2])
    t[I, J, K] -= rate * (s[I, J, K] - target)


def _sponge_check(s, t, h, nxl, nyl, rate, target) -> None:
    if s.shape != t.shape:
        raise ValueError(f"les.ops.sponge: field and tendency of one shape, got {s.shape} and {t.shape}")
    if rate.ndim != 1 or rate.shape != target.shape or rate.shape[0] > s.shape[2]:
        raise ValueError(f"les.ops.sponge: rate and target must be profiles of one length, at most the field's "
                         f"{s.shape[2]} levels, got shapes {rate.shape} and {target.shape}")


def _sponge_example(case, rng):
    f = case.fields
    shape = f["w"].shape if rng.uniform() < 0.5 else f["thl"].shape        # half or full levels
    m = int(rng.integers(1, shape[2] + 1))                                  # the sponge's levels
    g = case.grid
    return (random(case, rng, shape, 290.0, 310.0), random(case, rng, shape), g.h, g.nxl, g.nyl,
            random(case, rng, (m,), 0.0, 3e-3), random(case, rng, (m,), 295.0, 305.0)), {}


sponge = Operator("sponge", _sponge_reference, check=_sponge_check, example=_sponge_example)
sponge.__doc__ = """The sponge layer's relaxation ``t -= rate (s - target)`` on the interior columns of the
top ``m = len(rate)`` levels of ``s`` (DALES modboundary's gravity-wave damping): ``rate`` (1/s) and
``target`` (a slab mean, or the geostrophic wind) are profiles of those levels, made by the term
(the slab means need a reduction over the ranks: the kernels stay local). Local."""
sponge.register("numba", lambda *a: fused.sponge(*a),
                lambda s, t, h, nxl, nyl, rate, target: numba_arrays(s, t, rate, target))
sponge.register("cuda", lambda *a: gpukernels.sponge(*a),
                lambda s, t, h, nxl, nyl, rate, target: cuda_arrays(s, t, rate, target))
