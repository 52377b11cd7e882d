"""Statistics at 1-4 ranks against NumPy on the global fields: cloud cover, base, top, liquid water
path, inversion height, resolved and subgrid fluxes, surface fluxes, interval averages, and the
HDF5 file read back."""
import h5py
import numpy as np
import pytest

from physctx import coords, local_block, make_ctx
from hpcsuite.les import surface, thermo
from hpcsuite.les.grid import Grid
from hpcsuite.les.statistics import Statistics

NX, NY, NZ = 12, 8, 10


def _global_state(seed):
    grid = Grid.stretched(NX, NY, 1200.0, 800.0, np.concatenate([[0.0], np.cumsum(np.linspace(60, 140, NZ))]))
    rng = np.random.default_rng(seed)
    xc, yc, zc, *_ = coords(grid)
    thl = 298.5 + 4e-3 * zc + 0.2 * rng.standard_normal((NX, NY, NZ))
    qt = 0.0150 - 3e-6 * zc + 2e-4 * rng.standard_normal((NX, NY, NZ))
    moist = rng.random((NX, NY)) < 0.3                       # ~30 % of the columns get clouds
    qt[moist, 4:7] += 0.006
    w = rng.standard_normal((NX, NY, NZ + 1)) * 0.5
    w[..., [0, -1]] = 0.0
    u = -8 + rng.standard_normal((NX, NY, NZ))
    v = 1 + rng.standard_normal((NX, NY, NZ))
    ekh = 5 + rng.random((NX, NY, NZ))
    return grid, dict(thl=thl, qt=qt, w=w, u=u, v=v, e12=0.3 + rng.random((NX, NY, NZ))), ekh


def _reference(grid, f, ekh, base):
    """Everything the statistics should find, from the global arrays."""
    p, exn = np.asarray(base.presf), np.asarray(base.exnf)
    ql, _ = thermo.saturation_adjust(np, f["thl"], f["qt"], p, exn)
    thv = thermo.virtual_theta(f["thl"], f["qt"], ql, exn)
    zf, zh, dzf, dzh = grid.zf, grid.zh, grid.dzf, grid.dzh
    cloudy = ql > 0
    levels = np.nonzero(cloudy.any(axis=(0, 1)))[0]
    r = {"cloud_cover": cloudy.any(axis=2).mean(), "cloud_base": zf[levels[0]], "cloud_top": zf[levels[-1]],
         "cfrac_max": cloudy.mean(axis=(0, 1)).max(),
         "lwp": 1e3 * (ql * np.asarray(base.rhof) * dzf).sum(axis=2).mean(),
         "thl": f["thl"].mean(axis=(0, 1)), "qt": f["qt"].mean(axis=(0, 1)), "ql": ql.mean(axis=(0, 1)), "cfrac": cloudy.mean(axis=(0, 1))}
    mthv = thv.mean(axis=(0, 1))
    r["zi"] = zh[1 + np.argmax(np.diff(mthv) / np.diff(zf))]
    for name, s in (("thl", f["thl"]), ("thv", thv)):
        res = np.zeros(NZ + 1); sgs = np.zeros(NZ + 1)
        for k in range(1, NZ):
            sh = (s[..., k] * dzf[k - 1] + s[..., k - 1] * dzf[k]) / (2 * dzh[k])
            wk = f["w"][..., k]
            res[k] = np.mean((wk - wk.mean()) * (sh - sh.mean()))
            K = (dzf[k] * ekh[..., k - 1] + dzf[k - 1] * ekh[..., k]) / (2 * dzh[k])
            sgs[k] = np.mean(-K * (s[..., k] - s[..., k - 1]) / dzh[k])
        sgs[0] = 0.06
        r[f"w{name}_res"], r[f"w{name}_sgs"] = res, sgs
        r[f"w{name}"] = res + sgs
    r["zi_flux"] = zh[1 + np.argmin(r["wthv"][1:-1])]
    return r


