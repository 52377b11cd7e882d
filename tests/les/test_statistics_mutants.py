"""les.statistics on the cases the main test (test_statistics.py) does not reach, each against NumPy
on the global fields or a loop-by-loop reference: dry runs (thv = thl), moist runs without a base
state (ql from the diagnostics, LWP without density), no cloud at all, every profile and flux with
the surface fluxes on face 0, the Galilean shift, the initial state, intervals without a profile,
grids of one and two levels, DALES's inversion height over groups of any shape, and the HDF5 file
(attributes, groups, an unwritable path). Written to kill the mutants that scripts/mutation.sh
found surviving (issue 21 item 5)."""
import math
import re

import h5py
import numpy as np
import pytest

from physctx import local_block, make_ctx
from hpcsuite.les import statistics as lst
from hpcsuite.les import thermo
from hpcsuite.les.grid import Grid
from hpcsuite.les.statistics import CELL_PROFILES, FACE_PROFILES, SERIES, Statistics, zi_dales

NX, NY, NZ = 9, 6, 7          # (9: at least the halo width, 3 cells, per rank at 1-4 ranks)


def _grid(nz=NZ):
    return Grid.stretched(NX, NY, 900.0, 600.0, np.concatenate([[0.0], np.cumsum(np.linspace(50, 110, nz))]))


def _fluxes(grid, s, w, ekh, sfc):
    """Resolved and subgrid flux of the global scalar ``s`` on the faces, written out face by face
    (the scalar interpolated linearly in z to the w levels; K interpolated alike)."""
    nz = s.shape[-1]
    zf, zh = np.asarray(grid.zf), np.asarray(grid.zh)
    dzf, dzh = np.diff(zh), np.concatenate(([zf[0]], np.diff(zf), [zh[-1] - zf[-1]]))
    res, sgs = np.zeros(nz + 1), np.zeros(nz + 1)
    for k in range(1, nz):
        sh = (s[..., k] * dzf[k - 1] + s[..., k - 1] * dzf[k]) / (2 * dzh[k])
        res[k] = np.mean((w[..., k] - w[..., k].mean()) * (sh - sh.mean()))
        if ekh is not None:
            K = (dzf[k] * ekh[..., k - 1] + dzf[k - 1] * ekh[..., k]) / (2 * dzh[k])
            sgs[k] = np.mean(-K * (s[..., k] - s[..., k - 1]) / dzh[k])
    sgs[0] = sfc
    return res, sgs


def _zi_gradient(thv_mean, grid):
    zf, zh = np.asarray(grid.zf), np.asarray(grid.zh)
    g = [(thv_mean[k] - thv_mean[k - 1]) / (zf[k] - zf[k - 1]) for k in range(1, len(zf))]
    return zh[1 + int(np.argmax(g))]


def _surface(rng):
    return {n: rng.normal(m, 0.1, (NX, NY)) for n, m in (("wthl", 0.05), ("wqt", 4e-5), ("ustar", 0.3),
                                                         ("uw", -0.02), ("vw", 0.01))}


def _sfc_blocks(ctx, sfc):
    return {n: local_block(ctx.grid, a) for n, a in sfc.items()}


@pytest.mark.parametrize("bad", [0.0, -60.0, math.nan])
def test_interval_must_be_positive(team, bad):
    with pytest.raises(ValueError, match=r"^Statistics: interval must be > 0, got " + str(bad) + "$"):
        Statistics(team, _grid(), interval=bad)
    assert Statistics(team, _grid(), interval=0.5).interval == 0.5       # any positive interval
    s = Statistics(team, _grid(), interval=90)
    assert s.interval == 90.0 and isinstance(s.interval, float)
    assert s.time == [] and s.series == {k: [] for k in SERIES} and s.initial is None and s.rho_surface is None
    assert s.profiles()["hours"].size == 0 and s.timeseries()["time"].size == 0


