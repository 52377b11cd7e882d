"""Run statistics: time series and hourly-averaged mean profiles, written to HDF5.

Every :meth:`Statistics.sample` reduces the local blocks to horizontal (slab) means with a single
``Allreduce`` and derives, on every rank alike:

Time series (``timeseries/<name>``, one value per sample, ``time`` in s)
    ``cloud_cover``  fraction of columns with ``ql > 0`` at any level (projected cover);
    ``cloud_base`` / ``cloud_top``  height ``zf`` of the lowest / highest level with ``ql > 0``
    anywhere in the domain (the intercomparison's definition; NaN without cloud);
    ``cfrac_max``  the largest cloud fraction of any level;
    ``lwp``  domain mean of the column integral of ``rho ql`` (g/m^2; ``rho`` of the base state);
    ``zi``  boundary-layer (inversion) height: the face ``zh`` with the largest ``d<thv>/dz``;
    ``zi_flux``  the face with the most negative total buoyancy flux ``w'thv'`` (the CBL's
    entrainment level; NaN without ``w``);
    DALES's time-series definitions (``modtimestat.f90`` of DALES 3.2.0, the version that wrote
    the BOMEX reference output ``hpcsuite/les/data/dales_bomex_tmser.csv``; described here in our
    words, no DALES code is used), for a comparison with matched definitions:
    ``cloud_base_avg`` (DALES ``zb``) the mean over the cloudy columns (any ``ql > 0``) of the
    height ``zf`` of each column's lowest cloudy level; ``cloud_top_avg`` (DALES ``zc_av``) the
    same mean of each cloudy column's highest cloudy level (NaN without cloud; DALES writes a
    fill value). DALES's ``cc`` is ``cloud_cover``, its ``zc_max`` is ``cloud_top`` and its
    ``lwp_bar`` is ``lwp`` (in kg/m^2 there): the same definitions. ``lwp_max`` (DALES
    ``lwp_max``) the largest column liquid water path (g/m^2; 0 without cloud).
    ``zi_dales`` (DALES ``zi`` with its defaults ``iblh_meth = 2``, ``iblh_var = -1``,
    ``blh_nsamp = 4``): the columns are split into groups of ``blh_nsamp`` columns a stride
    ``s = ceil(nx / blh_nsamp)`` apart along x in one row (columns ``i, i + s, ...``; DALES 3.2 had
    the whole x extent on each rank); in each group the virtual potential temperature is summed
    over its columns, the gradient of the sum is taken on the faces (``grad_k = (P_k - P_(k-1)) /
    dzh_k``, zero on the surface), the face ``L`` of its largest value is found, and the height is
    refined from the gradient's own derivative at the cell centres (``d_k = (grad_(k+1) - grad_k)
    / dzf_k``) as ``zh_(L-1) - dzh_L d_(L-1) / (d_L - d_(L-1) + 1e-8)``; note that this anchors at
    the face below ``L``, so a symmetric gradient peak on face ``L`` gives ``zh_L - dzf/2`` (half a
    layer below the face: DALES's own convention, kept). ``zi_dales`` is the mean over the groups
    weighted by their column counts. Differences from DALES: the top face (DALES uses a ghost level
    above the domain) is left out of the search; the thv of a group is reduced over all ranks.
    ``wthl_s``, ``wqt_s``, ``ustar``, ``uw_s``, ``vw_s``  domain-mean surface fluxes (kinematic;
    the file's ``rho_surface`` attribute, the base-state density of the first level in moist runs,
    turns them into W/m^2).

Profiles (``profiles/<name>``, one row per averaging interval, default an hour)
    cell centres (nz): ``thl, qt, ql, thv, u, v, e12, cfrac`` (fraction of cells with ``ql > 0``;
    ``u, v`` relative to the ground: the Galilean shift ``ctx.galilean`` is added back);
    faces (nz+1): ``w2`` (variance), ``wthl_res, wthl_sgs, wthl`` and the same for ``qt`` and
    ``thv``: resolved covariances with the scalar interpolated to the ``w`` levels, subgrid fluxes
    ``-K dS/dz`` with ``diag['ekh']`` (surface flux on face 0), totals. ``profiles/hours`` is the
    end of each interval in hours, ``profiles/nsamples`` the samples in it. Interval ``n`` covers
    ``(n T, (n+1) T]`` (the first ``[0, T]``): a sample exactly at an interval's end belongs to the
    interval it ends, so a 6-hour run has hours 1-6 and no extra "hour 7" holding only the sample
    at t = 6 h.

Initial profiles (``initial/<name>``, cell centres; the time in the group's ``time`` attribute):
the state the run started from (``sample(ctx, initial=True)`` before the first step, else the
first sample), drawn beside the hourly means. Not part of the series or the averages.

:meth:`Statistics.write` writes an HDF5 file atomically from rank 0 (a temporary name in the same
folder, then ``os.replace``).
"""
from __future__ import annotations

