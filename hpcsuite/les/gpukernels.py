"""CUDA kernels for the LES operators that the array-API source runs worst on a GPU.

The GPU runs the array-API source of the term modules through CuPy: one kernel per array operation,
each a pass over memory with a fresh temporary. Two operators are made of many such operations:

* the saturation adjustment (``thermo``): eight Newton steps of about fifteen elementwise operations
  each (a fifth of a BOMEX-like step at 512 x 512 x 128 on an H200). Here one thread per cell does
  them all in registers: one pass, reading ``thl`` and ``qt`` and writing ``ql``, ``T`` and ``thv``;
  it differs from the source only where the GPU's ``exp`` differs from NumPy's in the last bits;
* the advection of one field (``advection.advect``): the 2nd/5th-order face values and flux
  differences along x, y and z, about 40 (2nd) to 120 (5th) operations. Here one thread per cell
  computes its six face fluxes and adds the tendency: the operations of ``fused.advect_into`` (the
  CPU kernel) in the same order, so the result equals the source bit for bit.

* the rest of a step, as in ``fused``: the Runge-Kutta stage update, Coriolis, subsidence, and the
  pressure projection's divergence and gradient (one pass each instead of five to fifteen);
* and what only a GPU needs, because on the reference 64 x 64 x 80 grid a GPU step costs what its
  kernel launches cost: the face velocities of a momentum field (three arrays, one launch instead of
  six to fifteen), the buoyancy (one instead of seven), the surface momentum fluxes (one instead of
  about thirty). ``bench/gpu_launches.py`` counts the launches per step on the CuPy stand-in.
* and, for the same reason, kernels over several fields at once, which read the fields' device
  addresses from small tables made once (``gpubase.AddressTables``, :class:`FieldTable`): the
  start-of-step copy and the stage update of all prognostic fields, the advection of the scalars,
  their subsidence and their prescribed tendencies (one launch each instead of one per field).

The subgrid closure's kernels are in ``gpusubgrid``, the pressure solve's tridiagonal one in
``solvers.thomas``; what both LES kernel modules share (``usable``, the compile check, address
tables, launches over fields) is in ``gpubase``. All are compiled without FMA contraction
(``--fmad=false``), so every operation rounds as the array-API source's does.

Measured on an H200 so far: the saturation adjustment (``thermo`` 0.147 -> 0.025 s per 512 x 512 x
128 step); the others were written after the GPU session and are tested on the stand-in only.
``tests/les/test_gpukernels.py`` compares them with the source on the CuPy stand-in (the kernel
compiled for the CPU) and, where a GPU is present, on the GPU.

The kernels are registered as the ``"cuda"`` implementations of the operators in ``les.ops``, which
choose them (``ops.select("reference")`` or ``HPCSUITE_LES_FUSED=0``: the array-API source
everywhere). All functions here are local.
"""
from __future__ import annotations

import numpy as np

from ..runtime.cuda_modules import CudaSource
from .constants import CP, EP, EP2, LV, RD, RV
from .gpubase import AddressTables, launch_over_fields, register_module, usable

__all__ = ["usable", "thermo", "advect_into", "face_velocities", "rk_update", "coriolis", "surface_momentum",
           "subsidence", "buoyancy", "courant_columns", "projection_rhs", "subtract_gradient"]

CUDA_BLOCK = 256

