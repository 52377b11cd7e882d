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
    r.update(_dales_reference(grid, ql, thv, np.asarray(base.rhof)))
    return r


def _dales_reference(grid, ql, thv, rhof):
    """DALES 3.2.0 modtimestat's definitions, written out loop by loop with Fortran's 1-based
    indices (zf(k), zh(k) the centre and bottom face of cell k; zh(1) = 0), from the global
    arrays: the mean over cloudy columns of the lowest/highest cloudy level, the largest column
    LWP, and zi of the gradient method over groups of 4 columns a stride apart in x."""
    nx, ny, kmax = ql.shape
    zf = np.concatenate(([np.nan], grid.zf))                 # zf(1..kmax)
    zh = np.concatenate(([np.nan], grid.zh))                 # zh(1..kmax+1)
    dzf = {k: zh[k + 1] - zh[k] for k in range(1, kmax + 1)}
    dzh = {k: zf[k] - zf[k - 1] for k in range(2, kmax + 1)}
    cc = zbase = ztop = 0.0
    lwpmax = 0.0
    for i in range(nx):
        for j in range(ny):
            col = ql[i, j]
            lwpmax = max(lwpmax, sum(col[k - 1] * rhof[k - 1] * dzf[k] for k in range(1, kmax + 1)))
            ks = [k for k in range(1, kmax + 1) if col[k - 1] > 0]
            if ks:
                cc += 1
                zbase += zf[ks[0]]
                ztop += zf[ks[-1]]
    stride = -(-nx // 4)
    zi = 0.0
    for i0 in range(stride):
        members = list(range(i0, nx, stride))
        for j in range(ny):
            prof = {k: sum(thv[i, j, k - 1] for i in members) for k in range(1, kmax + 1)}
            grad = {k: 0.0 for k in range(1, kmax + 1)}
            for k in range(2, kmax + 1):
                grad[k] = (prof[k] - prof[k - 1]) / dzh[k]
            dgrad = {k: 0.0 for k in range(1, kmax + 1)}
            for k in range(2, kmax):
                dgrad[k] = (grad[k + 1] - grad[k]) / dzf[k]
            loc = max(range(1, kmax + 1), key=lambda k: (grad[k], -k))      # first largest
            zi += len(members) * (zh[loc - 1] - dzh[loc] * dgrad[loc - 1] / (dgrad[loc] - dgrad[loc - 1] + 1e-8))
    return {"cloud_base_avg": zbase / cc, "cloud_top_avg": ztop / cc, "lwp_max": 1e3 * lwpmax,
            "zi_dales": zi / (nx * ny)}


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
        for k in ("cloud_cover", "cloud_base", "cloud_top", "cfrac_max", "lwp", "zi", "zi_flux",
                  "cloud_base_avg", "cloud_top_avg", "lwp_max", "zi_dales"):
            assert got[k] == pytest.approx(ref[k], rel=1e-12), k
        # the matched (DALES) definitions differ from the domain-wide ones on these fields
        assert ref["cloud_base_avg"] > ref["cloud_base"] and ref["cloud_top_avg"] < ref["cloud_top"]
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


def test_dales_inversion_height_of_a_symmetric_gradient_peak_is_half_a_layer_below_its_face():
    """Hand-computed: on a uniform 10 m grid a group profile whose face gradients are 1, 1, 3, 1, 1
    (the peak on face 3, zh = 30 m) gives DALES's refined height zh(L-1) + dz/2 = 25 m; a group of 2
    columns at 40 m weighs half as much as one of 4 at 25 m."""
    from hpcsuite.les.statistics import zi_dales
    zf = np.arange(6) * 10.0 + 5.0
    zh = np.arange(7) * 10.0
    prof = np.concatenate(([0.0], np.cumsum([1.0, 1.0, 3.0, 1.0, 1.0]) * 10.0))
    assert zi_dales(prof[None, :], np.array([4.0]), zf, zh) == pytest.approx(25.0, abs=1e-6)
    shifted = np.concatenate(([0.0], np.cumsum([1.0, 1.0, 1.0, 3.0, 1.0]) * 10.0))   # peak on face 4
    both = np.array([prof, shifted])
    assert zi_dales(both, np.array([4.0, 2.0]), zf, zh) == pytest.approx((4 * 25.0 + 2 * 35.0) / 6, abs=1e-6)
    assert zi_dales(np.zeros((1, 6)), np.array([4.0]), zf, zh) == 0.0      # no positive gradient


@pytest.mark.mpi
def test_dales_definitions_with_groups_of_unequal_size(team):
    """nx = 10: DALES's groups along x have 4, 3 and 3 columns (stride 3); cloudy columns with
    known lowest/highest cloudy levels; the same values on every rank."""
    grid = Grid.uniform(10, 6, 12, 1000.0, 600.0, 1200.0)
    rng = np.random.default_rng(5)
    zc = np.asarray(grid.zf)
    thl = 298.0 + 3e-3 * zc + 2.0 * (zc > 700) + 0.3 * rng.standard_normal((10, 6, 12))
    qt = np.full((10, 6, 12), 0.010)
    qt[2, 1, 5:8] = qt[7, 4, 3:10] = qt[9, 5, 6] = 0.030              # three cloudy columns
    base = thermo.base_state(grid, 101500.0, 300.0, thl.mean(axis=(0, 1)), qt.mean(axis=(0, 1)))
    ctx = make_ctx(team, grid, {"thl": thl, "qt": qt, "u": 0 * thl, "v": 0 * thl,
                                "w": np.zeros((10, 6, 13))}, base=base)
    got = Statistics(team, grid).sample(ctx)
    ql, _ = thermo.saturation_adjust(np, thl, qt, np.asarray(base.presf), np.asarray(base.exnf))
    thv = thermo.virtual_theta(thl, qt, ql, np.asarray(base.exnf))
    ref = _dales_reference(grid, ql, thv, np.asarray(base.rhof))
    assert (ql.max(axis=2) > 0).sum() == 3
    for k in ("cloud_base_avg", "cloud_top_avg", "lwp_max", "zi_dales"):
        assert got[k] == pytest.approx(ref[k], rel=1e-12), k
    assert team.allgather(tuple(got[k] for k in ("cloud_base_avg", "zi_dales", "lwp_max"))) == \
        [tuple(got[k] for k in ("cloud_base_avg", "zi_dales", "lwp_max"))] * team.size
    ctx.store.free()
