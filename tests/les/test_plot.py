"""plot_run on a synthetic run folder: real PNGs with content, and clear errors."""
import h5py
import numpy as np
import pytest

from hpcsuite.les.grid import Grid
from hpcsuite.les.statistics import Statistics
from hpcsuite.runtime import InputError, Team

pytest.importorskip("matplotlib")
from hpcsuite.les.plot import plot_run   # noqa: E402


def _synthetic_run(folder, with_xsec=True):
    grid = Grid.uniform(16, 16, 20, 1600.0, 1600.0, 2000.0)
    stats = Statistics(Team.world(), grid)
    if with_xsec:
        stats.rho_surface = 1.16           # surface fluxes in W/m^2 (without it: kinematic)
    zf, zh = grid.zf, grid.zh
    for i, t in enumerate(np.arange(0, 3 * 3600 + 1, 900.0)):
        ql = 1e-3 * np.exp(-((zf - 800) / 200) ** 2) * (0.5 + 0.1 * i)
        out = {"thl": 298 + 4e-3 * zf + 0.1 * i, "qt": 0.017 - 5e-6 * zf, "ql": ql, "thv": 300 + 4e-3 * zf,
               "u": -8 + 0 * zf, "v": 0 * zf, "cfrac": 0.08 * ql / ql.max(), "_cloudcol": [0.1],
               "_lwp": [ql.sum() * 100], "_w": 0 * zh, "_w2": 0.1 + 0 * zh,
               "_wthl": 0.01 * np.sin(np.pi * zh / 2000), "_thlh": 0 * zh,
               "_wqt": 1e-5 * np.cos(np.pi * zh / 4000), "_qth": 0 * zh,
               "_sfc_wthl_s": [0.008], "_sfc_ustar": [0.28]}
        if i == 0:
            stats._record(0.0, {k: np.asarray(v, dtype=float) for k, v in out.items()}, {}, initial=True)
        stats._record(float(t), {k: np.asarray(v, dtype=float) for k, v in out.items()}, {})
    stats.write(folder / "stats.h5")
    if with_xsec:
        x = (np.arange(64) + 0.5) * 100.0
        z = zf
        q = np.zeros((2, 64, 20))
        q[-1, 20:30, 8:14] = 1e-3
        with h5py.File(folder / "fields.h5", "w") as f:
            f["crosssection/xz/ql"] = q
            f["crosssection/xz/x"] = x
            f["crosssection/xz/z"] = z
            f["crosssection/xz/time"] = [1800.0, 3600.0]


def test_plot_run_writes_three_non_empty_pngs(tmp_path):
    import matplotlib.image as mpimg
    run = tmp_path / "run"
    run.mkdir()
    _synthetic_run(run)
    files = plot_run(run, tmp_path / "png")
    assert sorted(p.name for p in files) == ["crosssection.png", "profiles.png", "timeseries.png"]
    for p in files:
        raw = p.read_bytes()
        assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 10_000
        img = mpimg.imread(p)
        assert img.ndim == 3 and img.shape[0] > 300 and img[..., :3].std() > 0.05     # not blank
    assert not [p for p in (tmp_path / "png").iterdir() if p.name.startswith(".")]
    with h5py.File(run / "stats.h5", "r") as f:      # the initial state is its own group, not a sample
        assert f["initial"].attrs["time"] == 0.0 and f["timeseries/time"][0] == 0.0
        assert f["profiles/nsamples"][0] == 5 and f["timeseries/time"].size == 13 and "w2" not in f["initial"]


def test_plot_run_without_crosssection_and_errors(tmp_path):
    _synthetic_run(tmp_path, with_xsec=False)
    files = plot_run(tmp_path / "stats.h5", tmp_path / "out")
    assert sorted(p.name for p in files) == ["profiles.png", "timeseries.png"]
    with pytest.raises(InputError, match="no such run folder"):
        plot_run(tmp_path / "missing", tmp_path / "out")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no statistics file"):
        plot_run(empty, tmp_path / "out")


def test_profile_legend_has_hours_1_to_6_for_a_6_hour_run():
    """A 6-hour run sampled every minute: six curves "hours 0-1" ... "hours 5-6"; a statistics file
    written before the interval-end rule (an extra interval holding only the sample at 6 h) does
    not get a seventh curve."""
    from hpcsuite.les.plot import _profile_rows
    grid = Grid.uniform(4, 4, 3, 400.0, 400.0, 300.0)
    stats = Statistics(Team.world(), grid)
    for t in np.arange(60.0, 6 * 3600 + 1, 60.0):
        stats._record(float(t), {"thl": np.full(3, t)}, {})
    prof = stats.profiles()
    prof["_interval_h"] = 1.0
    rows, labels = _profile_rows(prof)
    assert rows == list(range(6)) and labels == [f"hours {h}-{h + 1}" for h in range(6)]
    old = {"hours": np.arange(1.0, 8.0), "nsamples": np.array([60] * 6 + [1]), "thl": np.zeros((7, 3))}
    rows, labels = _profile_rows(old)
    assert rows == list(range(6)) and labels[-1] == "hours 5-6"
    # a last interval that is merely short (a run ending at 5.5 h) is kept
    short = {"hours": np.arange(1.0, 7.0), "nsamples": np.array([60] * 5 + [30]), "thl": np.zeros((6, 3))}
    assert _profile_rows(short)[0] == list(range(6))