CUDA_SOURCE = r"""
// ---- advection: fused.advect_into's operations, one thread per cell (strides in elements; the
// last axis of every 3-D array is contiguous)
__device__ double les_sign(const double v)      // NumPy's sign: +0.0 for both zeros, NaN stays
{
    return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : (v == 0.0 ? 0.0 : v));
}

#define PHI(a, b, c) phi[(long long)(a) * ps0 + (long long)(b) * ps1 + (c)]

// phi on horizontal face f along axis (between points f - 1 and f); a: index along the other axis
__device__ double les_hface(const double* __restrict__ phi, const long long ps0, const long long ps1,
        const int axis, const int f, const int a, const int k, const int fifth, const double vf)
{
    double pm1, p0;
    if (axis == 0) { pm1 = PHI(f - 1, a, k); p0 = PHI(f, a, k); }
    else           { pm1 = PHI(a, f - 1, k); p0 = PHI(a, f, k); }
    if (!fifth) return 0.5 * (pm1 + p0);
    double pm3, pm2, p1, p2;
    if (axis == 0) { pm3 = PHI(f - 3, a, k); pm2 = PHI(f - 2, a, k); p1 = PHI(f + 1, a, k); p2 = PHI(f + 2, a, k); }
    else           { pm3 = PHI(a, f - 3, k); pm2 = PHI(a, f - 2, k); p1 = PHI(a, f + 1, k); p2 = PHI(a, f + 2, k); }
    const double cen = (37.0 * (pm1 + p0) - 8.0 * (pm2 + p1) + (pm3 + p2)) / 60.0;
    const double dis = (10.0 * (p0 - pm1) - 5.0 * (p1 - pm2) + (p2 - pm3)) / 60.0;
    return cen - les_sign(vf) * dis;
}

// V phi_face on vertical face f of column (bi, bj); zero outside faces f_lo .. f_hi - 1; the 5th-order
// stencil drops to 3rd and 2nd order near the ends of the column (ops.advection.runs)
__device__ double les_vflux(const double* __restrict__ phi, const long long ps0, const long long ps1,
        const double* __restrict__ Vz, const long long zs0, const long long zs1,
        const double* __restrict__ wm, const double* __restrict__ wp, const int weighted,
        const int bi, const int bj, const int i, const int j, const int f, const int f_lo, const int f_hi,
        const int voff, const int npts, const int fifth)
{
    if (f < f_lo || f >= f_hi) return 0.0;
    const double vf = Vz[(long long)i * zs0 + (long long)j * zs1 + (f - voff)];
    const double pm1 = PHI(bi, bj, f - 1), p0 = PHI(bi, bj, f);
    if (fifth && f >= 3 && f + 2 <= npts - 1) {
        const double pm3 = PHI(bi, bj, f - 3), pm2 = PHI(bi, bj, f - 2), p1 = PHI(bi, bj, f + 1), p2 = PHI(bi, bj, f + 2);
        const double cen = (37.0 * (pm1 + p0) - 8.0 * (pm2 + p1) + (pm3 + p2)) / 60.0;
        const double dis = (10.0 * (p0 - pm1) - 5.0 * (p1 - pm2) + (p2 - pm3)) / 60.0;
        return vf * (cen - les_sign(vf) * dis);
    }
    if (fifth && f >= 2 && f + 1 <= npts - 1) {
        const double pm2 = PHI(bi, bj, f - 2), p1 = PHI(bi, bj, f + 1);
        const double cen = (7.0 * (pm1 + p0) - (pm2 + p1)) / 12.0;
        const double dis = (3.0 * (p0 - pm1) - (p1 - pm2)) / 12.0;
        return vf * (cen - les_sign(vf) * dis);
    }
    if (weighted) return vf * (wm[f - 1] * pm1 + wp[f - 1] * p0);
    return vf * (0.5 * (pm1 + p0));
}

// the advective tendency of one cell (interior index i, j; level k), added to tend
__device__ void les_advect_cell(double* __restrict__ tend, const double* __restrict__ phi,
        const double* __restrict__ Vx, const double* __restrict__ Vy, const double* __restrict__ Vz,
        const double* __restrict__ wm, const double* __restrict__ wp, const double* __restrict__ rd,
        const long long ts0, const long long ts1, const long long ps0, const long long ps1,
        const long long xs0, const long long xs1, const long long ys0, const long long ys1,
        const long long zs0, const long long zs1,
        const int h, const int npts, const int f_lo, const int f_hi, const int voff, const int fifth,
        const int weighted, const double dx, const double dy, const int i, const int j, const int k)
{
    const int bi = h + i, bj = h + j;
    double vl = Vx[(long long)i * xs0 + (long long)j * xs1 + k];
    double fl = vl * les_hface(phi, ps0, ps1, 0, bi, bj, k, fifth, vl);
    double vr = Vx[(long long)(i + 1) * xs0 + (long long)j * xs1 + k];
    double fr = vr * les_hface(phi, ps0, ps1, 0, bi + 1, bj, k, fifth, vr);
    const double tx = -(fr - fl) / dx;
    vl = Vy[(long long)i * ys0 + (long long)j * ys1 + k];
    fl = vl * les_hface(phi, ps0, ps1, 1, bj, bi, k, fifth, vl);
    vr = Vy[(long long)i * ys0 + (long long)(j + 1) * ys1 + k];
    fr = vr * les_hface(phi, ps0, ps1, 1, bj + 1, bi, k, fifth, vr);
    const double ty = -(fr - fl) / dy;
    const double fm = les_vflux(phi, ps0, ps1, Vz, zs0, zs1, wm, wp, weighted, bi, bj, i, j, k, f_lo, f_hi, voff, npts, fifth);
    const double fp = les_vflux(phi, ps0, ps1, Vz, zs0, zs1, wm, wp, weighted, bi, bj, i, j, k + 1, f_lo, f_hi, voff, npts, fifth);
    const double tz = -(fp - fm) * rd[k];
    tend[(long long)bi * ts0 + (long long)bj * ts1 + k] += (tx + ty) + tz;
}

// the advection of one or several fields with the same face velocities (the scalars), in one
// launch: field f's tendency and values from address tables, its scheme from fifths[f]; block layer
// z is field z / nxl, x index z % nxl (blockDim.z 1); every field's arrays have the strides given
extern "C" __global__ void les_advect_many(const long long* __restrict__ tends, const long long* __restrict__ phis,
        const int* __restrict__ fifths, const int nfields,
        const double* __restrict__ Vx, const double* __restrict__ Vy, const double* __restrict__ Vz,
        const double* __restrict__ wm, const double* __restrict__ wp, const double* __restrict__ rd,
        const long long ts0, const long long ts1, const long long ps0, const long long ps1,
        const long long xs0, const long long xs1, const long long ys0, const long long ys1,
        const long long zs0, const long long zs1,
        const int h, const int nxl, const int nyl, const int npts, const int k_lo, const int k_hi,
        const int f_lo, const int f_hi, const int voff, const int weighted, const double dx, const double dy)
{
    const int f = blockIdx.z / nxl;
    const int i = blockIdx.z % nxl;
    const int k = k_lo + (int)(blockIdx.x * blockDim.x + threadIdx.x);
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (f >= nfields || j >= nyl || k >= k_hi) return;
    les_advect_cell((double*)tends[f], (const double*)phis[f], Vx, Vy, Vz, wm, wp, rd, ts0, ts1, ps0, ps1,
                    xs0, xs1, ys0, ys1, zs0, zs1, h, npts, f_lo, f_hi, voff, fifths[f], weighted, dx, dy, i, j, k);
}

// Bolton (1980) saturation vapour pressure and its temperature derivative, as thermo.py
extern "C" __global__ void les_thermo(const double* __restrict__ thl, const double* __restrict__ qt,
        const double* __restrict__ presf, const double* __restrict__ exnf,
        double* __restrict__ ql_out, double* __restrict__ T_out, double* __restrict__ thv_out,
        const long long n, const int nz, const int niter,
        const double c, const double ep, const double ep2, const double rvrd)
{
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const int k = (int)(p % nz);
    const double pr = presf[k], exn = exnf[k], th_l = thl[p], q = qt[p];
    const double tl = exn * th_l;
    double es = 611.2 * exp(17.67 * (tl - 273.15) / (tl - 29.65));
    const double qs_l = ep * es / (pr - (1.0 - ep) * es);
    double ql = 0.0;
    if (q > qs_l) {
        double T = tl;
        for (int it = 0; it < niter; ++it) {
            es = 611.2 * exp(17.67 * (T - 273.15) / (T - 29.65));
            const double t29 = T - 29.65;
            const double des = es * (17.67 * (273.15 - 29.65)) / (t29 * t29);
            const double den = pr - (1.0 - ep) * es;
            const double qs = ep * es / den;
            const double dqs = ep * pr * des / (den * den);
            T = T - (T - tl - c * (q - qs)) / (1.0 + c * dqs);
        }
        es = 611.2 * exp(17.67 * (T - 273.15) / (T - 29.65));
        const double qs = ep * es / (pr - (1.0 - ep) * es);
        ql = fmax(q - qs, 0.0);
    }
    const double T_new = tl + c * ql;
    const double th = th_l + c * ql / exn;
    ql_out[p] = ql;
    T_out[p] = T_new;
    thv_out[p] = th * (1.0 + ep2 * q - rvrd * ql);
}


// ---- the rest of a step: fused's rk_update, coriolis, subsidence, projection_rhs, subtract_gradient
// (C-contiguous blocks of ny x nz per x index; w-type arrays have nz + 1 levels)
#define B3(a, b, c, ny_, nz_) (((long long)(a) * (ny_) + (b)) * (long long)(nz_) + (c))

extern "C" __global__ void les_rk_update(double* __restrict__ a, const double* __restrict__ start,
        const double* __restrict__ tend, const double dt, const int i0, const int i1, const int j0,
        const int j1, const double floor_, const int has_floor, const int ny, const int nz, const int zero_ends)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = j0 + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    const int i = i0 + (int)(blockIdx.z * blockDim.z + threadIdx.z);
    if (i >= i1 || j >= j1 || k >= nz) return;
    const long long p = B3(i, j, k, ny, nz);
    if (zero_ends && (k == 0 || k == nz - 1)) { a[p] = 0.0; return; }     // w at the surface and the lid
    const double x = start[p] + dt * tend[p];
    a[p] = has_floor ? ((x >= floor_ || x != x) ? x : floor_) : x;     // NumPy's maximum
}

// les_rk_update for every field of a model in one launch: the fields' device addresses come from
// tables (per field: its start-of-step values and tendency, its level count, and its mode: 0 plain,
// 1 floored at floors[f], 2 zero ends). Block layer z is field z / ni, x index z % ni (blockDim.z 1).
__device__ void les_rk_update_many_body(const long long* __restrict__ fields,
        const long long* __restrict__ starts, const long long* __restrict__ tends, const int* __restrict__ nzs,
        const double* __restrict__ floors, const int* __restrict__ modes, const double dt, const int i0,
        const int i1, const int j0, const int j1, const int ny)
{
    const int ni = i1 - i0;
    const int f = blockIdx.z / ni;
    const int i = i0 + (int)(blockIdx.z % ni);
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = j0 + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    const int nz = nzs[f];
    if (j >= j1 || k >= nz) return;
    double* a = (double*)fields[f];
    const double* start = (const double*)starts[f];
    const double* tend = (const double*)tends[f];
    const long long p = B3(i, j, k, ny, nz);
    const int mode = modes[f];
    if (mode == 2 && (k == 0 || k == nz - 1)) { a[p] = 0.0; return; }
    const double x = start[p] + dt * tend[p];
    a[p] = mode == 1 ? ((x >= floors[f] || x != x) ? x : floors[f]) : x;
}

extern "C" __global__ void les_rk_update_many(const long long* __restrict__ fields,
        const long long* __restrict__ starts, const long long* __restrict__ tends, const int* __restrict__ nzs,
        const double* __restrict__ floors, const int* __restrict__ modes, const double dt, const int i0,
        const int i1, const int j0, const int j1, const int ny)
{
    les_rk_update_many_body(fields, starts, tends, nzs, floors, modes, dt, i0, i1, j0, j1, ny);
}

// the same with dt read from device memory (a CUDA graph replays it with each step's dt: les.graphs)
extern "C" __global__ void les_rk_update_many_at(const long long* __restrict__ fields,
        const long long* __restrict__ starts, const long long* __restrict__ tends, const int* __restrict__ nzs,
        const double* __restrict__ floors, const int* __restrict__ modes, const double* __restrict__ dt,
        const int i0, const int i1, const int j0, const int j1, const int ny)
{
    les_rk_update_many_body(fields, starts, tends, nzs, floors, modes, *dt, i0, i1, j0, j1, ny);
}

// Copy whole arrays, one after the other, into one buffer: element p of dst comes from the array f
// with offsets[f] <= p < offsets[f + 1] (offsets of the nsrc arrays; the last ends at total).
extern "C" __global__ void les_gather_many(const long long* __restrict__ srcs,
        const long long* __restrict__ offsets, double* __restrict__ dst, const int nsrc, const long long total)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= total) return;
    int f = 0;
    while (f + 1 < nsrc && p >= offsets[f + 1]) ++f;
    dst[p] = ((const double*)srcs[f])[p - offsets[f]];
}

extern "C" __global__ void les_coriolis(const double* __restrict__ u, const double* __restrict__ v,
        double* __restrict__ tu, double* __restrict__ tv, const int h, const int nxl, const int nyl,
        const double f, const double cu, const double cv, const double* __restrict__ ug,
        const double* __restrict__ vg, const int ny, const int nz)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = h + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    const int i = h + (int)(blockIdx.z * blockDim.z + threadIdx.z);
    if (i >= h + nxl || j >= h + nyl || k >= nz) return;
    const double v_at_u = 0.25 * (v[B3(i, j, k, ny, nz)] + v[B3(i, j + 1, k, ny, nz)] + v[B3(i - 1, j, k, ny, nz)]
                                  + v[B3(i - 1, j + 1, k, ny, nz)]) + cv;
    const double u_at_v = 0.25 * (u[B3(i, j, k, ny, nz)] + u[B3(i + 1, j, k, ny, nz)] + u[B3(i, j - 1, k, ny, nz)]
                                  + u[B3(i + 1, j - 1, k, ny, nz)]) + cu;
    tu[B3(i, j, k, ny, nz)] += f * (v_at_u - vg[k]);
    tv[B3(i, j, k, ny, nz)] -= f * (u_at_v - ug[k]);
}

// advection's face velocities of u (di = 1) or v (dj = 1): three outputs o_n of shape (ni_n, nj_n,
// nk_n), each the average of a field s_n (C-contiguous, ny x nz_n per x index) and its neighbour one
// point back along x or y, around the interior of a block with halo h
extern "C" __global__ void les_face_pairs(const double* __restrict__ s0, const double* __restrict__ s1,
        const double* __restrict__ s2, double* __restrict__ o0, double* __restrict__ o1, double* __restrict__ o2,
        const int n0i, const int n0j, const int n0k, const int n1i, const int n1j, const int n1k,
        const int n2i, const int n2j, const int n2k, const int z0, const int z1, const int z2,
        const int ny, const int h, const int di, const int dj)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y * blockDim.y + threadIdx.y;
    const int a = blockIdx.z * blockDim.z + threadIdx.z;
    const int i = h + a, j = h + b;
    if (a < n0i && b < n0j && k < n0k)
        o0[B3(a, b, k, n0j, n0k)] = 0.5 * (s0[B3(i - di, j - dj, k, ny, z0)] + s0[B3(i, j, k, ny, z0)]);
    if (a < n1i && b < n1j && k < n1k)
        o1[B3(a, b, k, n1j, n1k)] = 0.5 * (s1[B3(i - di, j - dj, k, ny, z1)] + s1[B3(i, j, k, ny, z1)]);
    if (a < n2i && b < n2j && k < n2k)
        o2[B3(a, b, k, n2j, n2k)] = 0.5 * (s2[B3(i - di, j - dj, k, ny, z2)] + s2[B3(i, j, k, ny, z2)]);
}

// advection's face velocities of w: u and v interpolated to the half levels (zero at the surface and
// the lid) on the x and y faces, and w averaged to the full levels
extern "C" __global__ void les_face_w(const double* __restrict__ u, const double* __restrict__ v,
        const double* __restrict__ w, const double* __restrict__ wlo, const double* __restrict__ whi,
        double* __restrict__ vx, double* __restrict__ vy, double* __restrict__ vz, const int nxl,
        const int nyl, const int nz, const int ny, const int h)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y * blockDim.y + threadIdx.y;
    const int a = blockIdx.z * blockDim.z + threadIdx.z;
    const int i = h + a, j = h + b;
    const int inner = k >= 1 && k <= nz - 1;
    if (a <= nxl && b < nyl && k <= nz)
        vx[B3(a, b, k, nyl, nz + 1)] =
            inner ? wlo[k - 1] * u[B3(i, j, k - 1, ny, nz)] + whi[k - 1] * u[B3(i, j, k, ny, nz)] : 0.0;
    if (a < nxl && b <= nyl && k <= nz)
        vy[B3(a, b, k, nyl + 1, nz + 1)] =
            inner ? wlo[k - 1] * v[B3(i, j, k - 1, ny, nz)] + whi[k - 1] * v[B3(i, j, k, ny, nz)] : 0.0;
    if (a < nxl && b < nyl && k < nz)
        vz[B3(a, b, k, nyl, nz)] = 0.5 * (w[B3(i, j, k, ny, nz + 1)] + w[B3(i, j, k + 1, ny, nz + 1)]);
}

// thermo.add_buoyancy: c (thv - thvref) interpolated to the inner half levels, added to tend w; one
// thread per (column, inner half level k + 1)
extern "C" __global__ void les_buoyancy(const double* __restrict__ thv, const double* __restrict__ thvref,
        const double* __restrict__ dzf, const double* __restrict__ dzh, double* __restrict__ tw,
        const double c, const long long ncol, const int nz)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= ncol * (nz - 1)) return;
    const long long col = p / (nz - 1);
    const int k = (int)(p % (nz - 1));
    const double b1 = c * (thv[col * nz + k + 1] - thvref[k + 1]);
    const double b0 = c * (thv[col * nz + k] - thvref[k]);
    tw[col * (nz + 1) + k + 1] += (b1 * dzf[k] + b0 * dzf[k + 1]) / (2.0 * dzh[k + 1]);
}

// timestep.local_rates' Courant rate: per interior column, the largest |u|/dx + |v|/dy + |w[k+1]| rdzh[k+1]
// (NaN-propagating, as NumPy's max); out (nxl, nyl)
extern "C" __global__ void les_courant_columns(const double* __restrict__ u, const double* __restrict__ v,
        const double* __restrict__ w, const double* __restrict__ rdzh, double* __restrict__ out,
        const int h, const int nxl, const int nyl, const int ny, const int nz, const double dx, const double dy)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= (long long)nxl * nyl) return;
    const int i = h + (int)(p / nyl), j = h + (int)(p % nyl);
    double m = 0.0;
    for (int k = 0; k < nz; ++k) {
        const double x = fabs(u[B3(i, j, k, ny, nz)]) / dx + fabs(v[B3(i, j, k, ny, nz)]) / dy
                       + fabs(w[B3(i, j, k + 1, ny, nz + 1)]) * rdzh[k + 1];
        if (k == 0 || x > m || x != x) m = x;
        if (m != m) break;
    }
    out[p] = m;
}

// surface.PrescribedSurface's momentum fluxes: at the u (v) points of the block without its outer
// rim, -ustar^2 U / max(|U|, vmin) with the lowest level's wind shifted back to the ground frame
// (u = field + cu: the source adds the shift to the whole level first, then averages)
extern "C" __global__ void les_surface_momentum(const double* __restrict__ u, const double* __restrict__ v,
        double* __restrict__ uw, double* __restrict__ vw, const int nx, const int ny, const int nz,
        const double cu, const double cv, const double us2, const double vmin)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= (long long)nx * ny) return;
    const int i = (int)(p / ny), j = (int)(p % ny);
    if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) { uw[p] = 0.0; vw[p] = 0.0; return; }
#define L0(a, s, ii, jj) (a[B3(ii, jj, 0, ny, nz)] + s)
    const double vu = 0.25 * (L0(v, cv, i, j) + L0(v, cv, i, j + 1) + L0(v, cv, i - 1, j) + L0(v, cv, i - 1, j + 1));
    const double uu = L0(u, cu, i, j);
    double s = sqrt(uu * uu + vu * vu);
    s = (s >= vmin || s != s) ? s : vmin;                              // NumPy's maximum
    uw[p] = -us2 * uu / s;
    const double uv = 0.25 * (L0(u, cu, i, j) + L0(u, cu, i + 1, j) + L0(u, cu, i, j - 1) + L0(u, cu, i + 1, j - 1));
    const double vv = L0(v, cv, i, j);
    s = sqrt(uv * uv + vv * vv);
    s = (s >= vmin || s != s) ? s : vmin;
    vw[p] = -us2 * vv / s;
#undef L0
}

__device__ void les_subsidence_at(const double* __restrict__ s, double* __restrict__ t,
        const double* __restrict__ wls, const double* __restrict__ dzh, const long long p, const int k, const int nz)
{
    const double up = k + 1 < nz ? (s[p + 1] - s[p]) / dzh[k + 1] : 0.0;
    const double down = k > 0 ? (s[p] - s[p - 1]) / dzh[k] : 0.0;
    t[p] -= wls[k] < 0 ? wls[k] * up : wls[k] * down;
}

extern "C" __global__ void les_subsidence(const double* __restrict__ s, double* __restrict__ t, const int h,
        const int nxl, const int nyl, const double* __restrict__ wls, const double* __restrict__ dzh,
        const int ny, const int nz)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = h + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    const int i = h + (int)(blockIdx.z * blockDim.z + threadIdx.z);
    if (i >= h + nxl || j >= h + nyl || k >= nz) return;
    les_subsidence_at(s, t, wls, dzh, B3(i, j, k, ny, nz), k, nz);
}

// les_subsidence of several fields (address tables), and the prescribed tendencies of several
// fields (profiles added level by level), in one launch each; block layer z is field z / nxl,
// x index h + z % nxl (blockDim.z 1)
extern "C" __global__ void les_subsidence_many(const long long* __restrict__ ss, const long long* __restrict__ ts,
        const int nfields, const int h, const int nxl, const int nyl, const double* __restrict__ wls,
        const double* __restrict__ dzh, const int ny, const int nz)
{
    const int f = blockIdx.z / nxl;
    const int i = h + (int)(blockIdx.z % nxl);
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = h + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    if (f >= nfields || j >= h + nyl || k >= nz) return;
    les_subsidence_at((const double*)ss[f], (double*)ts[f], wls, dzh, B3(i, j, k, ny, nz), k, nz);
}

extern "C" __global__ void les_add_profiles_many(const long long* __restrict__ ts, const long long* __restrict__ profs,
        const int nfields, const int h, const int nxl, const int nyl, const int ny, const int nz)
{
    const int f = blockIdx.z / nxl;
    const int i = h + (int)(blockIdx.z % nxl);
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = h + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    if (f >= nfields || j >= h + nyl || k >= nz) return;
    ((double*)ts[f])[B3(i, j, k, ny, nz)] += ((const double*)profs[f])[k];
}

// (with zero_w_ends, w is read as zero at the surface and the lid, whatever is stored there)
__device__ double les_div(const double* __restrict__ u, const double* __restrict__ v,
        const double* __restrict__ w, const int i, const int j, const int k, const double dx, const double dy,
        const double* __restrict__ rdzf, const int ny, const int nz, const int zero_w_ends)
{
    const long long q = B3(i, j, k, ny, nz + 1);
    const double wt = (zero_w_ends && k == nz - 1) ? 0.0 : w[q + 1];
    const double wb = (zero_w_ends && k == 0) ? 0.0 : w[q];
    return (u[B3(i + 1, j, k, ny, nz)] - u[B3(i, j, k, ny, nz)]) / dx
         + (v[B3(i, j + 1, k, ny, nz)] - v[B3(i, j, k, ny, nz)]) / dy
         + (wt - wb) * rdzf[k];
}

// zero_w_ends: the w tendency is zero at the surface and the lid: read so, and so set on the interior
// columns (each end is read by the thread of its column's first or last level alone)
__device__ void les_projection_rhs_body(const double* __restrict__ tu, const double* __restrict__ tv,
        double* __restrict__ tw, const double* __restrict__ su, const double* __restrict__ sv,
        const double* __restrict__ sw, const int with_start, const double rdt, const int h, const double dx,
        const double dy, const double* __restrict__ rdzf, double* __restrict__ out, const int nxl,
        const int nyl, const int ny, const int nz, const int zero_w_ends)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y * blockDim.y + threadIdx.y;
    const int a = blockIdx.z * blockDim.z + threadIdx.z;
    if (a >= nxl || b >= nyl || k >= nz) return;
    const double d = les_div(tu, tv, tw, h + a, h + b, k, dx, dy, rdzf, ny, nz, zero_w_ends);
    out[B3(a, b, k, nyl, nz)] = with_start ? d + les_div(su, sv, sw, h + a, h + b, k, dx, dy, rdzf, ny, nz, 0) * rdt : d;
    if (zero_w_ends && k == 0) tw[B3(h + a, h + b, 0, ny, nz + 1)] = 0.0;
    if (zero_w_ends && k == nz - 1) tw[B3(h + a, h + b, nz, ny, nz + 1)] = 0.0;
}

extern "C" __global__ void les_projection_rhs(const double* __restrict__ tu, const double* __restrict__ tv,
        double* __restrict__ tw, const double* __restrict__ su, const double* __restrict__ sv,
        const double* __restrict__ sw, const int with_start, const double rdt, const int h, const double dx,
        const double dy, const double* __restrict__ rdzf, double* __restrict__ out, const int nxl,
        const int nyl, const int ny, const int nz, const int zero_w_ends)
{
    les_projection_rhs_body(tu, tv, tw, su, sv, sw, with_start, rdt, h, dx, dy, rdzf, out, nxl, nyl, ny, nz, zero_w_ends);
}

// the same with 1/dt read from device memory (les.graphs)
extern "C" __global__ void les_projection_rhs_at(const double* __restrict__ tu, const double* __restrict__ tv,
        double* __restrict__ tw, const double* __restrict__ su, const double* __restrict__ sv,
        const double* __restrict__ sw, const int with_start, const double* __restrict__ rdt, const int h, const double dx,
        const double dy, const double* __restrict__ rdzf, double* __restrict__ out, const int nxl,
        const int nyl, const int ny, const int nz, const int zero_w_ends)
{
    les_projection_rhs_body(tu, tv, tw, su, sv, sw, with_start, *rdt, h, dx, dy, rdzf, out, nxl, nyl, ny, nz, zero_w_ends);
}

extern "C" __global__ void les_subtract_gradient(double* __restrict__ tu, double* __restrict__ tv,
        double* __restrict__ tw, const double* __restrict__ p, const int h, const int nxl, const int nyl,
        const double dx, const double dy, const double* __restrict__ rdzh, const int ny, const int nz)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = h + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    const int i = h + (int)(blockIdx.z * blockDim.z + threadIdx.z);
    if (i >= h + nxl || j >= h + nyl || k >= nz) return;
    const long long q = B3(i, j, k, ny, nz);
    tu[q] -= (p[q] - p[B3(i - 1, j, k, ny, nz)]) / dx;
    tv[q] -= (p[q] - p[B3(i, j - 1, k, ny, nz)]) / dy;
    if (k > 0) tw[B3(i, j, k, ny, nz + 1)] -= (p[q] - p[q - 1]) * rdzh[k];
}

// fused.sponge: t -= rate (s - target) on the interior of the top m levels (thread k: level nz - m + k)
extern "C" __global__ void les_sponge(const double* __restrict__ s, double* __restrict__ t, const int h,
        const int nxl, const int nyl, const double* __restrict__ rate, const double* __restrict__ target,
        const int m, const int ny, const int nz)
{
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = h + (int)(blockIdx.y * blockDim.y + threadIdx.y);
    const int i = h + (int)(blockIdx.z * blockDim.z + threadIdx.z);
    if (i >= h + nxl || j >= h + nyl || q >= m) return;
    const long long p = B3(i, j, nz - m + q, ny, nz);
    t[p] -= rate[q] * (s[p] - target[q]);
}
"""