import math
import os
import secrets
from pathlib import Path

import numpy as np

from ..runtime.device import to_host as _host
from mpi4py import MPI

from .horizontal import horizontal_sums
from .state import zgrid_of as _zgrid
from ..runtime.device import concat
from .thermo import saturation_adjust, virtual_theta

__all__ = ["Statistics", "CELL_PROFILES", "FACE_PROFILES", "SERIES", "zi_dales", "BLH_NSAMP"]

CELL_PROFILES = ("thl", "qt", "ql", "thv", "u", "v", "e12", "cfrac")
FACE_PROFILES = ("w2", "wthl_res", "wthl_sgs", "wthl", "wqt_res", "wqt_sgs", "wqt",
                 "wthv_res", "wthv_sgs", "wthv")
SERIES = ("cloud_cover", "cloud_base", "cloud_top", "cfrac_max", "lwp", "zi", "zi_flux",
          "wthl_s", "wqt_s", "ustar", "uw_s", "vw_s",
          "cloud_base_avg", "cloud_top_avg", "lwp_max", "zi_dales")
BLH_NSAMP = 4          # DALES modtimestat's default blh_nsamp: columns per inversion-height group
_SURFACE = {"wthl_s": "wthl", "wqt_s": "wqt", "ustar": "ustar", "uw_s": "uw", "vw_s": "vw"}


