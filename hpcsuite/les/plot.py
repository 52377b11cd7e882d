"""Plots of an LES run: hourly mean profiles, time series and a cloud cross-section (PNG).

Reads the statistics file of :mod:`hpcsuite.les.statistics` and, when some HDF5 file of the run
holds it, the ``x``-``z`` cross-section of liquid water written by the model's output
(``crosssection/xz/ql`` with coordinates ``crosssection/xz/x`` and ``crosssection/xz/z``, or ``x``
and ``z`` at the file's root; a leading time axis is allowed: the last time is drawn).
Uses matplotlib's object API (no pyplot state; the Agg canvas), the ``plot`` extra. Local: call it
on one rank.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..runtime import InputError, optional

__all__ = ["plot_run", "find_files"]


def find_files(path) -> tuple[Path, Path | None]:
    """``(statistics file, cross-section file or None)`` for a run folder or a statistics file."""
    import h5py
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such run folder or statistics file")
    candidates = [path] if path.is_file() else sorted(path.rglob("*.h5")) + sorted(path.rglob("*.hdf5"))
    stats = xsec = None
    for c in candidates:
        try:
            with h5py.File(c, "r") as f:
                if stats is None and "timeseries" in f:
                    stats = c
                if xsec is None and "crosssection/xz/ql" in f:
                    xsec = c
        except OSError:
            continue
    if stats is None:
        raise InputError(f"{path}: no statistics file (an HDF5 file with a 'timeseries' group) found")
    return stats, xsec


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    return path


def _figure(**kw):
    return optional.require("matplotlib.figure", "plotting").Figure(**kw)


_PROFILE_PANELS = (  # (dataset, scale, x label, on faces): the panels of the intercomparison's figures
    ("thl", 1.0, r"$\theta_l$ (K)", False),
    ("qt", 1e3, r"$q_t$ (g/kg)", False),
    ("ql", 1e3, r"$q_l$ (g/kg)", False),
    ("cfrac", 1.0, "cloud fraction", False),
    ("u", 1.0, "u (m/s)", False),
    ("v", 1.0, "v (m/s)", False),
    ("thv", 1.0, r"$\theta_v$ (K)", False),
    ("e12", 1.0, r"subgrid $e^{1/2}$ (m/s)", False),
    ("w2", 1.0, r"$\overline{w'^2}$ (m$^2$/s$^2$)", True),
    ("wthl", 1.0, r"$\overline{w'\theta_l'}$ (K m/s)", True),
    ("wqt", 1e3, r"$\overline{w'q_t'}$ (g/kg m/s)", True),
    ("wthv", 1.0, r"$\overline{w'\theta_v'}$ (K m/s)", True),
)


def plot_run(path, outdir) -> list[Path]:
    """Draw ``profiles.png``, ``timeseries.png`` and (when available) ``crosssection.png``.

    Parameters
    ----------
    path : path-like
        A run folder (searched for the statistics and cross-section files) or a statistics file.
    outdir : path-like
        Folder for the PNGs (created); each is written atomically.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    InputError
        No run there, or matplotlib missing (one line naming the ``plot`` extra), before drawing.
    """
    import h5py
    optional.require("matplotlib.figure", "hpcsuite les plot")
    stats, xsec = find_files(path)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    with h5py.File(stats, "r") as f:
        zf = f["zf"][()] if "zf" in f else None
        zh = f["zh"][()] if "zh" in f else None
        prof = {k: f["profiles"][k][()] for k in f["profiles"]} if "profiles" in f else {}
        init = {k: f["initial"][k][()] for k in f["initial"]} if "initial" in f else {}
        if init:
            init["_time_h"] = float(f["initial"].attrs.get("time", 0.0)) / 3600.0
        if "interval" in f.attrs:
            prof["_interval_h"] = float(f.attrs["interval"]) / 3600.0
        ts = {k: f["timeseries"][k][()] for k in f["timeseries"]}
        rho_s = float(f.attrs["rho_surface"]) if "rho_surface" in f.attrs else None
        case = f.attrs.get("case", "")
        case = case.decode() if isinstance(case, bytes) else str(case)
    if prof and zf is not None:
        written.append(_profiles(prof, zf, zh, outdir / "profiles.png", init))
    written.append(_timeseries(ts, outdir / "timeseries.png", rho_s, bomex=case == "bomex"))
    if xsec is not None:
        written.append(_crosssection(xsec, outdir / "crosssection.png"))
    return written


def _profiles(prof, zf, zh, out: Path, init=None) -> Path:
    """One panel per profile, a curve per averaging interval (viridis, early to late), and the
    initial profile dashed where the statistics hold it."""
    init = init or {}
    panels = [p for p in _PROFILE_PANELS if p[0] in prof]
    ncol = 4
    nrow = max(1, -(-len(panels) // ncol))
    fig = _figure(figsize=(4 * ncol, 4.2 * nrow), layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    rows, labels = _profile_rows(prof)
    from matplotlib import colormaps
    cmap = colormaps["viridis"]
    for ax, (name, scale, label, faces) in zip(axes, panels):
        z = zh if faces else zf
        for j, (i, lab) in enumerate(zip(rows, labels)):
            ax.plot(prof[name][i] * scale, z, color=cmap(j / max(1, len(rows) - 1)), label=lab)
        if name in init and not faces:
            ax.plot(np.asarray(init[name]) * scale, zf, color="k", ls="--", lw=1,
                    label=f"initial (t = {init['_time_h']:.3g} h)")
        ax.set_xlabel(label)
        ax.set_ylabel("z (m)")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if panels:
        axes[0].legend(fontsize="small")
    fig.suptitle("Hourly mean profiles")
    return _save(fig, out)


def _profile_rows(prof) -> tuple[list[int], list[str]]:
    """The rows of the interval-averaged profiles to draw and their legend labels ("hours 5-6").

    A sample exactly at an interval's end belongs to the interval it ends
    (:mod:`hpcsuite.les.statistics`); a statistics file written before that rule holds, after the
    last full hour, an extra interval with only the final sample (a 6-hour run showed an "hour
    7"). Such a trailing fragment -- under a quarter of the samples of the interval before it --
    is not drawn.
    """
    if "hours" in prof:
        hours = np.asarray(prof["hours"], dtype=float)
    else:
        data = [v for k, v in prof.items() if k not in ("nsamples", "_interval_h")]
        hours = np.arange(1.0, 1.0 + (len(data[0]) if data else 0))
    rows = list(range(len(hours)))
    ns = prof.get("nsamples")
    if ns is not None and len(rows) > 1 and ns[-1] * 4 < ns[-2]:
        rows.pop()
    width = float(prof.get("_interval_h", 1.0))
    return rows, [f"hours {max(0.0, hours[i] - width):g}-{hours[i]:g}" for i in rows]


def _timeseries(ts, out: Path, rho_s: float | None = None, bomex: bool = False) -> Path:
    return _save(_timeseries_figure(ts, rho_s, bomex), out)


def _timeseries_figure(ts, rho_s: float | None = None, bomex: bool = False):
    """Cloud cover, cloud heights, LWP and the surface fluxes; the fluxes in W/m^2 when the
    surface density is known (else kinematic), the friction velocity on its own axis. A BOMEX run
    that reaches 6 h also gets the accepted hours 3-6 ranges around the DALES 3.2 reference run
    (:data:`hpcsuite.les.cases.BOMEX_REFERENCE`) as shaded boxes."""
    from .cases import BOMEX_REFERENCE
    from .constants import CP, LV
    t = np.asarray(ts.get("time", []), dtype=float) / 3600.0
    ts = dict(ts)
    if rho_s is not None:
        fluxes = ("surface heat flux (W/m$^2$)", [("_shf", "sensible"), ("_lhf", "latent")])
        for key, src, c in (("_shf", "wthl_s", rho_s * CP), ("_lhf", "wqt_s", rho_s * LV)):
            if src in ts:
                ts[key] = c * np.asarray(ts[src], dtype=float)
    else:
        fluxes = ("surface flux (kinematic)", [("wthl_s", r"$w'\theta_l'$ (K m/s)"),
                                               ("wqt_s", r"$w'q_t'$ (kg/kg m/s)")])
    groups = [("cloud cover", [("cloud_cover", "cover"), ("cfrac_max", "max. cloud fraction")]),
              ("height (m)", [("cloud_base", "cloud base"), ("cloud_top", "cloud top"),
                              ("zi", "inversion (max dthv/dz)"),
                              # DALES modtimestat's definitions (hpcsuite.les.statistics)
                              ("cloud_base_avg", "mean cloud base, cloudy columns"),
                              ("cloud_top_avg", "mean cloud top, cloudy columns"),
                              ("zi_dales", "inversion (DALES)")]
               # dry runs: also the entrainment level (in a cumulus layer it jumps between levels)
               + ([] if np.any(np.isfinite(ts.get("cloud_cover", np.nan))) else
                  [("zi_flux", "entrainment level (min w'thv')")])),
              ("LWP (g/m$^2$)", [("lwp", "liquid water path")]),
              fluxes]
    fig = _figure(figsize=(12, 7), layout="constrained")
    axes = fig.subplots(2, 2).ravel()

    drawn = {}                               # series key -> (axes, line colour)

    def draw(ax, series, **kw):
        for key, label in series:
            if key in ts and np.size(ts[key]) == t.size and np.any(np.isfinite(ts[key])):
                line, = ax.plot(t, ts[key], label=label, **kw)
                drawn[key] = (ax, line.get_color())

    for ax, (ylabel, series) in zip(axes, groups):
        draw(ax, series)
        ax.set_xlabel("time (h)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if not ax.lines:                     # e.g. the cloud panels of a dry run
            ax.text(0.5, 0.5, "not in this run's statistics", transform=ax.transAxes, ha="center",
                    va="center", color="0.4")
    if bomex and t.size:
        _draw_dales(drawn, t.max())
    if bomex and t.size and t.max() >= 6.0 - 1e-9:
        labelled = set()
        for key, (lo, hi, _unit, _what) in BOMEX_REFERENCE.items():
            if key in drawn:
                ax, colour = drawn[key]
                ax.fill_between([3.0, 6.0], lo, hi, color=colour, alpha=0.12, lw=0,
                                label=None if ax in labelled else "DALES 3.2 reference range, hours 3-6")
                labelled.add(ax)
    axes[3].set_ylim(bottom=min(0.0, axes[3].get_ylim()[0]))
    right = axes[3].twinx()                  # u* (m/s) is not a flux: its own axis
    draw(right, [("ustar", "u* (m/s), right axis")], color="0.4", ls=":")
    right.set_ylabel("u* (m/s)")
    if right.lines:
        right.set_ylim(bottom=0.0, top=max(right.get_ylim()[1], 1.2 * float(np.nanmax(ts["ustar"]))))
    for ax in axes:
        handles = ax.get_legend_handles_labels()
        if ax is axes[3]:
            handles = [a + b for a, b in zip(handles, right.get_legend_handles_labels())]
        if handles[0]:
            ax.legend(*handles, fontsize="small")
    fig.suptitle("Time series")
    return fig


def _draw_dales(drawn: dict, t_end_h: float) -> None:
    """The DALES 3.2 BOMEX reference run's series (:func:`hpcsuite.les.cases.dales_bomex_series`)
    up to this run's end, dashed in the colour of our series with the same definition, so that a
    reader sees the two runs side by side rather than only the hours 3-6 boxes."""
    from .cases import BOMEX_MATCH, dales_bomex_series
    try:
        ref = dales_bomex_series()
    except InputError:                       # a trimmed install without the data file: no overlay
        return
    th = np.asarray(ref["time_s"], dtype=float) / 3600.0
    keep = th <= t_end_h + 1e-9
    labelled = set()
    for key, (col, factor, *_rest) in BOMEX_MATCH.items():
        if key in drawn and col in ref:
            ax, colour = drawn[key]
            ax.plot(th[keep], factor * np.asarray(ref[col], dtype=float)[keep], color=colour, ls="--",
                    lw=0.9, alpha=0.8, label=None if ax in labelled else "dashed: DALES 3.2 run, same definition")
            labelled.add(ax)


def _crosssection(path: Path, out: Path) -> Path:
    import h5py
    with h5py.File(path, "r") as f:
        g = f["crosssection/xz"]
        ql = g["ql"][()]
        x = g["x"][()] if "x" in g else f["x"][()]
        z = g["z"][()] if "z" in g else f["z"][()]
        tt = g["time"][()] if "time" in g else None
        yy = g["y"][()] if "y" in g else None           # the row the section goes through
    if ql.ndim == 3:
        ql = ql[-1]
        tt = None if tt is None else np.ravel(tt)[-1]
    yy = None if yy is None or np.size(yy) == 0 else float(np.ravel(yy)[-1])
    if ql.shape == (z.size, x.size) and ql.shape != (x.size, z.size):
        ql = ql.T
    if ql.shape != (x.size, z.size):
        raise InputError(f"{path}: crosssection/xz/ql has shape {ql.shape}, not (x, z) = ({x.size}, {z.size})")
    fig = _figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.subplots()
    qmax = max(float(np.nanmax(ql)) * 1e3, 1e-6)
    m = ax.pcolormesh(x / 1e3, z, ql.T * 1e3, cmap="Blues", vmin=0.0, vmax=qmax, shading="auto")
    fig.colorbar(m, ax=ax, label=r"$q_l$ (g/kg)")
    ax.set_xlabel("x (km)")
    ax.set_ylabel("z (m)")
    where = ([] if yy is None else [f"y = {yy / 1e3:.3g} km"]) + ([] if tt is None else [f"t = {float(tt) / 3600:.2f} h"])
    ax.set_title("Cloud liquid water, x-z cross-section" + (f" at {', '.join(where)}" if where else ""))
    return _save(fig, out)