_CUDA = CudaSource(__name__, CUDA_SOURCE)
_kernel = _CUDA.function        # kernels looked up once: launches on small grids are overhead


def _module():
    return _CUDA.module()


register_module("gpukernels", lambda: _module())      # (looked up at call time: tests replace it)


def _grid(n: int) -> tuple[tuple[int], tuple[int]]:
    return (max(1, -(-int(n) // CUDA_BLOCK)),), (CUDA_BLOCK,)


def thermo(xp, thl, qt, presf, exnf, niter: int):
    """``(ql, T, thv)`` of :func:`thermo.saturation_adjust` and :func:`thermo.virtual_theta` in one
    pass. ``thl``, ``qt``: blocks whose last axis is the vertical; ``presf``, ``exnf``: profiles."""
    ql, T, thv = xp.empty_like(thl), xp.empty_like(thl), xp.empty_like(thl)
    grid, block = _grid(thl.size)
    _kernel("les_thermo")(grid, block, (thl, qt, presf, exnf, ql, T, thv, np.int64(thl.size),
                                        np.int32(thl.shape[-1]), np.int32(niter), np.float64(LV / CP),
                                        np.float64(EP), np.float64(EP2), np.float64(RV / RD)))
    return ql, T, thv



ADVECT_BLOCK = (32, 8, 1)       # threads along k, j, i


def advect_into(tend, phi, Vx, Vy, Vz, h: int, scheme: str, dx: float, dy: float, faces, voff: int,
                weights, rd, levels) -> None:
    """``tend[interior, levels] += tx + ty + tz`` for one field: :func:`fused.advect_into` (same
    arguments, same operations) as one CUDA launch, one thread per cell. ``tend``, ``phi`` and the
    face velocities may be views (strides are passed; the last axis must be contiguous)."""
    advect_many_into([tend], [phi], Vx, Vy, Vz, h, [scheme], dx, dy, faces, voff, weights, rd, levels)


_advect_tables = (AddressTables(), AddressTables())      # tendencies, fields


def advect_many_into(tends, phis, Vx, Vy, Vz, h: int, schemes, dx: float, dy: float, faces, voff: int,
                     weights, rd, levels) -> None:
    """:func:`advect_into` of several fields advected by the same face velocities (the scalars), in
    one launch. ``tends``, ``phis``: sequences of arrays, each with the strides of the first of its
    kind (kept in address tables made once per set: pass the same objects each call);
    ``schemes``: each field's scheme."""
    if not tends:
        return
    if len(tends) != len(phis) or len(schemes) != len(tends):
        raise ValueError("advect_many_into: one tendency, field and scheme each")
    if any(t.strides != tends[0].strides for t in tends) or any(p.strides != phis[0].strides for p in phis):
        raise ValueError("advect_many_into: the fields (and the tendencies) must share their strides")
    nxl, nyl = int(Vy.shape[0]), int(Vx.shape[1])
    k_lo, k_hi = (int(x) for x in levels)
    if nxl == 0 or nyl == 0 or k_hi <= k_lo:
        return
    tt, fifths = _advect_tables[0].get(tends, [s == "5th" for s in schemes])
    pt, _ = _advect_tables[1].get(phis, ())
    wm, wp = weights if weights is not None else (rd, rd)
    st = lambda a: (np.int64(a.strides[0] // 8), np.int64(a.strides[1] // 8))  # noqa: E731
    bx, by, _ = ADVECT_BLOCK
    i32 = np.int32
    launch_over_fields(_kernel("les_advect_many"), (-(-(k_hi - k_lo) // bx), -(-nyl // by)), ADVECT_BLOCK, nxl,
                       (tt, pt, fifths), (
        Vx, Vy, Vz, wm, wp, rd, *st(tends[0]), *st(phis[0]), *st(Vx), *st(Vy),
        *st(Vz), i32(h), i32(nxl), i32(nyl), i32(phis[0].shape[2]), i32(k_lo), i32(k_hi), i32(faces[0]),
        i32(faces[1]), i32(voff), i32(weights is not None), np.float64(dx), np.float64(dy)))


_field_tables = (AddressTables(), AddressTables())     # for subsidence_many and add_profiles_many


def _launch_many(name: str, tables, nxl: int, nyl: int, nz: int, rest) -> None:
    """A kernel over fields x interior columns x levels: block layer z is one field's x index."""
    if nxl <= 0 or nyl <= 0 or nz <= 0:
        return
    bx, by, _ = ADVECT_BLOCK
    launch_over_fields(_kernel(name), (-(-nz // bx), -(-nyl // by)), ADVECT_BLOCK, nxl, tables, rest)


def subsidence_many(fields, tends, h: int, nxl: int, nyl: int, wls, dzh) -> None:
    """:func:`subsidence` of several fields (C-contiguous, one shape) in one launch."""
    if len({tuple(a.shape) for a in (*fields, *tends)}) > 1:
        raise ValueError("subsidence_many: the fields and tendencies must have one shape")
    ny, nz = int(fields[0].shape[1]), int(fields[0].shape[2])
    st, _ = _field_tables[0].get(fields, ())
    tt, _ = _field_tables[1].get(tends, ())
    _launch_many("les_subsidence_many", (st, tt), nxl, nyl, nz,
                 (np.int32(h), np.int32(nxl), np.int32(nyl), wls, dzh, np.int32(ny), np.int32(nz)))


def add_profiles_many(tends, profiles, h: int, nxl: int, nyl: int) -> None:
    """``tend[interior] += profile`` (level by level) for several tendencies (C-contiguous, one
    shape) and their ``nz``-level profiles, in one launch."""
    if len({tuple(a.shape) for a in tends}) > 1 or any(p.shape != (tends[0].shape[2],) for p in profiles):
        raise ValueError("add_profiles_many: the tendencies must have one shape and the profiles its levels")
    ny, nz = int(tends[0].shape[1]), int(tends[0].shape[2])
    tt, _ = _field_tables[1].get(tends, ())
    pt, _ = _field_tables[0].get(profiles, ())
    _launch_many("les_add_profiles_many", (tt, pt), nxl, nyl, nz,
                 (np.int32(h), np.int32(nxl), np.int32(nyl), np.int32(ny), np.int32(nz)))


def _launch3(name: str, ni: int, nj: int, nk: int, args) -> None:
    if ni <= 0 or nj <= 0 or nk <= 0:
        return
    bx, by, bz = ADVECT_BLOCK
    _kernel(name)((-(-nk // bx), -(-nj // by), -(-ni // bz)), ADVECT_BLOCK, tuple(args))


def rk_update(a, start, dt: float, tend, interior, floor=None, zero_ends: bool = False) -> None:
    """:func:`fused.rk_update` (the Runge-Kutta stage update of one field) on the GPU; with
    ``zero_ends`` the first and last level of the interior are set to zero instead (``w`` at the
    surface and the lid: the halo update that follows every stage fills the rest)."""
    I, J = interior
    ny, nz = int(a.shape[1]), int(a.shape[2])
    _launch3("les_rk_update", I.stop - I.start, J.stop - J.start, nz,
             (a, start, tend, np.float64(dt), np.int32(I.start), np.int32(I.stop), np.int32(J.start),
              np.int32(J.stop), np.float64(0.0 if floor is None else floor), np.int32(floor is not None),
              np.int32(ny), np.int32(nz), np.int32(bool(zero_ends))))


class FieldTable:
    """Device address tables of a model's prognostic fields, for one launch over all of them.

    ``fields``, ``start`` and ``tend`` are ``{name: array}`` with the same names in the same order,
    all float64 CuPy arrays of the same ``(nx, ny)`` block shape (the level counts may differ), whose
    storage must not move while the table is used; ``start_buffer`` is the 1-D buffer whose leading
    elements are the ``start`` arrays one after the other (``state.zeros_in_one_buffer``).
    ``floors``: ``{name: minimum}``; the fields in ``zero_ends`` get zero first and last levels.
    """

    def __init__(self, fields: dict, start: dict, tend: dict, start_buffer, floors: dict, zero_ends=("w",)):
        import cupy
        names = list(fields)
        if list(start) != names or list(tend) != names:
            raise ValueError("fields, start and tend must have the same names in the same order")
        shapes = {tuple(a.shape[:2]) for d in (fields, start, tend) for a in d.values()}
        if len(shapes) != 1:
            raise ValueError(f"the arrays of a field table differ in their block shapes: {sorted(shapes)}")
        self.names = names
        self._arrays = tuple(fields[n] for n in names) + tuple(tend[n] for n in names)
        self._fields = tuple(fields[n] for n in names)
        self.ny = int(fields[names[0]].shape[1])
        table = lambda d: cupy.asarray([d[n].data.ptr for n in names], dtype=cupy.int64)   # noqa: E731
        self._ptr = (table(fields), table(start), table(tend))
        self._nz = [int(fields[n].shape[2]) for n in names]
        self._levels = cupy.asarray(self._nz, dtype=cupy.int32)
        self._floors = cupy.asarray([float(floors.get(n, 0.0)) for n in names], dtype=cupy.float64)
        self._modes = cupy.asarray([2 if n in zero_ends else 1 if n in floors else 0 for n in names],
                                   dtype=cupy.int32)
        sizes = [int(fields[n].size) for n in names]
        offsets = np.cumsum([0] + sizes)
        starts_at = [int(start[n].data.ptr - start_buffer.data.ptr) // 8 for n in names]
        if starts_at != [int(o) for o in offsets[:-1]] or int(start_buffer.size) < int(offsets[-1]):
            raise ValueError("the start arrays are not the leading elements of start_buffer, in order")
        self._start_buffer, self._total = start_buffer, int(offsets[-1])
        self._offsets = cupy.asarray(offsets[:-1], dtype=cupy.int64)

    def matches(self, fields: dict, tend: dict) -> bool:
        """Whether ``fields`` and ``tend`` are still the arrays the table was made of."""
        now = tuple(fields.values()) + tuple(tend.values())
        return len(now) == len(self._arrays) and all(a is b for a, b in zip(now, self._arrays))

    def save_start(self) -> None:
        """``start[n][...] = fields[n]`` for every field, in one launch."""
        grid, block = _grid(self._total)
        _kernel("les_gather_many")(grid, block, (self._ptr[0], self._offsets, self._start_buffer,
                                                 np.int32(len(self.names)), np.int64(self._total)))

    def rk_update(self, dt, interior) -> None:
        """:func:`rk_update` of every field (floors and zero ends as given), in one launch. ``dt``: a
        float, or a 0-d float64 device array read by the kernel (a captured step's dt: les.graphs)."""
        I, J = interior
        ni, nj = I.stop - I.start, J.stop - J.start
        if ni <= 0 or nj <= 0:
            return
        bx, by, _ = ADVECT_BLOCK
        by_value = isinstance(dt, (float, int, np.number))        # else a device scalar (les.graphs)
        launch_over_fields(_kernel("les_rk_update_many" if by_value else "les_rk_update_many_at"),
                           (-(-max(self._nz) // bx), -(-nj // by)), ADVECT_BLOCK, ni,
                           (*self._ptr, self._levels, self._floors, self._modes),
                           (np.float64(dt) if by_value else dt, np.int32(I.start), np.int32(I.stop), np.int32(J.start),
                            np.int32(J.stop), np.int32(self.ny)), count=False)


def coriolis(u, v, tu, tv, h: int, nxl: int, nyl: int, f: float, cu: float, cv: float, ug, vg) -> None:
    """:func:`fused.coriolis` on the GPU (``ug``, ``vg``: device profiles)."""
    ny, nz = int(u.shape[1]), int(u.shape[2])
    _launch3("les_coriolis", nxl, nyl, nz, (u, v, tu, tv, np.int32(h), np.int32(nxl), np.int32(nyl),
                                            np.float64(f), np.float64(cu), np.float64(cv), ug, vg,
                                            np.int32(ny), np.int32(nz)))


def face_velocities(xp, name: str, u, v, w, h: int, nxl: int, nyl: int, wlo=None, whi=None):
    """``(Vx, Vy, Vz)`` of :func:`advection.face_velocities` for momentum field ``name`` (u, v or w)
    in one launch. ``u``, ``v``, ``w``: the C-contiguous fields (``w`` with ``nz + 1`` levels)."""
    ny, nz = int(u.shape[1]), int(u.shape[2])
    i32 = np.int32
    if name == "w":
        out = (xp.empty((nxl + 1, nyl, nz + 1)), xp.empty((nxl, nyl + 1, nz + 1)), xp.empty((nxl, nyl, nz)))
        _launch3("les_face_w", nxl + 1, nyl + 1, nz + 1,
                 (u, v, w, wlo, whi, *out, i32(nxl), i32(nyl), i32(nz), i32(ny), i32(h)))
        return out
    di, dj = (1, 0) if name == "u" else (0, 1)
    shapes = ((nxl + 1, nyl, nz), (nxl, nyl + 1, nz), (nxl, nyl, nz + 1))
    out = tuple(xp.empty(sh) for sh in shapes)
    _launch3("les_face_pairs", nxl + 1, nyl + 1, nz + 1,
             (u, v, w, *out, *(i32(n) for sh in shapes for n in sh), i32(nz), i32(nz), i32(nz + 1),
              i32(ny), i32(h), i32(di), i32(dj)))
    return out


def buoyancy(thv, thvref, dzf, dzh, tw, c: float) -> None:
    """:func:`thermo.add_buoyancy` in one pass: ``tw[..., 1:-1] += interpolated c (thv - thvref)``.
    ``thv`` (nz levels) and ``tw`` (nz + 1) C-contiguous blocks of the same columns."""
    nz = int(thv.shape[-1])
    ncol = int(thv.size) // max(nz, 1)
    if nz < 2 or ncol == 0:
        return
    grid, block = _grid(ncol * (nz - 1))
    _kernel("les_buoyancy")(grid, block, (thv, thvref, dzf, dzh, tw, np.float64(c), np.int64(ncol), np.int32(nz)))


def courant_columns(xp, u, v, w, rdzh, h: int, nxl: int, nyl: int, dx: float, dy: float):
    """The per-column maxima of :func:`timestep.local_rates`' Courant rate, ``(nxl, nyl)``, in one
    pass (their maximum is the rate: the same value as the source's)."""
    ny, nz = int(u.shape[1]), int(u.shape[2])
    out = xp.empty((nxl, nyl))
    grid, block = _grid(nxl * nyl)
    _kernel("les_courant_columns")(grid, block, (u, v, w, rdzh, out, np.int32(h), np.int32(nxl), np.int32(nyl),
                                                 np.int32(ny), np.int32(nz), np.float64(dx), np.float64(dy)))
    return out


def surface_momentum(xp, u, v, cu: float, cv: float, us2: float, vmin: float):
    """``(uw, vw)`` of :class:`surface.PrescribedSurface` (``us2 > 0``) in one pass: 2-D arrays of the
    block's horizontal shape, zero on the outer rim. ``u``, ``v``: the C-contiguous fields."""
    nx, ny, nz = (int(n) for n in u.shape)
    uw, vw = xp.empty((nx, ny)), xp.empty((nx, ny))
    grid, block = _grid(nx * ny)
    _kernel("les_surface_momentum")(grid, block, (u, v, uw, vw, np.int32(nx), np.int32(ny), np.int32(nz),
                                                  np.float64(cu), np.float64(cv), np.float64(us2),
                                                  np.float64(vmin)))
    return uw, vw


def subsidence(s, t, h: int, nxl: int, nyl: int, wls, dzh) -> None:
    """:func:`fused.subsidence` on the GPU."""
    ny, nz = int(s.shape[1]), int(s.shape[2])
    _launch3("les_subsidence", nxl, nyl, nz, (s, t, np.int32(h), np.int32(nxl), np.int32(nyl), wls, dzh,
                                              np.int32(ny), np.int32(nz)))


def projection_rhs(tend, start, rdt, h: int, nxl: int, nyl: int, dx: float, dy: float, rdzf,
                   zero_w_ends: bool = False):
    """:func:`fused.projection_rhs` on the GPU (a new ``(nxl, nyl, nz)`` array). With ``zero_w_ends``
    the w tendency's first and last levels are first set to zero on the interior columns (as the
    pressure term does before it), in the same launch. ``rdt``: a float, or a 0-d float64 device
    array read by the kernel (a captured step's 1/dt: les.graphs)."""
    import cupy
    tu = tend[0]
    ny, nz = int(tu.shape[1]), int(tu.shape[2])
    out = cupy.empty((nxl, nyl, nz))
    s = tend if start is None else start
    by_value = isinstance(rdt, (float, int, np.number))      # else a device scalar (les.graphs)
    _launch3("les_projection_rhs" if by_value else "les_projection_rhs_at", nxl, nyl, nz,
             (*tend, *s, np.int32(start is not None), np.float64(rdt) if by_value else rdt,
              np.int32(h), np.float64(dx), np.float64(dy), rdzf, out, np.int32(nxl), np.int32(nyl),
              np.int32(ny), np.int32(nz), np.int32(bool(zero_w_ends))))
    return out


def subtract_gradient(tu, tv, tw, p, h: int, nxl: int, nyl: int, dx: float, dy: float, rdzh) -> None:
    """:func:`fused.subtract_gradient` on the GPU."""
    ny, nz = int(p.shape[1]), int(p.shape[2])
    _launch3("les_subtract_gradient", nxl, nyl, nz, (tu, tv, tw, p, np.int32(h), np.int32(nxl), np.int32(nyl),
                                                     np.float64(dx), np.float64(dy), rdzh, np.int32(ny),
                                                     np.int32(nz)))


def sponge(s, t, h: int, nxl: int, nyl: int, rate, target) -> None:
    """:func:`fused.sponge` on the GPU (``rate``, ``target``: device profiles of the top levels)."""
    ny, nz, m = int(s.shape[1]), int(s.shape[2]), int(rate.shape[0])
    _launch3("les_sponge", nxl, nyl, m, (s, t, np.int32(h), np.int32(nxl), np.int32(nyl), rate, target,
                                         np.int32(m), np.int32(ny), np.int32(nz)))


__all__ += ["sponge"]
