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
from .horizontal import horizontal_sums
from .state import zgrid_of as _zgrid
from .thermo import concat, saturation_adjust, virtual_theta

__all__ = ["Statistics", "CELL_PROFILES", "FACE_PROFILES", "SERIES"]

CELL_PROFILES = ("thl", "qt", "ql", "thv", "u", "v", "e12", "cfrac")
FACE_PROFILES = ("w2", "wthl_res", "wthl_sgs", "wthl", "wqt_res", "wqt_sgs", "wqt",
                 "wthv_res", "wthv_sgs", "wthv")
SERIES = ("cloud_cover", "cloud_base", "cloud_top", "cfrac_max", "lwp", "zi", "zi_flux",
          "wthl_s", "wqt_s", "ustar", "uw_s", "vw_s")
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
            add("_lwp", xp.sum(ql * (dzf if rho is None else rho * dzf), axis=-1))
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
                    zero = xp.zeros_like(inner[..., :1])
                    add(f"_sgs{s}", concat(xp)([zero, inner, zero], axis=-1))
        for key, sk in _SURFACE.items():
            if sk in sfc:
                add(f"_sfc_{key}", sfc[sk])
        sums = horizontal_sums(ctx, arrays)
        ncol = float(g.nx * g.ny)
        m = {n: np.asarray(_host(s), dtype=np.float64) / ncol for n, s in zip(names, sums)}
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
        if "thv" in m and nz > 1:
            grad = np.diff(m["thv"]) / np.diff(zf)
            ts["zi"] = float(zh[1 + int(np.argmax(grad))])
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
    """A cell-centred field linearly interpolated to the ``w`` levels (zero on the walls)."""
    inner = (a[..., 1:] * dzf[:-1] + a[..., :-1] * dzf[1:]) / (2.0 * dzh[1:-1])
    zero = xp.zeros_like(inner[..., :1])
    return concat(xp)([zero, inner, zero], axis=-1)