@pytest.mark.mpi
def test_statistics_match_numpy_on_the_global_fields(team, shared_tmp):
    stats = None
    samples = []
    for t, seed in ((1800.0, 1), (3600.0, 2), (5400.0, 3)):       # 3600 ends the first hour
        grid, f, ekh = _global_state(seed)
        base = thermo.base_state(grid, 101500.0, 300.0, f["thl"].mean(axis=(0, 1)), f["qt"].mean(axis=(0, 1)))
        ctx = make_ctx(team, grid, f, base=base)
        ctx.t = t
        thermo.Thermo()(ctx)
        surface.PrescribedSurface({"wthl": 0.06, "wqt": 5e-5, "ustar": 0.3})(ctx)
        ctx.diag["ekh"] = local_block(ctx.grid, ekh)
        stats = stats or Statistics(team, grid)
        rho0 = rho0 if t > 1800.0 else float(np.asarray(base.rhof)[0])     # the first sample's
        got = stats.sample(ctx)
        ref = _reference(grid, f, ekh, base)
        samples.append(ref)
        for k in ("cloud_cover", "cloud_base", "cloud_top", "cfrac_max", "lwp", "zi", "zi_flux"):
            assert got[k] == pytest.approx(ref[k], rel=1e-12), k
        assert 0.1 < ref["cloud_cover"] < 0.6 and ref["lwp"] > 1
        for k in ("thl", "ql", "cfrac", "wthl_res", "wthl_sgs", "wthl", "wthv_res"):
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-10, atol=1e-15, err_msg=k)
        assert got["wthl_s"] == pytest.approx(0.06) and got["ustar"] == pytest.approx(0.3)
        ctx.store.free()
    path = shared_tmp / "stats.h5"
    stats.write(path, attrs={"case": "test"})
    team.barrier()
    with h5py.File(path, "r") as h:
        np.testing.assert_array_equal(h["timeseries/time"][()], [1800, 3600, 5400])
        np.testing.assert_allclose(h["timeseries/cloud_cover"][()], [s["cloud_cover"] for s in samples], rtol=1e-12)
        np.testing.assert_array_equal(h["profiles/hours"][()], [1.0, 2.0])
        np.testing.assert_array_equal(h["profiles/nsamples"][()], [2, 1])
        np.testing.assert_allclose(h["profiles/thl"][0], 0.5 * (samples[0]["thl"] + samples[1]["thl"]), rtol=1e-13)
        np.testing.assert_allclose(h["profiles/wthl"][1], samples[2]["wthl"], rtol=1e-10, atol=1e-15)
        assert h["profiles/wthl"].shape == (2, NZ + 1) and h.attrs["case"] == "test"
        assert h.attrs["rho_surface"] == rho0
        assert h["initial"].attrs["time"] == 1800.0 and "w2" not in h["initial"]     # cell profiles only
        np.testing.assert_allclose(h["initial/thl"][()], samples[0]["thl"], rtol=1e-13)
        np.testing.assert_allclose(h["initial/qt"][()], samples[0]["qt"], rtol=1e-13)
    assert [p.name for p in shared_tmp.iterdir() if p.name.startswith(".")] == []      # no temporaries


@pytest.mark.mpi
def test_statistics_without_clouds_or_scalars(team):
    grid = Grid.uniform(12, 8, 6, 1200.0, 800.0, 600.0)
    rng = np.random.default_rng(0)
    f = {"u": rng.standard_normal((12, 8, 6)), "v": rng.standard_normal((12, 8, 6)),
         "w": np.zeros((12, 8, 7))}
    ctx = make_ctx(team, grid, f)
    stats = Statistics(team, grid, interval=60.0)
    got = stats.sample(ctx)
    np.testing.assert_allclose(got["u"], f["u"].mean(axis=(0, 1)), rtol=1e-12)
    assert np.isnan(got["cloud_base"]) and np.isnan(got["zi"])
    assert "thl" not in stats.profiles()
    ctx.store.free()


def test_a_sample_at_an_interval_end_belongs_to_the_interval_it_ends():
    """A 6-hour run sampled every 600/7 s (t = 0, ..., 21600 as sums of the steps, which miss the
    full hours by rounding): hours 1-6, no "hour 7" holding only the sample at 6 h."""
    from hpcsuite.runtime import Team
    grid = Grid.uniform(4, 4, 3, 400.0, 400.0, 300.0)
    stats = Statistics(Team.world(), grid)
    times = np.cumsum(np.full(252, 600.0 / 7.0))
    times = np.concatenate([[0.0], times])
    assert times[-1] != 21600.0 and times[-1] == pytest.approx(21600.0, rel=1e-12)
    for t in times:
        stats._record(float(t), {"thl": np.full(3, t)}, {})
    prof = stats.profiles()
    np.testing.assert_array_equal(prof["hours"], [1, 2, 3, 4, 5, 6])
    # [0, 3600] in the first hour (t = 0 starts it), (3600 k, 3600 (k + 1)] in the others
    np.testing.assert_array_equal(prof["nsamples"], [43, 42, 42, 42, 42, 42])
    ends = np.arange(1, 7) * 3600.0
    ref = [np.mean(times[(times > e - 3600.0 + 1e-6) & (times <= e + 1e-6)]) for e in ends]
    ref[0] = np.mean(times[times <= 3600.0 + 1e-6])
    np.testing.assert_allclose(prof["thl"][:, 0], ref, rtol=1e-12)
    assert [stats.interval_index(t) for t in (0.0, 1.0, 3600.0, 3600.0 * (1 + 1e-12), 3600.01, 7200.0)] \
        == [0, 0, 0, 0, 1, 1]