class Statistics:
    """Time series and interval-averaged profiles of a run. Construction is local.

    Parameters
    ----------
    team : Team
        The ranks of the run (:meth:`sample` is collective over it).
    grid : Grid
        The grid (global sizes and heights).
    interval : float
        Averaging interval of the profiles in seconds (default 3600).
    """

    def __init__(self, team, grid, interval: float = 3600.0):
        if not interval > 0:
            raise ValueError(f"Statistics: interval must be > 0, got {interval!r}")
        self.team, self.grid, self.interval = team, grid, float(interval)
        self.time: list[float] = []
        self.series: dict[str, list[float]] = {k: [] for k in SERIES}
        self._intervals: dict[int, dict] = {}          # interval index -> {"n": samples, name: sum}
        self.initial: dict | None = None               # the first sample's cell profiles, and "time"
        self.rho_surface: float | None = None          # base-state density of the first level (kg/m^3)

    # -------------------------------------------------------------------------------- sampling
    def sample(self, ctx, initial: bool = False) -> dict:
        """Reduce the current state to slab means and record them. Collective.

        ``initial=True`` records only the cell-centre profiles, as the run's initial state
        (``initial/<name>`` in the file): call it once before the first step. Without it the
        first sample's profiles stand for the initial state.

        Reads ``ctx.fields`` (``u, v, w, thl, qt, e12`` where present), ``ctx.base`` (``presf``,
        ``exnf``, ``rhof``: ``ql`` and ``thv`` are recomputed from the current ``thl, qt``; dry
        runs use ``thv = thl``), ``ctx.diag`` (``ekh`` and ``surface`` of the last substep) and
        ``ctx.t``. Returns this sample's slab means and time-series values (NumPy arrays / floats).
        """
        xp, f, d = ctx.xp, ctx.fields, ctx.diag
        g = self.grid
        zg = _zgrid(ctx)
        dzf, dzh = zg.dzf, zg.dzh
        names, arrays = [], []

        def add(name, a):
            names.append(name)
            arrays.append(a)

        thl, qt, base = f.get("thl"), f.get("qt"), ctx.base
        if thl is not None and qt is not None and hasattr(base, "presf"):
            # the thermodynamics of the fields as they are now (diag holds the last substep's)
            ql, _T = saturation_adjust(xp, thl, qt, base.presf, base.exnf)
            thv = virtual_theta(thl, qt, ql, base.exnf)
        else:
            ql, thv = d.get("ql") if qt is not None else None, thl
        for n in ("thl", "qt", "u", "v", "e12"):
            if n in f:
                add(n, f[n])
        if thv is not None:
            add("thv", thv)
        if ql is not None:
            cloudy = ql > 0
            add("ql", ql)
            one, zero = xp.ones_like(ql), xp.zeros_like(ql)
            add("cfrac", xp.where(cloudy, one, zero))
            add("_cloudcol", xp.where(xp.any(cloudy, axis=-1), one[..., 0], zero[..., 0]))
            rho = getattr(ctx.base, "rhof", None)
            lwp_col = xp.sum(ql * (dzf if rho is None else rho * dzf), axis=-1)
            add("_lwp", lwp_col)
            # DALES's zb / zc_av: each cloudy column's lowest / highest cloudy level (0 if clear)
            col = xp.any(cloudy, axis=-1)
            zlow = xp.min(xp.where(cloudy, zg.zf, xp.full_like(ql, math.inf)), axis=-1)
            add("_zbase", xp.where(col, zlow, zero[..., 0]))
            add("_ztop", xp.max(xp.where(cloudy, zg.zf, zero), axis=-1))
            if rho is not None and self.rho_surface is None:       # (once: surface fluxes in W/m^2)
                self.rho_surface = float(np.asarray(_host(rho[:1]))[0])
        w = f.get("w")
        scal = {"thl": thl, "qt": f.get("qt"), "thv": thv}
        ekh = d.get("ekh")
        sfc = d.get("surface") or {}
        if w is not None:
            add("_w", w)
            add("_w2", w * w)
            ref = getattr(ctx.base, "thvref", None)      # removes ~300 K before w * s: less cancellation
            for s, a in scal.items():
                if a is None:
                    continue
                ah = _to_faces(xp, a if ref is None or s == "qt" else a - ref, dzf, dzh)
                add(f"_{s}h", ah)
                add(f"_w{s}", w * ah)
                if ekh is not None:
                    kf = (dzf[1:] * ekh[..., :-1] + dzf[:-1] * ekh[..., 1:]) / (2.0 * dzh[1:-1])
                    inner = -kf * (a[..., 1:] - a[..., :-1]) / dzh[1:-1]
                    zero = xp.zeros_like(a[..., :1])     # (not inner's: one level has no inner face)
                    add(f"_sgs{s}", concat(xp)([zero, inner, zero], axis=-1))
        for key, sk in _SURFACE.items():
            if sk in sfc:
                add(f"_sfc_{key}", sfc[sk])
        sums = horizontal_sums(ctx, arrays)
        ncol = float(g.nx * g.ny)
        m = {n: np.asarray(_host(s), dtype=np.float64) / ncol for n, s in zip(names, sums)}
        if ql is not None:
            m["_lwp_max"] = np.array([_global_max(ctx, lwp_col)])
        if thv is not None and g.nz > 1:
            m["_zi_dales"] = np.array([zi_dales(*_group_sums(ctx, thv), np.asarray(g.zf, dtype=np.float64),
                                                np.asarray(g.zh, dtype=np.float64))])
        cu, cv = getattr(ctx, "galilean", (0.0, 0.0))      # report ground-relative winds
        if "u" in m:
            m["u"] = m["u"] + cu
        if "v" in m:
            m["v"] = m["v"] + cv
        return self._record(float(getattr(ctx, "t", 0.0)), m, scal, initial)

    def _record(self, t: float, m: dict, scal: dict, initial: bool = False) -> dict:
        g = self.grid
        zf, zh = np.asarray(g.zf, dtype=np.float64), np.asarray(g.zh, dtype=np.float64)
        nz = g.nz
        out = {n: m[n] for n in CELL_PROFILES if n in m}
        if initial or self.initial is None:
            self.initial = {"time": t, **{n: np.array(v) for n, v in out.items()}}
            if initial:
                return out
        ts = {k: math.nan for k in SERIES}
        if "cfrac" in m:
            cf = m["cfrac"]
            lev = np.nonzero(cf > 0)[0]
            ts["cloud_cover"] = float(m["_cloudcol"][0])
            ts["cfrac_max"] = float(cf.max())
            ts["lwp"] = 1e3 * float(m["_lwp"][0])
            if lev.size:
                ts["cloud_base"], ts["cloud_top"] = float(zf[lev[0]]), float(zf[lev[-1]])
            if "_lwp_max" in m:
                ts["lwp_max"] = 1e3 * float(m["_lwp_max"][0])
            cc = float(m["_cloudcol"][0])
            if cc > 0 and "_zbase" in m:
                ts["cloud_base_avg"] = float(m["_zbase"][0]) / cc
                ts["cloud_top_avg"] = float(m["_ztop"][0]) / cc
        if "thv" in m and nz > 1:
            grad = np.diff(m["thv"]) / np.diff(zf)
            ts["zi"] = float(zh[1 + int(np.argmax(grad))])
        if "_zi_dales" in m:
            ts["zi_dales"] = float(m["_zi_dales"][0])
        if "_w" in m:
            wm = m["_w"]
            out["w2"] = m["_w2"] - wm ** 2
            for s in ("thl", "qt", "thv"):
                if f"_w{s}" not in m:
                    continue
                res = m[f"_w{s}"] - wm * m[f"_{s}h"]
                sgs = m.get(f"_sgs{s}", np.zeros(nz + 1)).copy()
                if s == "thl" and "_sfc_wthl_s" in m:
                    sgs[0] = m["_sfc_wthl_s"][0]
                if s == "qt" and "_sfc_wqt_s" in m:
                    sgs[0] = m["_sfc_wqt_s"][0]
                if s == "thv" and "_sfc_wthl_s" in m:       # surface buoyancy flux, dry estimate
                    sgs[0] = m["_sfc_wthl_s"][0]
                out[f"w{s}_res"], out[f"w{s}_sgs"], out[f"w{s}"] = res, sgs, res + sgs
            if "wthv" in out and nz > 1:
                ts["zi_flux"] = float(zh[1 + int(np.argmin(out["wthv"][1:-1]))])
        for key in _SURFACE:
            if f"_sfc_{key}" in m:
                ts[key] = float(m[f"_sfc_{key}"][0])
        for k in SERIES:                   # (a state restored from an older version lacks new series)
            self.series.setdefault(k, [math.nan] * len(self.time))
        self.time.append(t)
        for k in SERIES:
            self.series[k].append(ts[k])
        idx = self.interval_index(t)
        acc = self._intervals.setdefault(idx, {"n": 0})
        acc["n"] += 1
        for n, v in out.items():
            acc[n] = acc.get(n, 0.0) + v
        out.update(ts)
        return out

    def interval_index(self, t: float) -> int:
        """The averaging interval of a sample at time ``t``: ``n`` for ``n T < t <= (n+1) T``
        (0 for ``t <= T``); a sample within ``1e-9 T`` of an interval end counts as at it. Local."""
        return max(0, int(math.ceil(t / self.interval - 1e-9)) - 1)

    # -------------------------------------------------------------------------------- results
    def timeseries(self) -> dict:
        """``{'time': array, name: array}`` of everything sampled so far. Local."""
        res = {"time": np.asarray(self.time, dtype=np.float64)}
        res.update({k: np.asarray(v, dtype=np.float64) for k, v in self.series.items()})
        return res

    def profiles(self) -> dict:
        """Interval-averaged profiles: ``hours`` (interval ends), ``nsamples`` and one
        ``(intervals, levels)`` array per profile name (NaN where an interval lacks it). Local."""
        idx = sorted(self._intervals)
        g = self.grid
        res = {"hours": np.array([(i + 1) * self.interval / 3600.0 for i in idx]),
               "nsamples": np.array([self._intervals[i]["n"] for i in idx], dtype=np.int64)}
        for name in CELL_PROFILES + FACE_PROFILES:
            if not any(name in self._intervals[i] for i in idx):
                continue
            nlev = g.nz if name in CELL_PROFILES else g.nz + 1
            rows = [self._intervals[i][name] / self._intervals[i]["n"] if name in self._intervals[i]
                    else np.full(nlev, np.nan) for i in idx]
            res[name] = np.array(rows, dtype=np.float64).reshape(len(idx), nlev)
        return res

    def write(self, path, attrs: dict | None = None) -> None:
        """Write the statistics to the HDF5 file ``path``: rank 0 writes under a temporary name and
        renames it; an I/O error is raised on every rank. Collective."""
        err = None
        if self.team.rank == 0:
            try:
                self._write(Path(path), attrs or {})
            except OSError as exc:
                err = f"{path}: cannot write the statistics: {exc}"
        err = self.team.bcast(err)
        if err:
            raise OSError(err)

    def _write(self, path: Path, attrs: dict) -> None:
        import h5py
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        g = self.grid
        try:
            with h5py.File(tmp, "w") as f:
                f.attrs.update({"nx": g.nx, "ny": g.ny, "nz": g.nz, "xsize": g.xsize, "ysize": g.ysize,
                                "interval": self.interval, "definitions": __doc__})
                if self.rho_surface is not None:
                    f.attrs["rho_surface"] = self.rho_surface
                for k, v in attrs.items():
                    f.attrs[k] = v
                f["zf"] = np.asarray(g.zf, dtype=np.float64)
                f["zh"] = np.asarray(g.zh, dtype=np.float64)
                ts = f.create_group("timeseries")
                for k, v in self.timeseries().items():
                    ts[k] = v
                pr = f.create_group("profiles")
                for k, v in self.profiles().items():
                    pr[k] = v
                if self.initial is not None:
                    ini = f.create_group("initial")
                    ini.attrs["time"] = self.initial["time"]
                    for k, v in self.initial.items():
                        if k != "time":
                            ini[k] = v
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()