@pytest.mark.mpi
@pytest.mark.parametrize("with_base", [False, True], ids=["no-base-state", "base-state"])
def test_dry_run_fluxes_profiles_and_surface_series(team, with_base):
    """No qt: thv is thl, no cloud series; w2, the resolved and subgrid fluxes with the surface flux
    on face 0 (thv's is the surface thl flux, a dry estimate), the five surface series, the Galilean
    shift added back to u and v."""
    grid = _grid()
    rng = np.random.default_rng(11)
    zc = np.asarray(grid.zf)
    thl = 300.0 + 3e-3 * zc + 2.0 * (zc > 250) + 0.3 * rng.standard_normal((NX, NY, NZ))
    w = rng.standard_normal((NX, NY, NZ + 1)) * 0.7
    w[..., [0, -1]] = 0.0
    u, v = 3 + rng.standard_normal((NX, NY, NZ)), -1 + rng.standard_normal((NX, NY, NZ))
    ekh = 2 + rng.random((NX, NY, NZ))
    sfc = _surface(rng)
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), np.zeros(NZ)) if with_base else None
    ctx = make_ctx(team, grid, dict(thl=thl, u=u, v=v, w=w), base=base)
    ctx.t = 42.0
    ctx.galilean = (5.0, -2.5)
    ctx.diag["ekh"] = local_block(ctx.grid, ekh)
    ctx.diag["surface"] = _sfc_blocks(ctx, sfc)
    ctx.diag["ql"] = local_block(ctx.grid, np.full((NX, NY, NZ), 1e-3))   # left over: not this run's
    stats = Statistics(team, grid, interval=60.0)
    got = stats.sample(ctx)
    np.testing.assert_allclose(got["thl"], thl.mean(axis=(0, 1)), rtol=1e-13)
    np.testing.assert_allclose(got["thv"], thl.mean(axis=(0, 1)), rtol=1e-13)
    np.testing.assert_allclose(got["u"], u.mean(axis=(0, 1)) + 5.0, rtol=1e-12)
    np.testing.assert_allclose(got["v"], v.mean(axis=(0, 1)) - 2.5, rtol=1e-12)
    np.testing.assert_allclose(got["w2"], w.var(axis=(0, 1)), rtol=1e-11, atol=1e-15)
    for s in ("thl", "thv"):
        res, sgs = _fluxes(grid, thl, w, ekh, sfc["wthl"].mean())
        np.testing.assert_allclose(got[f"w{s}_res"], res, rtol=1e-9, atol=1e-13, err_msg=s)
        np.testing.assert_allclose(got[f"w{s}_sgs"], sgs, rtol=1e-12, atol=1e-15, err_msg=s)
        np.testing.assert_allclose(got[f"w{s}"], res + sgs, rtol=1e-9, atol=1e-13, err_msg=s)
    assert "wqt" not in got and "ql" not in got and "cfrac" not in got and "qt" not in got
    for key, name in (("wthl_s", "wthl"), ("wqt_s", "wqt"), ("ustar", "ustar"), ("uw_s", "uw"), ("vw_s", "vw")):
        assert got[key] == pytest.approx(sfc[name].mean(), rel=1e-12), key
    for key in ("cloud_cover", "cloud_base", "cloud_top", "cfrac_max", "lwp", "lwp_max", "cloud_base_avg",
                "cloud_top_avg"):
        assert math.isnan(got[key]), key
    assert got["zi"] == _zi_gradient(thl.mean(axis=(0, 1)), grid)
    wthv = got["wthv"]
    assert got["zi_flux"] == np.asarray(grid.zh)[1 + int(np.argmin(wthv[1:-1]))]
    assert not math.isnan(got["zi_dales"])
    assert stats.rho_surface is None and stats.time == [42.0]
    ts = stats.timeseries()
    assert set(ts) == {"time", *SERIES} and all(ts[k].dtype == np.float64 and ts[k].shape == (1,) for k in ts)
    assert ts["time"][0] == 42.0 and ts["ustar"][0] == got["ustar"]
    # a context without a time or a Galilean shift: time 0, the winds as they are
    del ctx.t, ctx.galilean
    again = stats.sample(ctx)
    assert stats.time == [42.0, 0.0]
    np.testing.assert_allclose(again["u"], u.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(again["v"], v.mean(axis=(0, 1)), rtol=1e-12)
    ctx.store.free()


@pytest.mark.mpi
def test_moist_run_without_a_base_state_and_without_subgrid_diffusivity(team):
    """qt but no base state: ql comes from the diagnostics, thv is thl, the LWP is the column
    integral of ql dz (no density); without ekh the subgrid flux is the surface flux alone."""
    grid = _grid()
    rng = np.random.default_rng(3)
    thl = 299.0 + 0.2 * rng.standard_normal((NX, NY, NZ))
    qt = 0.01 + 1e-4 * rng.standard_normal((NX, NY, NZ))
    ql = np.zeros((NX, NY, NZ))
    ql[1, 2, 2:5] = 1e-3
    ql[5, 0, 3] = 2e-3
    ql[6, 5, 4:6] = [5e-4, 1e-4]
    w = rng.standard_normal((NX, NY, NZ + 1))
    w[..., [0, -1]] = 0.0
    sfc = {"wthl": rng.normal(0.05, 0.01, (NX, NY))}          # no surface moisture flux given
    ctx = make_ctx(team, grid, dict(thl=thl, qt=qt, w=w))
    ctx.diag["ql"] = local_block(ctx.grid, ql)
    ctx.diag["surface"] = _sfc_blocks(ctx, sfc)
    stats = Statistics(team, grid)
    got = stats.sample(ctx)
    zf, dzf = np.asarray(grid.zf), np.diff(np.asarray(grid.zh))
    cloudy = ql > 0
    np.testing.assert_allclose(got["ql"], ql.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(got["cfrac"], cloudy.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(got["qt"], qt.mean(axis=(0, 1)), rtol=1e-13)
    np.testing.assert_allclose(got["thv"], thl.mean(axis=(0, 1)), rtol=1e-13)
    assert got["cloud_cover"] == pytest.approx(3 / (NX * NY), rel=1e-12)
    assert got["cfrac_max"] == pytest.approx(cloudy.mean(axis=(0, 1)).max(), rel=1e-12)
    assert (got["cloud_base"], got["cloud_top"]) == (zf[2], zf[5])
    assert got["cloud_base_avg"] == pytest.approx((zf[2] + zf[3] + zf[4]) / 3, rel=1e-12)
    assert got["cloud_top_avg"] == pytest.approx((zf[4] + zf[3] + zf[5]) / 3, rel=1e-12)
    lwp_cols = (ql * dzf).sum(axis=2)
    assert got["lwp"] == pytest.approx(1e3 * lwp_cols.mean(), rel=1e-12)
    assert got["lwp_max"] == pytest.approx(1e3 * lwp_cols.max(), rel=1e-12)
    for s, sf in (("thl", sfc["wthl"].mean()), ("qt", 0.0), ("thv", sfc["wthl"].mean())):
        res, sgs = _fluxes(grid, qt if s == "qt" else thl, w, None, sf)
        np.testing.assert_allclose(got[f"w{s}_sgs"], sgs, rtol=1e-12, atol=0, err_msg=s)
        np.testing.assert_allclose(got[f"w{s}_res"], res, rtol=1e-9, atol=1e-14, err_msg=s)
    assert math.isnan(got["wqt_s"]) and math.isnan(got["ustar"]) and got["wqt_sgs"][0] == 0.0
    assert stats.rho_surface is None
    ctx.store.free()


@pytest.mark.mpi
def test_every_profile_of_a_moist_run_with_a_base_state(team):
    """With the base state: ql and thv from the thermodynamics, the covariances of all three
    scalars (thl and thv relative to the reference profile, which leaves a covariance unchanged),
    qt's and thv's subgrid fluxes with their surface values, w2, e12, and the base density of the
    first level kept from the first sample."""
    grid = _grid()
    rng = np.random.default_rng(8)
    zc = np.asarray(grid.zf)
    thl = 298.5 + 4e-3 * zc + 0.2 * rng.standard_normal((NX, NY, NZ))
    qt = 0.016 - 3e-6 * zc + 2e-4 * rng.standard_normal((NX, NY, NZ))
    qt[rng.random((NX, NY)) < 0.4, 3:5] += 0.006
    w = rng.standard_normal((NX, NY, NZ + 1)) * 0.5
    w[..., [0, -1]] = 0.0
    e12 = 0.2 + rng.random((NX, NY, NZ))
    ekh = 4 + rng.random((NX, NY, NZ))
    sfc = _surface(rng)
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    ctx = make_ctx(team, grid, dict(thl=thl, qt=qt, w=w, e12=e12), base=base)
    ctx.diag["ekh"] = local_block(ctx.grid, ekh)
    ctx.diag["surface"] = _sfc_blocks(ctx, sfc)
    stats = Statistics(team, grid)
    got = stats.sample(ctx)
    ql, _ = thermo.saturation_adjust(np, thl, qt, np.asarray(base.presf), np.asarray(base.exnf))
    thv = thermo.virtual_theta(thl, qt, ql, np.asarray(base.exnf))
    assert ql.max() > 0
    for name, a in (("thv", thv), ("e12", e12), ("ql", ql), ("qt", qt)):
        np.testing.assert_allclose(got[name], a.mean(axis=(0, 1)), rtol=1e-12, atol=1e-18, err_msg=name)
    np.testing.assert_allclose(got["w2"], w.var(axis=(0, 1)), rtol=1e-11, atol=1e-15)
    for s, a, sf in (("qt", qt, sfc["wqt"].mean()), ("thv", thv, sfc["wthl"].mean()),
                     ("thl", thl, sfc["wthl"].mean())):
        res, sgs = _fluxes(grid, a, w, ekh, sf)
        scale = np.abs(res).max()
        np.testing.assert_allclose(got[f"w{s}_res"], res, rtol=1e-8, atol=1e-10 * scale, err_msg=s)
        np.testing.assert_allclose(got[f"w{s}_sgs"], sgs, rtol=1e-11, atol=1e-20, err_msg=s)
        np.testing.assert_allclose(got[f"w{s}"], res + sgs, rtol=1e-8, atol=1e-10 * scale, err_msg=s)
    assert stats.rho_surface == float(np.asarray(base.rhof)[0])
    # a second sample with another base state keeps the first one's surface density
    base2 = thermo.base_state(grid, 90000.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    ctx.base = base2
    stats.sample(ctx)
    assert stats.rho_surface == float(np.asarray(base.rhof)[0]) != float(np.asarray(base2.rhof)[0])
    ctx.store.free()


@pytest.mark.mpi
def test_fluxes_stay_accurate_for_small_fluctuations(team):
    """Fluctuations of 1e-6 K and 1e-8 kg/kg on 300 K and 0.01 kg/kg: the resolved fluxes (w * s
    less <w> <s>) keep their digits, because thl and thv are taken relative to the reference profile
    and qt as it is (the module's note on cancellation)."""
    grid = _grid()
    rng = np.random.default_rng(21)
    zc = np.asarray(grid.zf)
    thl = 300.0 + 3e-3 * zc + 1e-6 * rng.standard_normal((NX, NY, NZ))
    qt = 0.004 + 1e-8 * rng.standard_normal((NX, NY, NZ))     # dry enough: no cloud anywhere
    w = rng.standard_normal((NX, NY, NZ + 1)) + 2.0
    w[..., [0, -1]] = 0.0
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    ctx = make_ctx(team, grid, dict(thl=thl, qt=qt, w=w), base=base)
    got = Statistics(team, grid).sample(ctx)
    ql, _ = thermo.saturation_adjust(np, thl, qt, np.asarray(base.presf), np.asarray(base.exnf))
    assert ql.max() == 0.0
    thv = thermo.virtual_theta(thl, qt, ql, np.asarray(base.exnf))
    for s, a in (("thl", thl), ("qt", qt), ("thv", thv)):
        # the reference from the fluctuations about the slab mean (an exact subtraction; a
        # covariance does not change with a horizontally constant profile)
        res, _ = _fluxes(grid, a - a.mean(axis=(0, 1)), w, None, 0.0)
        # measured errors: 1e-15 (thl), 1e-17 (qt), 1e-22 (thv); with 300 K left in any of
        # them they grow to 3e-13, against fluxes of 1e-8 (thl), 1e-11 (qt)
        np.testing.assert_allclose(got[f"w{s}_res"][1:-1], res[1:-1], rtol=0, atol=1e-14, err_msg=s)
    ctx.store.free()


@pytest.mark.mpi
def test_a_clear_moist_sample_has_no_cloud_heights(team):
    grid = _grid()
    thl = np.full((NX, NY, NZ), 300.0) + 3e-3 * np.asarray(grid.zf)
    qt = np.full((NX, NY, NZ), 1e-3)                       # far from saturation
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    ctx = make_ctx(team, grid, dict(thl=thl, qt=qt), base=base)
    got = Statistics(team, grid).sample(ctx)
    assert (got["cloud_cover"], got["cfrac_max"], got["lwp"], got["lwp_max"]) == (0.0, 0.0, 0.0, 0.0)
    for key in ("cloud_base", "cloud_top", "cloud_base_avg", "cloud_top_avg", "zi_flux"):
        assert math.isnan(got[key]), key
    assert np.all(got["cfrac"] == 0.0) and np.all(got["ql"] == 0.0)
    ctx.store.free()


@pytest.mark.mpi
def test_initial_state_intervals_and_missing_profiles(team):
    """``initial=True`` records the cell profiles only (no series, no interval); without it the
    first sample is the initial state; an interval whose samples lack a profile has NaN there."""
    grid = _grid()
    rng = np.random.default_rng(2)
    thl0 = 300.0 + rng.standard_normal((NX, NY, NZ))
    w = rng.standard_normal((NX, NY, NZ + 1))
    ctx = make_ctx(team, grid, dict(thl=thl0, w=w))
    stats = Statistics(team, grid, interval=60.0)
    ctx.t = 0.0
    first = stats.sample(ctx, initial=True)
    assert set(first) == {"thl", "thv"} and stats.time == [] and stats.profiles()["hours"].size == 0
    assert stats.initial["time"] == 0.0
    np.testing.assert_allclose(stats.initial["thl"], thl0.mean(axis=(0, 1)), rtol=1e-13)
    ctx.fields["thl"][...] += 1.0
    ctx.t = 30.0
    got = stats.sample(ctx)
    assert "w2" in got and "zi" in got and stats.time == [30.0]
    assert stats.initial["time"] == 0.0                                  # not replaced
    np.testing.assert_allclose(stats.initial["thl"], thl0.mean(axis=(0, 1)), rtol=1e-13)
    ctx2 = make_ctx(team, grid, dict(thl=thl0 + 2.0))                 # no w: no face profiles
    ctx2.t = 100.0
    stats.sample(ctx2)
    prof = stats.profiles()
    np.testing.assert_allclose(prof["hours"], [60 / 3600, 120 / 3600], rtol=1e-15)
    np.testing.assert_array_equal(prof["nsamples"], [1, 1])
    assert prof["w2"].shape == (2, NZ + 1) and prof["thl"].shape == (2, NZ)
    np.testing.assert_allclose(prof["w2"][0], w.var(axis=(0, 1)), rtol=1e-11)
    assert np.all(np.isnan(prof["w2"][1])) and np.all(np.isnan(prof["wthl"][1]))
    np.testing.assert_allclose(prof["thl"][:, 0], thl0.mean(axis=(0, 1))[0] + [1.0, 2.0], rtol=1e-13)
    assert not any(n in prof for n in ("qt", "ql", "cfrac", "u", "wqt"))
    # the first sample without initial=True stands for the initial state
    other = Statistics(team, grid)
    ctx2.t = 5.0
    other.sample(ctx2)
    assert other.initial["time"] == 5.0 and other.time == [5.0]
    ctx2.t = 10.0
    other.sample(ctx2)
    assert other.initial["time"] == 5.0 and set(other.initial) == {"time", "thl", "thv"}
    # a state restored from an older version that lacked a series: NaN for the samples before
    del other.series["zi_dales"]
    other.sample(ctx2)
    assert len(other.series["zi_dales"]) == 3 and np.isnan(other.series["zi_dales"][:2]).all()
    assert not np.isnan(other.series["zi_dales"][2])
    ctx.store.free()
    ctx2.store.free()


@pytest.mark.mpi
@pytest.mark.parametrize("nz", [1, 2])
def test_grids_of_one_and_two_levels(team, nz):
    grid = _grid(nz)
    rng = np.random.default_rng(nz)
    thl = 300.0 + rng.standard_normal((NX, NY, nz))
    w = rng.standard_normal((NX, NY, nz + 1))
    w[..., [0, -1]] = 0.0
    ctx = make_ctx(team, grid, dict(thl=thl, w=w))
    got = Statistics(team, grid).sample(ctx)
    zh = np.asarray(grid.zh)
    if nz == 1:
        assert math.isnan(got["zi"]) and math.isnan(got["zi_flux"]) and math.isnan(got["zi_dales"])
    else:
        assert got["zi"] == zh[1] and got["zi_flux"] == zh[1]
        # two levels: one face gradient; DALES's refinement has no cell with a gradient derivative
        assert got["zi_dales"] == pytest.approx(_zi_dales_ref(thl, grid), rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(got["thl"], thl.mean(axis=(0, 1)), rtol=1e-13)
    ctx.store.free()


@pytest.mark.mpi
@pytest.mark.parametrize("walls", ["w-zero-at-walls", "w-random-at-walls"])
@pytest.mark.parametrize("nz", [1, 2])
def test_face_profiles_of_one_and_two_levels(team, nz, walls):
    """Every face profile (nz + 1 levels) of a moist run with a base state, subgrid diffusivity and
    surface fluxes on one and two levels, against NumPy on the global fields. One level has no inner
    face: both faces are walls, where the model keeps w zero (rk_update's zero_ends for w in
    les.model, projection_rhs zeroes w's tendency there), so the resolved fluxes are zero and the
    subgrid flux is the surface flux on face 0 and zero at the lid (issue 21: the one-level profiles
    had 0 levels and ``w * s`` raised). With w not zero on the walls (not the model's state) w2 is
    still its variance and the scalar on the walls still zero."""
    grid = _grid(nz)
    rng = np.random.default_rng(40 + nz)
    zc = np.asarray(grid.zf)
    thl = 298.5 + 4e-3 * zc + 0.2 * rng.standard_normal((NX, NY, nz))
    qt = 0.016 + 2e-4 * rng.standard_normal((NX, NY, nz))
    qt[rng.random((NX, NY)) < 0.4, -1] += 0.006                      # some cloud in the top level
    w = 0.5 * rng.standard_normal((NX, NY, nz + 1))
    if walls == "w-zero-at-walls":
        w[..., [0, -1]] = 0.0
    ekh = 4 + rng.random((NX, NY, nz))
    sfc = _surface(rng)
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    ctx = make_ctx(team, grid, dict(thl=thl, qt=qt, w=w), base=base)
    ctx.diag["ekh"] = local_block(ctx.grid, ekh)
    ctx.diag["surface"] = _sfc_blocks(ctx, sfc)
    try:
        stats = Statistics(team, grid)
        got = stats.sample(ctx)
    finally:
        ctx.store.free()
    ql, _ = thermo.saturation_adjust(np, thl, qt, np.asarray(base.presf), np.asarray(base.exnf))
    thv = thermo.virtual_theta(thl, qt, ql, np.asarray(base.exnf))
    assert ql.max() > 0
    assert got["w2"].shape == (nz + 1,)
    np.testing.assert_allclose(got["w2"], w.var(axis=(0, 1)), rtol=1e-11, atol=1e-15)
    for s, a, sf in (("thl", thl, sfc["wthl"].mean()), ("qt", qt, sfc["wqt"].mean()),
                     ("thv", thv, sfc["wthl"].mean())):
        res, sgs = _fluxes(grid, a, w, ekh, sf)
        for part, want in (("_res", res), ("_sgs", sgs), ("", res + sgs)):
            assert got[f"w{s}{part}"].shape == (nz + 1,), s + part
            # (tolerances as in the other flux tests: measured errors 1e-13 of the largest flux)
            np.testing.assert_allclose(got[f"w{s}{part}"], want, rtol=1e-8, atol=1e-10 * np.abs(want).max(),
                                       err_msg=s + part)
        assert got[f"w{s}_res"][0] == got[f"w{s}_res"][-1] == 0.0 and got[f"w{s}_sgs"][-1] == 0.0
    zh = np.asarray(grid.zh)
    if nz == 1:
        assert math.isnan(got["zi_flux"]) and math.isnan(got["zi"]) and math.isnan(got["zi_dales"])
    else:
        assert got["zi_flux"] == zh[1] and got["zi"] == zh[1]
    prof = stats.profiles()
    assert all(prof[n].shape == (1, nz + 1) for n in FACE_PROFILES)
    np.testing.assert_array_equal(prof["wthl"][0], got["wthl"])


def _zi_column(prof, zf, zh):
    """DALES's gradient method for one (group-summed) profile, Fortran-style with 1-based k."""
    kmax = len(prof)
    P = {k: prof[k - 1] for k in range(1, kmax + 1)}
    ZF = {k: zf[k - 1] for k in range(1, kmax + 1)}
    ZH = {k: zh[k - 1] for k in range(1, kmax + 2)}
    dzf = {k: ZH[k + 1] - ZH[k] for k in range(1, kmax + 1)}
    dzh = {k: ZF[k] - ZF[k - 1] for k in range(2, kmax + 1)}
    dzh[1] = ZF[1]
    grad = {k: 0.0 for k in range(1, kmax + 1)}
    for k in range(2, kmax + 1):
        grad[k] = (P[k] - P[k - 1]) / dzh[k]
    dgrad = {k: 0.0 for k in range(1, kmax + 1)}
    for k in range(2, kmax):
        dgrad[k] = (grad[k + 1] - grad[k]) / dzf[k]
    loc = 1
    for k in range(2, kmax + 1):                 # maxloc: the first largest
        if grad[k] > grad[loc]:
            loc = k
    if loc == 1:
        return 0.0
    lm1 = max(loc - 1, 1)
    return ZH[lm1] - dzh[loc] * dgrad[lm1] / (dgrad[loc] - dgrad[lm1] + 1e-8)


def _zi_dales_ref(thv, grid, nsamp=4):
    nx, ny, _ = thv.shape
    zf, zh = np.asarray(grid.zf), np.asarray(grid.zh)
    stride = -(-nx // nsamp)
    total = 0.0
    for i0 in range(stride):
        members = list(range(i0, nx, stride))
        for j in range(ny):
            total += len(members) * _zi_column(thv[members, j, :].sum(axis=0), zf, zh)
    return total / (nx * ny)


def test_dales_inversion_height_over_groups_of_any_shape():
    """zi_dales against the loop reference on a stretched grid: one group, groups in a (3, 2)
    array with broadcast counts, a group without a positive gradient counted as 0 in the mean."""
    grid = _grid(9)
    zf, zh = np.asarray(grid.zf), np.asarray(grid.zh)
    rng = np.random.default_rng(4)
    profs = 300 + np.cumsum(rng.random((3, 2, 9)), axis=-1) + 3.0 * (zf > 400)
    counts = np.array([[3.0], [2.0], [2.0]])
    ref = [[_zi_column(profs[i, j], zf, zh) for j in range(2)] for i in range(3)]
    assert all(r > 0 for row in ref for r in row)
    assert zi_dales(profs[0, :1], [1.0], zf, zh) == pytest.approx(ref[0][0], rel=1e-12)
    want = sum(counts[i, 0] * ref[i][j] for i in range(3) for j in range(2)) / (2 * counts.sum())
    assert zi_dales(profs, counts, zf, zh) == pytest.approx(want, rel=1e-12)
    falling = 300 - np.cumsum(rng.random(9))                 # no positive gradient: zi 0
    both = np.stack([profs[0, 0], falling])
    assert zi_dales(both, np.array([3.0, 1.0]), zf, zh) == pytest.approx(3 * ref[0][0] / 4, rel=1e-12)
    # the peak on the second face (loc - 1 = the surface face): anchored at the surface
    peak2 = np.concatenate(([300.0, 305.0], 305.0 + 0.1 * np.arange(1, 8)))
    assert zi_dales(peak2[None], [1.0], zf, zh) == pytest.approx(_zi_column(peak2, zf, zh), rel=1e-12, abs=1e-9)
    # the peak on the top face
    top = np.concatenate((300.0 + 0.1 * np.arange(8), [310.0]))
    assert zi_dales(top[None], [2.0], zf, zh) == pytest.approx(_zi_column(top, zf, zh), rel=1e-12)


@pytest.mark.mpi
def test_group_sums_and_global_max_at_any_rank_count(team):
    """DALES's groups (stride 3 for nx = 10) and the largest column LWP, from every rank's blocks,
    against the same quantities on the global arrays."""
    # (ny = 7: a block width that is not twice the halo, so no shifted window holds the same cells)
    grid = Grid.uniform(10, 7, 5, 1000.0, 700.0, 500.0)
    rng = np.random.default_rng(6)
    thv = 300.0 + rng.random((10, 7, 5))
    lwp = rng.random((10, 7))
    ctx = make_ctx(team, grid, dict(thv=thv))
    g, h = ctx.grid, ctx.h
    block = np.full_like(ctx.fields["thv"], 1e9)              # halos hold garbage: interiors only
    block[h:h + g.nxl, h:h + g.nyl] = ctx.fields["thv"][h:h + g.nxl, h:h + g.nyl]
    lwp_block = np.full(block.shape[:2], 1e9)
    lwp_block[h:h + g.nxl, h:h + g.nyl] = local_block(g, lwp)[h:h + g.nxl, h:h + g.nyl]
    sums, counts = lst._group_sums(ctx, block)
    ref = np.stack([thv[r::3].sum(axis=0) for r in range(3)])
    np.testing.assert_allclose(sums, ref, rtol=1e-13)
    np.testing.assert_array_equal(counts, [[4.0], [3.0], [3.0]])
    assert lst._global_max(ctx, lwp_block) == lwp.max()
    ctx.store.free()


@pytest.mark.mpi
def test_file_holds_everything_and_write_errors_reach_every_rank(team, shared_tmp):
    grid = _grid()
    rng = np.random.default_rng(9)
    thl = 299.0 + rng.standard_normal((NX, NY, NZ))
    qt = 0.012 + 1e-3 * rng.random((NX, NY, NZ))
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    w = rng.standard_normal((NX, NY, NZ + 1))
    ctx = make_ctx(team, grid, dict(thl=thl, qt=qt, w=w), base=base)
    stats = Statistics(team, grid, interval=120.0)
    for t in (0.0, 60.0, 180.0):
        ctx.t = t
        stats.sample(ctx, initial=(t == 0.0))
    path = shared_tmp / "sub" / "dir" / "stats.h5"          # folders made as needed
    stats.write(path, attrs={"case": "unit", "dt": 0.5})
    team.barrier()
    with h5py.File(path, "r") as h:
        for k, v in (("nx", NX), ("ny", NY), ("nz", NZ), ("xsize", 900.0), ("ysize", 600.0),
                     ("interval", 120.0), ("case", "unit"), ("dt", 0.5)):
            assert h.attrs[k] == v, k
        assert h.attrs["definitions"] == lst.__doc__
        assert h.attrs["rho_surface"] == float(np.asarray(base.rhof)[0])
        np.testing.assert_array_equal(h["zf"][()], grid.zf)
        np.testing.assert_array_equal(h["zh"][()], grid.zh)
        assert set(h["timeseries"]) == {"time", *SERIES}
        np.testing.assert_array_equal(h["timeseries/time"][()], [60.0, 180.0])
        np.testing.assert_array_equal(h["profiles/hours"][()], [120 / 3600, 240 / 3600])
        np.testing.assert_array_equal(h["profiles/nsamples"][()], [1, 1])
        assert {"thl", "qt", "ql", "thv", "cfrac", "w2", "wthl", "wqt_res"} <= set(h["profiles"])
        assert set(h["profiles"]) <= {"hours", "nsamples", *CELL_PROFILES, *FACE_PROFILES}
        assert h["initial"].attrs["time"] == 0.0 and set(h["initial"]) == {"thl", "qt", "ql", "thv", "cfrac"}
        np.testing.assert_allclose(h["initial/thl"][()], thl.mean(axis=(0, 1)), rtol=1e-13)
    # a statistics object without samples or density: no rho_surface, no initial group
    empty = Statistics(team, grid)
    path2 = shared_tmp / "empty.h5"
    empty.write(path2)
    team.barrier()
    with h5py.File(path2, "r") as h:
        assert "rho_surface" not in h.attrs and "initial" not in h and h["timeseries/time"].shape == (0,)
    # a path that is a folder: the same error on every rank, no temporary left behind
    folder = shared_tmp / "afolder"
    if team.rank == 0:
        (folder / "x").mkdir(parents=True)
    team.barrier()
    with pytest.raises(OSError, match="^" + re.escape(str(folder)) + ": cannot write the statistics: "):
        stats.write(folder)
    team.barrier()
    assert sorted(p.name for p in shared_tmp.iterdir()) == ["afolder", "empty.h5", "sub"]
    assert sorted(p.name for p in (shared_tmp / "sub" / "dir").iterdir()) == ["stats.h5"]
    ctx.store.free()


@pytest.mark.mpi
def test_one_level_moist_sample(team):
    """A single level (no w): cloud cover, base and top, LWP and the DALES averages from the
    columns that are saturated, against NumPy; no inversion heights."""
    grid = _grid(1)
    thl = np.full((NX, NY, 1), 295.0)
    qt = np.full((NX, NY, 1), 0.005)
    qt[:3, :2] = 0.03                                        # six saturated columns
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    ctx = make_ctx(team, grid, dict(thl=thl, qt=qt), base=base)
    got = Statistics(team, grid).sample(ctx)
    ql, _ = thermo.saturation_adjust(np, thl, qt, np.asarray(base.presf), np.asarray(base.exnf))
    assert (ql > 0).sum() == 6
    zf, dz = float(np.asarray(grid.zf)[0]), float(np.diff(np.asarray(grid.zh))[0])
    assert got["cloud_cover"] == pytest.approx(6 / (NX * NY)) and got["cfrac_max"] == pytest.approx(6 / (NX * NY))
    assert got["cloud_base"] == got["cloud_top"] == got["cloud_base_avg"] == got["cloud_top_avg"] == zf
    rho = float(np.asarray(base.rhof)[0])
    assert got["lwp"] == pytest.approx(1e3 * (ql[..., 0] * rho * dz).mean(), rel=1e-12)
    assert got["lwp_max"] == pytest.approx(1e3 * ql.max() * rho * dz, rel=1e-12)
    assert math.isnan(got["zi"]) and math.isnan(got["zi_dales"])
    ctx.store.free()


@pytest.mark.mpi
def test_inversion_height_is_the_largest_gradient_not_the_largest_jump(team):
    """Equal steps of thv over layers that thicken upwards: the largest gradient d<thv>/dz is on
    the lowest inner face, the largest jump per layer times thickness on the highest."""
    zh = np.concatenate([[0.0], np.cumsum([20.0, 30.0, 50.0, 80.0, 130.0])])
    grid = Grid.stretched(NX, NY, 900.0, 600.0, zh)
    thl = np.broadcast_to(300.0 + np.arange(5.0), (NX, NY, 5)).copy()
    ctx = make_ctx(team, grid, dict(thl=thl))
    got = Statistics(team, grid).sample(ctx)
    zf = np.asarray(grid.zf)
    assert got["zi"] == _zi_gradient(thl.mean(axis=(0, 1)), grid) == zh[1]
    assert int(np.argmax(np.diff(zf))) != 0                    # (the thickest step is higher up)
    ctx.store.free()
