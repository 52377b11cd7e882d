"""CUDA kernels for the subgrid closure on the GPU: the numba kernels of :mod:`hpcsuite.les.fused`
(face diffusivities, scalar diffusion, edge velocity gradients, strain rate, TKE closure, momentum
diffusion) written for one GPU thread per output point, and the TKE sources (shear, buoyancy,
dissipation and their sum), which the CPU leaves to NumPy but which cost a GPU sixteen launches.

On CuPy arrays the array-API source of :mod:`hpcsuite.les.subgrid` makes a kernel launch and a
temporary for every operation (about fifteen per diffused field, several dozen for the stresses):
the subgrid term was 39 % of a 512 x 512 x 128 step on an H200 (``bench/RESULTS.md``). Each kernel
here reads its inputs once and writes its outputs once, with the operations of the numba kernel in
the same order (no FMA contraction: ``--fmad=false``), so the results are those of the source.
One caveat on a real GPU: CuPy's ``x ** 2`` need not round like ``x * x``, which the kernels use
(as NumPy's ``square`` does); the tests allow for that on a GPU and ask for equality on the
stand-in.

Every function takes and returns what its ``fused`` namesake does (CuPy arrays instead of NumPy
ones). The inputs must be C-contiguous float64 CuPy arrays (:func:`gpubase.usable`); the
callers in ``subgrid`` check. All functions here are local.
"""
from __future__ import annotations

import functools

import numpy as np

from ..runtime.cuda_modules import CudaSource
from .gpubase import AddressTables, launch_over_fields, register_module

__all__ = ["face_diffusivities", "scalar_diffusion", "scalar_diffusion_many", "edges", "strain2", "tke_closure",
           "tke_sources", "momentum_diffusion"]