def test_timeseries_of_a_6_hour_bomex_run_shows_the_dales_reference_ranges():
    """Shaded hours 3-6 boxes at the reference ranges, only for a BOMEX run that reaches 6 h; the
    surface fluxes in W/m^2 when the surface density is known."""
    from hpcsuite.les.cases import BOMEX_REFERENCE
    from hpcsuite.les.plot import _timeseries_figure
    t = np.arange(0.0, 6 * 3600 + 1, 600.0)
    ts = {"time": t, "cloud_cover": 0.1 + 0 * t, "cfrac_max": 0.06 + 0 * t, "cloud_base": 500 + 0 * t,
          "cloud_top": 1600 + 0 * t, "zi": 1500 + 0 * t, "lwp": 5 + 0 * t, "wthl_s": 8e-3 + 0 * t,
          "wqt_s": 5.2e-5 + 0 * t, "ustar": 0.28 + 0 * t, "cloud_base_avg": 700 + 0 * t,
          "cloud_top_avg": 800 + 0 * t, "zi_dales": 1600 + 0 * t}

    def boxes(fig):
        return [(c.get_label(), c.get_paths()[0].get_extents().bounds) for ax in fig.axes for c in ax.collections]

    got = boxes(_timeseries_figure(ts, 1.16, bomex=True))
    # one box per BOMEX_REFERENCE series drawn (all six here), the legend entry once per panel
    assert len(got) == len(BOMEX_REFERENCE) == 6
    assert sum(lab == "DALES 3.2 reference range, hours 3-6" for lab, _ in got) == 3
    lo, hi = BOMEX_REFERENCE["lwp"][:2]
    assert any(np.allclose(b, (3.0, lo, 3.0, hi - lo)) for _, b in got)
    assert boxes(_timeseries_figure(ts, 1.16, bomex=False)) == []
    short = {k: v[t <= 5 * 3600] for k, v in ts.items()}
    assert boxes(_timeseries_figure(short, 1.16, bomex=True)) == []
    fig = _timeseries_figure(ts, 1.16)
    fluxes = {ln.get_label(): ln.get_ydata()[0] for ln in fig.axes[3].lines}
    assert fluxes["sensible"] == pytest.approx(1.16 * 1004.0 * 8e-3) and fluxes["latent"] == pytest.approx(1.16 * 2.53e6 * 5.2e-5)
    kinematic = {ln.get_label() for ln in _timeseries_figure(ts).axes[3].lines}
    assert kinematic == {r"$w'\theta_l'$ (K m/s)", r"$w'q_t'$ (kg/kg m/s)"}


def test_timeseries_of_a_bomex_run_overlays_the_dales_series_with_the_same_definition():
    """Each compared series gets the DALES 3.2 run's series dashed in its colour, up to the run's
    end, in our units (the LWP from kg/m^2 to g/m^2); a non-BOMEX run gets none."""
    from hpcsuite.les.cases import BOMEX_MATCH, dales_bomex_series
    from hpcsuite.les.plot import _timeseries_figure
    t = np.arange(0.0, 2 * 3600 + 1, 600.0)
    ts = {"time": t, "cloud_cover": 0.1 + 0 * t, "cloud_top": 1600 + 0 * t, "lwp": 5 + 0 * t,
          "cloud_base_avg": 700 + 0 * t, "cloud_top_avg": 800 + 0 * t, "zi_dales": 1600 + 0 * t}
    ref = dales_bomex_series()
    th = ref["time_s"] / 3600.0

    def dashed(fig):
        return [(ax, ln) for ax in fig.axes for ln in ax.lines if ln.get_linestyle() == "--"]
    fig = _timeseries_figure(ts, 1.16, bomex=True)
    assert len(dashed(fig)) == len(BOMEX_MATCH) == 6
    lwp_axes = next(ax for ax in fig.axes if "liquid water path" in [ln.get_label() for ln in ax.lines])
    ours = next(ln for ln in lwp_axes.lines if ln.get_label() == "liquid water path")
    lwp = [ln for ax, ln in dashed(fig) if ax is lwp_axes]
    assert len(lwp) == 1 and lwp[0].get_color() == ours.get_color()
    n = int(np.sum(th <= 2.0 + 1e-9))
    np.testing.assert_array_equal(lwp[0].get_xdata(), th[:n])
    np.testing.assert_array_equal(lwp[0].get_ydata(), 1e3 * ref["lwp_bar_kg_m2"][:n])
    assert dashed(_timeseries_figure(ts, 1.16, bomex=False)) == []


def test_timeseries_of_a_dry_run_shows_the_entrainment_level_and_says_what_is_missing():
    from hpcsuite.les.plot import _timeseries_figure
    t = np.arange(0.0, 3600 + 1, 600.0)
    dry = {"time": t, "cloud_cover": np.full_like(t, np.nan), "zi": 500 + 0.05 * t, "zi_flux": 450 + 0.05 * t,
           "wthl_s": 0.1 + 0 * t}
    fig = _timeseries_figure(dry)
    assert [ln.get_label() for ln in fig.axes[1].lines] == ["inversion (max dthv/dz)", "entrainment level (min w'thv')"]
    assert [tx.get_text() for tx in fig.axes[0].texts] == ["not in this run's statistics"]
    moist = dict(dry, cloud_cover=0.1 + 0 * t)            # with clouds the entrainment level is left out
    assert "entrainment level (min w'thv')" not in [ln.get_label() for ln in _timeseries_figure(moist).axes[1].lines]