def _to_faces(xp, a, dzf, dzh):
    """A cell-centred field linearly interpolated to the ``w`` levels, ``nz + 1`` of them (zero on
    the walls, where the model keeps ``w`` zero). Local.

    The wall values are shaped from ``a`` itself: a one-level field has no inner face, and zeros
    shaped from the empty inner faces would leave the profile with no level at all.
    """
    inner = (a[..., 1:] * dzf[:-1] + a[..., :-1] * dzf[1:]) / (2.0 * dzh[1:-1])
    zero = xp.zeros_like(a[..., :1])
    return concat(xp)([zero, inner, zero], axis=-1)


def _global_max(ctx, a) -> float:
    """The largest value of a local 2-D block's interior over all ranks (0 for an empty domain).
    Collective."""
    g, h = ctx.grid, ctx.h
    s = np.asarray(_host(a[h:h + g.nxl, h:h + g.nyl]), dtype=np.float64)
    local = float(s.max()) if s.size else 0.0
    return float(ctx.team.allreduce(local, op=MPI.MAX)) if ctx.team.size > 1 else local


def _group_sums(ctx, thv, nsamp: int = BLH_NSAMP):
    """DALES's inversion-height groups: the sums of ``thv`` over the columns ``i, i + s, ...`` of
    each row (``s = ceil(nx / nsamp)``), as ``(s, ny, nz)``, and each group's column count ``(s, 1)``.
    The global array is reduced over all ranks (``s ny nz`` numbers). Collective."""
    g, h = ctx.grid, ctx.h
    stride = -(-g.nx // nsamp)
    block = np.asarray(_host(thv[h:h + g.nxl, h:h + g.nyl, :]), dtype=np.float64)
    sums = np.zeros((stride, g.ny, g.nz))
    gi = (g.i0 + np.arange(g.nxl)) % stride
    np.add.at(sums[:, g.j0:g.j0 + g.nyl, :], gi, block)
    if ctx.team.size > 1:
        out = np.empty_like(sums)
        ctx.team.Allreduce(sums, out)
        sums = out
    counts = np.array([-(-(g.nx - r) // stride) for r in range(stride)], dtype=np.float64)
    return sums, counts[:, None]


def zi_dales(sums, counts, zf, zh) -> float:
    """DALES's inversion height (``modtimestat``, gradient method on ``thv``) from the group sums
    of :func:`_group_sums`: per group the refined height of the largest face gradient of its
    summed profile (see the module docstring), then the mean weighted by the column counts. Local.

    Parameters
    ----------
    sums : array (groups..., nz)
        Each group's profile summed over its columns (any leading shape).
    counts : array
        Columns per group, broadcastable against ``sums[..., 0]``.
    zf, zh : arrays (nz,), (nz + 1,)
        Cell-centre and face heights.
    """
    sums = np.asarray(sums, dtype=np.float64)
    nz = sums.shape[-1]
    dzf = np.diff(zh)[:nz]
    dzh = np.concatenate(([zf[0]], np.diff(zf)))            # dzh[k] = zf[k] - zf[k-1], k >= 1
    grad = np.zeros_like(sums)                               # on faces 0..nz-1; 0 on the surface
    grad[..., 1:] = np.diff(sums, axis=-1) / dzh[1:]
    dgrad = np.zeros_like(sums)                              # at cell centres 1..nz-2
    dgrad[..., 1:-1] = (grad[..., 2:] - grad[..., 1:-1]) / dzf[1:-1]
    loc = np.argmax(grad, axis=-1)                           # the first largest, as Fortran maxloc
    lm1 = np.maximum(loc - 1, 0)
    d0 = np.take_along_axis(dgrad, lm1[..., None], -1)[..., 0]
    d1 = np.take_along_axis(dgrad, loc[..., None], -1)[..., 0]
    zi = zh[lm1] - dzh[loc] * d0 / (d1 - d0 + 1e-8)
    zi = np.where(loc > 0, zi, 0.0)                          # (no positive gradient anywhere)
    w = np.broadcast_to(np.asarray(counts, dtype=np.float64), zi.shape)
    return float(np.sum(w * zi) / np.sum(w))