CUDA_SOURCE = r"""
#define IX3(a, b, c, n1, n2) (((long long)(a) * (n1) + (b)) * (long long)(n2) + (c))

#define THREAD_IJK                                                   \
    const int k = blockIdx.x * blockDim.x + threadIdx.x;             \
    const int j = blockIdx.y * blockDim.y + threadIdx.y;             \
    const int i = blockIdx.z * blockDim.z + threadIdx.z;

// subgrid.ScalarDiffusion.faces: kx (nx-1, ny-2, nz), ky (nx-2, ny-1, nz), kz (nx-2, ny-2, nz-1)
// (the diffusivity is scale * K, formed value by value: the same bits as scaling K first)
extern "C" __global__ void sg_face_diffusivities(const double* __restrict__ K, const double scale,
        const double* __restrict__ dzf, const double* __restrict__ dzh, double* __restrict__ kx,
        double* __restrict__ ky, double* __restrict__ kz, const int nx, const int ny, const int nz)
{
    THREAD_IJK
    if (i >= nx - 1 || j >= ny - 1 || k >= nz) return;
    if (j < ny - 2)
        kx[IX3(i, j, k, ny - 2, nz)] = 0.5 * (scale * K[IX3(i + 1, j + 1, k, ny, nz)] + scale * K[IX3(i, j + 1, k, ny, nz)]);
    if (i < nx - 2)
        ky[IX3(i, j, k, ny - 1, nz)] = 0.5 * (scale * K[IX3(i + 1, j + 1, k, ny, nz)] + scale * K[IX3(i + 1, j, k, ny, nz)]);
    if (i < nx - 2 && j < ny - 2 && k < nz - 1)
        kz[IX3(i, j, k, ny - 2, nz - 1)] = (dzf[k + 1] * (scale * K[IX3(i + 1, j + 1, k, ny, nz)])
                                            + dzf[k] * (scale * K[IX3(i + 1, j + 1, k + 1, ny, nz)])) / (2.0 * dzh[k + 1]);
}

// the result val of core point (i, j, k) of a block with ny columns: stored in the core-shaped out
// (nzo levels), or with into added to the tendency block out (nzo levels) at (i + 1, j + 1, k + dk)
// where that is an interior point (subgrid._add_interior's sum, without a second launch)
__device__ void sg_put(double* __restrict__ out, const int into, const int i, const int j, const int k,
        const int ny, const int nzo, const int h, const int nxl, const int nyl, const int dk, const double val)
{
    if (!into) { out[IX3(i, j, k, ny - 2, nzo)] = val; return; }
    const int bi = i + 1, bj = j + 1;
    if (bi >= h && bi < h + nxl && bj >= h && bj < h + nyl) out[IX3(bi, bj, k + dk, ny, nzo)] += val;
}

// fused._scalar_diffusion: out (nx-2, ny-2, nz) of s (nx, ny, nz); kconst >= 0: one diffusivity
__device__ void sg_scalar_diffusion_cell(const double* __restrict__ s, const double* __restrict__ kx,
        const double* __restrict__ ky, const double* __restrict__ kz, const double kconst,
        const double* __restrict__ dzf, const double* __restrict__ dzh, const double dx2, const double dy2,
        const double* __restrict__ fb, const int has_fb, const double* __restrict__ extra, const int has_extra,
        double* __restrict__ out, const int nx, const int ny, const int nz, const int into, const int h,
        const int nxl, const int nyl, const int i, const int j, const int k)
{
    const double c = s[IX3(i + 1, j + 1, k, ny, nz)];
    double fxp, fxm, fyp, fym;
    if (kconst >= 0.0) {
        fxp = kconst * (s[IX3(i + 2, j + 1, k, ny, nz)] - c);
        fxm = kconst * (c - s[IX3(i, j + 1, k, ny, nz)]);
        fyp = kconst * (s[IX3(i + 1, j + 2, k, ny, nz)] - c);
        fym = kconst * (c - s[IX3(i + 1, j, k, ny, nz)]);
    } else {
        fxp = kx[IX3(i + 1, j, k, ny - 2, nz)] * (s[IX3(i + 2, j + 1, k, ny, nz)] - c);
        fxm = kx[IX3(i, j, k, ny - 2, nz)] * (c - s[IX3(i, j + 1, k, ny, nz)]);
        fyp = ky[IX3(i, j + 1, k, ny - 1, nz)] * (s[IX3(i + 1, j + 2, k, ny, nz)] - c);
        fym = ky[IX3(i, j, k, ny - 1, nz)] * (c - s[IX3(i + 1, j, k, ny, nz)]);
    }
    const double t = (fxp - fxm) / dx2 + (fyp - fym) / dy2;
    double gp = 0.0, gm;
    if (k + 1 < nz) {
        const double kk = kconst >= 0.0 ? kconst : kz[IX3(i, j, k, ny - 2, nz - 1)];
        gp = kk * (s[IX3(i + 1, j + 1, k + 1, ny, nz)] - c) / dzh[k + 1];
    }
    if (k > 0) {
        const double kk = kconst >= 0.0 ? kconst : kz[IX3(i, j, k - 1, ny - 2, nz - 1)];
        gm = kk * (c - s[IX3(i + 1, j + 1, k - 1, ny, nz)]) / dzh[k];
    } else {
        gm = has_fb ? -fb[(long long)(i + 1) * ny + (j + 1)] : 0.0;
    }
    const double d = t + (gp - gm) / dzf[k];
    sg_put(out, into, i, j, k, ny, nz, h, nxl, nyl, 0, has_extra ? d + extra[IX3(i + 1, j + 1, k, ny, nz)] : d);
}

extern "C" __global__ void sg_scalar_diffusion(const double* __restrict__ s, const double* __restrict__ kx,
        const double* __restrict__ ky, const double* __restrict__ kz, const double kconst,
        const double* __restrict__ dzf, const double* __restrict__ dzh, const double dx2, const double dy2,
        const double* __restrict__ fb, const int has_fb, const double* __restrict__ extra, const int has_extra,
        double* __restrict__ out, const int nx, const int ny, const int nz, const int into, const int h,
        const int nxl, const int nyl)
{
    THREAD_IJK
    if (i >= nx - 2 || j >= ny - 2 || k >= nz) return;
    sg_scalar_diffusion_cell(s, kx, ky, kz, kconst, dzf, dzh, dx2, dy2, fb, has_fb, extra, has_extra, out,
                             nx, ny, nz, into, h, nxl, nyl, i, j, k);
}

// sg_scalar_diffusion, into the tendencies, of several fields with the same face diffusivities:
// field f's values, tendency and surface flux from address tables (has_fbs[f]: whether it has
// one); block layer z is field z / (nx - 2), core x index z % (nx - 2) (blockDim.z 1)
extern "C" __global__ void sg_scalar_diffusion_many(const long long* __restrict__ ss,
        const long long* __restrict__ outs, const long long* __restrict__ fbs, const int* __restrict__ has_fbs,
        const int nfields, const double* __restrict__ kx, const double* __restrict__ ky,
        const double* __restrict__ kz, const double kconst, const double* __restrict__ dzf,
        const double* __restrict__ dzh, const double dx2, const double dy2, const int nx, const int ny,
        const int nz, const int h, const int nxl, const int nyl)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int f = blockIdx.z / (nx - 2);
    const int i = blockIdx.z % (nx - 2);
    if (f >= nfields || j >= ny - 2 || k >= nz) return;
    sg_scalar_diffusion_cell((const double*)ss[f], kx, ky, kz, kconst, dzf, dzh, dx2, dy2,
                             (const double*)fbs[f], has_fbs[f], (const double*)0, 0, (double*)outs[f],
                             nx, ny, nz, 1, h, nxl, nyl, i, j, k);
}

// fused._edges: suv (nx, ny, nz), suw and svw (nx, ny, nz-1) on the core; w has nz + 1 levels
extern "C" __global__ void sg_edges(const double* __restrict__ u, const double* __restrict__ v,
        const double* __restrict__ w, const double* __restrict__ dzh, const double dx, const double dy,
        double* __restrict__ suv, double* __restrict__ suw, double* __restrict__ svw,
        const int nx, const int ny, const int nz)
{
    THREAD_IJK
    const int bi = i, bj = j;
    if (bi >= nx || bj >= ny || k >= nz) return;
    if (bi == 0 || bj == 0 || bi == nx - 1 || bj == ny - 1) {          // the rim: zero
        suv[IX3(bi, bj, k, ny, nz)] = 0.0;
        if (k < nz - 1) { suw[IX3(bi, bj, k, ny, nz - 1)] = 0.0; svw[IX3(bi, bj, k, ny, nz - 1)] = 0.0; }
        return;
    }
    suv[IX3(bi, bj, k, ny, nz)] = (u[IX3(bi, bj, k, ny, nz)] - u[IX3(bi, bj - 1, k, ny, nz)]) / dy
                                + (v[IX3(bi, bj, k, ny, nz)] - v[IX3(bi - 1, bj, k, ny, nz)]) / dx;
    if (k < nz - 1) {
        const int m = k, nw = nz + 1;
        suw[IX3(bi, bj, m, ny, nz - 1)] = (u[IX3(bi, bj, m + 1, ny, nz)] - u[IX3(bi, bj, m, ny, nz)]) / dzh[m + 1]
                                        + (w[IX3(bi, bj, m + 1, ny, nw)] - w[IX3(bi - 1, bj, m + 1, ny, nw)]) / dx;
        svw[IX3(bi, bj, m, ny, nz - 1)] = (v[IX3(bi, bj, m + 1, ny, nz)] - v[IX3(bi, bj, m, ny, nz)]) / dzh[m + 1]
                                        + (w[IX3(bi, bj, m + 1, ny, nw)] - w[IX3(bi, bj - 1, m + 1, ny, nw)]) / dy;
    }
}

// an edge sum on vertical face f = 0 .. nz: the surface value, the inner faces, zero at the lid
// (s0 divided by den at the surface when den is given: subgrid._surface_shear's flux / scale)
__device__ double sg_zface(const double* __restrict__ sz, const double* __restrict__ s0,
        const double* __restrict__ den, const int i, const int j, const int f, const int ny, const int nz)
{
    if (f == 0) return den ? s0[(long long)i * ny + j] / den[(long long)i * ny + j] : s0[(long long)i * ny + j];
    if (f == nz) return 0.0;
    return sz[IX3(i, j, f - 1, ny, nz - 1)];
}

// fused._strain2: out (nx, ny, nz) on the core, zero on the rim
extern "C" __global__ void sg_strain2(const double* __restrict__ u, const double* __restrict__ v,
        const double* __restrict__ w, const double* __restrict__ suv, const double* __restrict__ suw,
        const double* __restrict__ svw, const double* __restrict__ s0u, const double* __restrict__ s0v,
        const double* __restrict__ s0den, const int has_den,
        const double* __restrict__ dzf, const double dx, const double dy, double* __restrict__ out,
        const int nx, const int ny, const int nz)
{
    THREAD_IJK
    const int bi = i, bj = j, nw = nz + 1;
    const double* den = has_den ? s0den : (const double*)0;
    if (bi >= nx || bj >= ny || k >= nz) return;
    if (bi == 0 || bj == 0 || bi == nx - 1 || bj == ny - 1) { out[IX3(bi, bj, k, ny, nz)] = 0.0; return; }
    const double a = (u[IX3(bi + 1, bj, k, ny, nz)] - u[IX3(bi, bj, k, ny, nz)]) / dx;
    const double b = (v[IX3(bi, bj + 1, k, ny, nz)] - v[IX3(bi, bj, k, ny, nz)]) / dy;
    const double c = (w[IX3(bi, bj, k + 1, ny, nw)] - w[IX3(bi, bj, k, ny, nw)]) / dzf[k];
    double s2 = a * a + b * b + c * c;
    double p = suv[IX3(bi, bj, k, ny, nz)], q = suv[IX3(bi, bj + 1, k, ny, nz)];
    double r = suv[IX3(bi + 1, bj, k, ny, nz)], s = suv[IX3(bi + 1, bj + 1, k, ny, nz)];
    s2 = s2 + 0.125 * (p * p + q * q + r * r + s * s);
    p = sg_zface(suw, s0u, den, bi, bj, k, ny, nz); q = sg_zface(suw, s0u, den, bi, bj, k + 1, ny, nz);
    r = sg_zface(suw, s0u, den, bi + 1, bj, k, ny, nz); s = sg_zface(suw, s0u, den, bi + 1, bj, k + 1, ny, nz);
    s2 = s2 + 0.125 * (p * p + q * q + r * r + s * s);
    p = sg_zface(svw, s0v, den, bi, bj, k, ny, nz); q = sg_zface(svw, s0v, den, bi, bj, k + 1, ny, nz);
    r = sg_zface(svw, s0v, den, bi, bj + 1, k, ny, nz); s = sg_zface(svw, s0v, den, bi, bj + 1, k + 1, ny, nz);
    out[IX3(bi, bj, k, ny, nz)] = s2 + 0.125 * (p * p + q * q + r * r + s * s);
}

__device__ double sg_max(const double a, const double b) { return (a >= b || a != a) ? a : b; }  // np.maximum
__device__ double sg_min(const double a, const double b) { return a <= b ? a : b; }               // np.minimum, b may be NaN

// fused._tke_closure: every output (nx, ny, nz)
extern "C" __global__ void sg_tke_closure(const double* __restrict__ e12f, const double* __restrict__ thv,
        const double* __restrict__ zf, const double* __restrict__ grav_thvf, const double grav,
        const int divide, const double* __restrict__ delta,
        const double cm, const double cn, const double ch1, const double ch2, const double e12min,
        const double ekmin, double* __restrict__ ekm, double* __restrict__ ekh, double* __restrict__ zlt,
        double* __restrict__ e12, double* __restrict__ n2, const int nx, const int ny, const int nz)
{
    THREAD_IJK
    if (i >= nx || j >= ny || k >= nz) return;
    const long long p = IX3(i, j, k, ny, nz), col = IX3(i, j, 0, ny, nz);
    const double e = sg_max(e12f[p], e12min);
    double d;
    if (k == 0)           d = (thv[col + 1] - thv[col]) / (zf[1] - zf[0]);
    else if (k == nz - 1) d = (thv[col + nz - 1] - thv[col + nz - 2]) / (zf[nz - 1] - zf[nz - 2]);
    else                  d = (thv[p + 1] - thv[p - 1]) / (zf[k + 1] - zf[k - 1]);
    const double nn = (divide ? grav / grav_thvf[k] : grav_thvf[k]) * d;    // (divide: the array is thv_ref)
    double zl;
    if (nn > 0) zl = sg_min(delta[k], cn * e / sqrt(sg_max(nn, 1e-30)));
    else        zl = delta[k] + 0.0 * e;
    const double m = cm * zl * e;
    const double h = (ch1 + ch2 * zl / delta[k]) * m;
    ekm[p] = sg_max(m, ekmin);
    ekh[p] = sg_max(h, ekmin);
    zlt[p] = zl; e12[p] = e; n2[p] = nn;
}

// SubgridTKE.sources and their sum, one thread per point (any block of nz levels, C-contiguous)
extern "C" __global__ void sg_tke_sources(const double* __restrict__ ekm, const double* __restrict__ ekh,
        const double* __restrict__ zlt, const double* __restrict__ e12, const double* __restrict__ n2,
        const double* __restrict__ s2, const double* __restrict__ delta, const double ce1, const double ce2,
        double* __restrict__ shear, double* __restrict__ buoy, double* __restrict__ diss,
        double* __restrict__ total, const long long n, const int nz)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= n) return;
    const double e = e12[p], zl = zlt[p];
    const double sh = ekm[p] * (2.0 * s2[p]) / (2.0 * e);
    const double bu = -ekh[p] * n2[p] / (2.0 * e);
    const double di = -(ce1 + ce2 * zl / delta[p % nz]) * (e * e) / (2.0 * zl);
    shear[p] = sh; buoy[p] = bu; diss[p] = di;
    total[p] = sh + bu + di;
}

__device__ bool sg_rim(const int i, const int j, const int nx, const int ny)
{
    return i == 0 || j == 0 || i == nx - 1 || j == ny - 1;
}

__device__ double sg_tau_uv(const double* __restrict__ ekm, const double* __restrict__ suv, const int i,
        const int j, const int k, const int nx, const int ny, const int nz)
{
    if (sg_rim(i, j, nx, ny)) return 0.0;
    return 0.25 * (ekm[IX3(i, j, k, ny, nz)] + ekm[IX3(i - 1, j, k, ny, nz)] + ekm[IX3(i, j - 1, k, ny, nz)]
                   + ekm[IX3(i - 1, j - 1, k, ny, nz)]) * suv[IX3(i, j, k, ny, nz)];
}

// the uw (di = 1) or vw (dj = 1) edge stress on inner face m + 1
__device__ double sg_tau_z(const double* __restrict__ ekm, const double* __restrict__ sz, const int i,
        const int j, const int di, const int dj, const int m, const double* __restrict__ dzf,
        const double* __restrict__ dzh, const int nx, const int ny, const int nz)
{
    if (sg_rim(i, j, nx, ny)) return 0.0;
    const double a = ekm[IX3(i, j, m, ny, nz)] + ekm[IX3(i - di, j - dj, m, ny, nz)];
    const double b = ekm[IX3(i, j, m + 1, ny, nz)] + ekm[IX3(i - di, j - dj, m + 1, ny, nz)];
    return (dzf[m + 1] * a + dzf[m] * b) / (4.0 * dzh[m + 1]) * sz[IX3(i, j, m, ny, nz - 1)];
}

// fused._momentum_diffusion: tu, tv (nx-2, ny-2, nz), tw (nx-2, ny-2, nz-1)
extern "C" __global__ void sg_momentum_diffusion(const double* __restrict__ u, const double* __restrict__ v,
        const double* __restrict__ w, const double* __restrict__ ekm, const double* __restrict__ suv,
        const double* __restrict__ suw, const double* __restrict__ svw, const double* __restrict__ dzf,
        const double* __restrict__ dzh, const double dx, const double dy, const double c2x, const double c2y,
        const double* __restrict__ fuw, const int has_fuw, const double* __restrict__ fvw, const int has_fvw,
        double* __restrict__ tu, double* __restrict__ tv, double* __restrict__ tw,
        const int nx, const int ny, const int nz, const int into, const int h, const int nxl, const int nyl)
{
    THREAD_IJK
    if (i >= nx - 2 || j >= ny - 2 || k >= nz) return;
    const int bi = i + 1, bj = j + 1, nw = nz + 1;
    // u: 2 ekm du/dx at centres, differenced in x (zero on the rim)
    double fp = sg_rim(bi, bj, nx, ny) ? 0.0 : ekm[IX3(bi, bj, k, ny, nz)] * (u[IX3(bi + 1, bj, k, ny, nz)] - u[IX3(bi, bj, k, ny, nz)]);
    double fm = sg_rim(bi - 1, bj, nx, ny) ? 0.0 : ekm[IX3(bi - 1, bj, k, ny, nz)] * (u[IX3(bi, bj, k, ny, nz)] - u[IX3(bi - 1, bj, k, ny, nz)]);
    double t = (fp - fm) * c2x;
    t = t + (sg_tau_uv(ekm, suv, bi, bj + 1, k, nx, ny, nz) - sg_tau_uv(ekm, suv, bi, bj, k, nx, ny, nz)) / dy;
    double gp = k + 1 < nz ? sg_tau_z(ekm, suw, bi, bj, 1, 0, k, dzf, dzh, nx, ny, nz) : 0.0;
    double gm;
    if (k > 0) gm = sg_tau_z(ekm, suw, bi, bj, 1, 0, k - 1, dzf, dzh, nx, ny, nz);
    else       gm = has_fuw ? -fuw[(long long)bi * ny + bj] : 0.0;
    sg_put(tu, into, i, j, k, ny, nz, h, nxl, nyl, 0, t + (gp - gm) / dzf[k]);
    // v
    fp = sg_rim(bi, bj, nx, ny) ? 0.0 : ekm[IX3(bi, bj, k, ny, nz)] * (v[IX3(bi, bj + 1, k, ny, nz)] - v[IX3(bi, bj, k, ny, nz)]);
    fm = sg_rim(bi, bj - 1, nx, ny) ? 0.0 : ekm[IX3(bi, bj - 1, k, ny, nz)] * (v[IX3(bi, bj, k, ny, nz)] - v[IX3(bi, bj - 1, k, ny, nz)]);
    t = (fp - fm) * c2y;
    t = t + (sg_tau_uv(ekm, suv, bi + 1, bj, k, nx, ny, nz) - sg_tau_uv(ekm, suv, bi, bj, k, nx, ny, nz)) / dx;
    gp = k + 1 < nz ? sg_tau_z(ekm, svw, bi, bj, 0, 1, k, dzf, dzh, nx, ny, nz) : 0.0;
    if (k > 0) gm = sg_tau_z(ekm, svw, bi, bj, 0, 1, k - 1, dzf, dzh, nx, ny, nz);
    else       gm = has_fvw ? -fvw[(long long)bi * ny + bj] : 0.0;
    sg_put(tv, into, i, j, k, ny, nz, h, nxl, nyl, 0, t + (gp - gm) / dzf[k]);
    // w on the inner face m + 1
    if (k < nz - 1) {
        const int m = k;
        t = (sg_tau_z(ekm, suw, bi + 1, bj, 1, 0, m, dzf, dzh, nx, ny, nz)
             - sg_tau_z(ekm, suw, bi, bj, 1, 0, m, dzf, dzh, nx, ny, nz)) / dx
          + (sg_tau_z(ekm, svw, bi, bj + 1, 0, 1, m, dzf, dzh, nx, ny, nz)
             - sg_tau_z(ekm, svw, bi, bj, 0, 1, m, dzf, dzh, nx, ny, nz)) / dy;
        const double a = ekm[IX3(bi, bj, m + 1, ny, nz)] * (w[IX3(bi, bj, m + 2, ny, nw)] - w[IX3(bi, bj, m + 1, ny, nw)]) / dzf[m + 1];
        const double b = ekm[IX3(bi, bj, m, ny, nz)] * (w[IX3(bi, bj, m + 1, ny, nw)] - w[IX3(bi, bj, m, ny, nw)]) / dzf[m];
        sg_put(tw, into, i, j, m, ny, into ? nz + 1 : nz - 1, h, nxl, nyl, into ? 1 : 0, t + (a - b) * 2.0 / dzh[m + 1]);
    }
}
"""

BLOCK = (32, 8, 1)      # threads along k, j, i


_CUDA = CudaSource(__name__, CUDA_SOURCE)
_function = _CUDA.function


def _module():
    return _CUDA.module()


register_module("gpusubgrid", lambda: _module())      # (checked by gpubase.usable, with gpukernels' module)


def _launch(name: str, ni: int, nj: int, nk: int, args) -> None:
    if ni <= 0 or nj <= 0 or nk <= 0:
        return
    bx, by, bz = BLOCK
    grid = (-(-nk // bx), -(-nj // by), -(-ni // bz))
    _function(name)(grid, BLOCK, tuple(args))


def _i(*n):
    return tuple(np.int32(x) for x in n)


def _f(*x):
    return tuple(np.float64(v) for v in x)


@functools.lru_cache(maxsize=None)
def _dummy():
    """A 1-element array for absent array arguments (never read): made once, not every call."""
    import cupy
    return cupy.zeros(1)


def _flat2(xp, a, shape2):
    """A 2-D surface field of the block's ``shape2`` as a C-contiguous float64 array (or a
    1-element dummy when absent)."""
    if a is None:
        return _dummy(), np.int32(0)
    if tuple(a.shape) != tuple(shape2):
        raise ValueError(f"gpusubgrid: a surface field of shape {tuple(a.shape)} for a block of {tuple(shape2)}")
    if a.dtype == xp.float64 and a.flags.c_contiguous:
        return a, np.int32(1)                           # (itself: address tables stay valid)
    return xp.ascontiguousarray(a, dtype=xp.float64), np.int32(1)


def face_diffusivities(K, dzf, dzh, scale: float = 1.0):
    """``(kx, ky, kz)`` of :func:`fused.face_diffusivities` of ``scale * K`` on the GPU (the
    product formed in the kernel: one launch fewer than scaling ``K`` first, the same bits)."""
    import cupy as xp
    nx, ny, nz = K.shape
    kx, ky = xp.empty((nx - 1, ny - 2, nz)), xp.empty((nx - 2, ny - 1, nz))
    kz = xp.empty((nx - 2, ny - 2, max(nz - 1, 0)))
    _launch("sg_face_diffusivities", nx - 1, ny - 1, nz, (K, np.float64(scale), dzf, dzh, kx, ky, kz, *_i(nx, ny, nz)))
    return kx, ky, kz


def scalar_diffusion(s, kx, ky, kz, dzf, dzh, dx2: float, dy2: float, flux_bottom=None, into=None, extra=None):
    """The core-shaped tendency of :func:`fused.scalar_diffusion` on the GPU (``kx`` a float: one
    diffusivity for every face). ``into = (tend, h, nxl, nyl)``: add it to the interior of the
    tendency block instead (as ``subgrid._add_interior``) and return None. ``extra``: a C-contiguous
    block array (the shape of ``s``) whose core is added to the tendency first."""
    import cupy as xp
    nx, ny, nz = s.shape
    out = xp.empty((nx - 2, ny - 2, nz)) if into is None else into[0]
    const = isinstance(kx, float)
    dummy = _dummy()
    fb, has_fb = _flat2(xp, flux_bottom, (nx, ny))
    if extra is not None and (tuple(extra.shape) != tuple(s.shape) or not extra.flags.c_contiguous):
        raise ValueError(f"gpusubgrid: an extra tendency of shape {tuple(extra.shape)} for a block of {tuple(s.shape)}")
    _launch("sg_scalar_diffusion", nx - 2, ny - 2, nz,
            (s, dummy if const else kx, dummy if const else ky, dummy if const else kz,
             np.float64(kx if const else -1.0), dzf, dzh, *_f(dx2, dy2), fb, has_fb,
             dummy if extra is None else extra, np.int32(extra is not None), out, *_i(nx, ny, nz),
             *_into(into)))
    return out if into is None else None


def scalar_diffusion_many(fields, kx, ky, kz, dzf, dzh, dx2: float, dy2: float, fluxes, into) -> None:
    """:func:`scalar_diffusion` into the tendencies of several fields with the same face
    diffusivities, in one launch. ``fields``, ``fluxes`` (surface fluxes or None): per field;
    ``into = (tends, h, nxl, nyl)`` with one tendency block per field (C-contiguous, one shape)."""
    import cupy as xp
    tends, h, nxl, nyl = into
    nx, ny, nz = fields[0].shape
    if len({tuple(a.shape) for a in (*fields, *tends)}) > 1 or not len(fields) == len(tends) == len(fluxes):
        raise ValueError("gpusubgrid.scalar_diffusion_many: one tendency and flux per field, all of one shape")
    const = isinstance(kx, float)
    dummy = _dummy()
    fbs = [_flat2(xp, f, (nx, ny)) for f in fluxes]
    st, has_fb = _TABLES[0].get(fields, [int(flag) for _, flag in fbs])
    tt, _ = _TABLES[1].get(tends, ())
    ft, _ = _TABLES[2].get([a for a, _ in fbs], ())
    if nx <= 2 or ny <= 2 or nz <= 0:
        return
    bx, by, _ = BLOCK
    launch_over_fields(_function("sg_scalar_diffusion_many"), (-(-nz // bx), -(-(ny - 2) // by)), BLOCK, nx - 2,
                       (st, tt, ft, has_fb), (
        dummy if const else kx, dummy if const else ky,
        dummy if const else kz, np.float64(kx if const else -1.0), dzf, dzh, *_f(dx2, dy2), *_i(nx, ny, nz),
        *_i(h, nxl, nyl)))


_TABLES = (AddressTables(), AddressTables(), AddressTables())   # values, tendencies, surface fluxes


def _into(into):
    """The kernels' ``into, h, nxl, nyl`` arguments for ``into = (tend..., h, nxl, nyl)`` or None."""
    return _i(0, 0, 0, 0) if into is None else _i(1, *into[-3:])


def edges(u, v, w, dzh, dx: float, dy: float):
    """``(suv, suw, svw)`` of :func:`fused.edges` on the GPU (zero rim)."""
    import cupy as xp
    nx, ny, nz = u.shape
    suv = xp.empty((nx, ny, nz))                       # the kernel writes the zero rim too
    suw = xp.empty((nx, ny, max(nz - 1, 0)))
    svw = xp.empty((nx, ny, max(nz - 1, 0)))
    _launch("sg_edges", nx, ny, nz, (u, v, w, dzh, *_f(dx, dy), suv, suw, svw, *_i(nx, ny, nz)))
    return suv, suw, svw


def strain2(u, v, w, edges, shear_uw, shear_vw, dzf, dx: float, dy: float, scale=None):
    """``S_ij S_ij`` of :func:`fused.strain2` on the GPU (zero rim). With ``scale`` (a 2-D array of
    the block's shape) the surface shears are ``shear_uw / scale`` and ``shear_vw / scale``, divided
    in the kernel (two launches fewer than dividing first)."""
    import cupy as xp
    nx, ny, nz = u.shape
    out = xp.empty(u.shape)                            # the kernel writes the zero rim too
    suv, suw, svw = edges
    (s0u, _), (s0v, _), (den, has_den) = (_flat2(xp, a, (nx, ny)) for a in (shear_uw, shear_vw, scale))
    _launch("sg_strain2", nx, ny, nz, (u, v, w, suv, suw, svw, s0u, s0v, den, has_den, dzf, *_f(dx, dy), out,
                                               *_i(nx, ny, nz)))
    return out


def tke_closure(e12f, thv, zf, grav_thvf, delta, cm, cn, ch1, ch2, e12min, ekmin, grav=None):
    """``(ekm, ekh, zlt, e12, n2)`` of :func:`fused.tke_closure` on the GPU. With ``grav``, the
    fourth argument is ``thv_ref`` and the kernel uses ``grav / thv_ref`` (one launch fewer)."""
    import cupy as xp
    nx, ny, nz = e12f.shape
    out = [xp.empty(e12f.shape) for _ in range(5)]
    _launch("sg_tke_closure", nx, ny, nz, (e12f, thv, zf, grav_thvf, np.float64(grav or 0.0), np.int32(grav is not None),
                                           delta, *_f(cm, cn, ch1, ch2, e12min, ekmin),
                                           *out, *_i(nx, ny, nz)))
    return tuple(out)


def tke_sources(ekm, ekh, zlt, e12, n2, s2, delta, ce1: float, ce2: float):
    """``(shear, buoyancy, dissipation, their sum)`` of :meth:`subgrid.SubgridTKE.sources` in one
    pass on the GPU (block arrays of ``ekm``'s shape)."""
    import cupy as xp
    out = [xp.empty(ekm.shape) for _ in range(4)]
    n = int(ekm.size)
    if n:
        _function("sg_tke_sources")((-(-n // 256),), (256,), (ekm, ekh, zlt, e12, n2, s2, delta,
                                                              *_f(ce1, ce2), *out, np.int64(n),
                                                              np.int32(ekm.shape[-1])))
    return tuple(out)


def momentum_diffusion(u, v, w, ekm, edges, dzf, dzh, dx: float, dy: float, flux_uw=None, flux_vw=None,
                       into=None):
    """``(tu, tv, tw)`` of :func:`fused.momentum_diffusion` on the GPU. ``into = (tend_u, tend_v,
    tend_w, h, nxl, nyl)``: add them to the interiors of the tendency blocks instead (``tw`` to
    the inner levels of ``tend_w``) and return None."""
    import cupy as xp
    nx, ny, nz = u.shape
    if into is None:
        tu, tv = xp.empty((nx - 2, ny - 2, nz)), xp.empty((nx - 2, ny - 2, nz))
        tw = xp.empty((nx - 2, ny - 2, max(nz - 1, 0)))
    else:
        tu, tv, tw = into[:3]
    suv, suw, svw = edges
    fuw, has_uw = _flat2(xp, flux_uw, (nx, ny))
    fvw, has_vw = _flat2(xp, flux_vw, (nx, ny))
    c2x, c2y = 2.0 / dx ** 2, 2.0 / dy ** 2            # as the source and the numba kernel
    _launch("sg_momentum_diffusion", nx - 2, ny - 2, nz,
            (u, v, w, ekm, suv, suw, svw, dzf, dzh, *_f(dx, dy, c2x, c2y), fuw, has_uw, fvw, has_vw,
             tu, tv, tw, *_i(nx, ny, nz), *_into(into)))
    return (tu, tv, tw) if into is None else None
