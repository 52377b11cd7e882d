"""The les application through the command line: the verification decks at 1-4 ranks against the
exact solutions (HDF5 output read back serially), bad decks rejected before the run with one line
naming the key, checkpoint/restart continuing bit-identically, and blow-up detection that keeps the
last good checkpoint."""
import math
import re

import h5py
import numpy as np
import pytest

from helpers import HPCSUITE, ROOT
from hpcsuite import deck as dk
from dyncases import taylor_green
from hpcsuite.runtime import gpu_status


def deck_text(name, **changes):
    """An inputs/ deck with ``{"table.key": value}`` changed."""
    return dk.modified(ROOT / "inputs" / f"{name}.toml", changes)


def write(tmp_path, name, fname="d.toml", **changes):
    p = tmp_path / fname
    p.write_text(deck_text(name, **changes))
    return p


def test_taylor_green_deck_at_1_to_4_ranks(run, tmp_path):
    fields = {}
    for n in (1, 2, 3, 4):
        out = tmp_path / f"o{n}"
        deck = write(tmp_path, "taylor_green", f"tg{n}.toml", **{"output.dir": str(out), "time.t_end": 0.3})
        p = run([HPCSUITE, "run", "-q", deck], nranks=n, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "error at t = 0.3: max |u - exact|" in p.stdout
        with h5py.File(out / "fields.h5", "r") as f:
            fields[n] = {k: f[k][...] for k in "uvw"}
            t = float(f["u"].attrs["t"])
            reported = float(f["u"].attrs["error_u"])
    assert t == pytest.approx(0.3, abs=1e-12)
    u, v = taylor_green(32, 0.05, t)
    err = np.abs(fields[1]["u"] - u[..., None]).max()
    assert err == pytest.approx(reported, rel=1e-9) and err < 2e-4
    assert np.abs(fields[1]["v"] - v[..., None]).max() < 2e-4
    for n in (2, 3, 4):
        for k in "uv":
            assert np.abs(fields[n][k] - fields[1][k]).max() < 1e-13, (n, k)


def test_advect_sine_deck(run, tmp_path):
    deck = write(tmp_path, "advect_sine", **{"output.dir": str(tmp_path / "o"), "time.t_end": 1.0})
    p = run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=120)
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "o" / "fields.h5", "r") as f:
        c = f["thl"][...]
    x = (np.arange(64) + 0.5) * 2 * math.pi / 64
    ref = np.sin(x - 1.0) * math.exp(-0.01)
    assert np.abs(c - ref[:, None, None]).max() < 2e-5


@pytest.mark.parametrize("changes,nranks,match", [
    ({"time.dt": 0.5}, 1, r"\[time\] dt = 0.5 is above the stability limit"),
    ({"advection.thl": "4th"}, 1, r"\[advection\] thl must be one of '', '2nd', '5th', got '4th'"),
    ({"grid.nx": 4}, 4, r"\[decomposition\] dims = \[0, 0\] does not fit 4 rank\(s\) on the 4x32 grid: .*halo width 3"),
    ({"case.kind": "dales", "case.folder": "/nonexistent/case"}, 2, r"\[case\] folder = '/nonexistent/case' has no prof.inp.001"),
    pytest.param({"app.device": "gpu"}, 1, r"\[app\] device = 'gpu' but no GPU is usable",
                 marks=pytest.mark.skipif(gpu_status()[0], reason="a GPU is usable here")),
])
def test_bad_decks_fail_before_the_run_with_one_line(run, tmp_path, changes, nranks, match):
    import re
    deck = write(tmp_path, "taylor_green", **changes, **{"output.dir": str(tmp_path / "o")})
    p = run([HPCSUITE, "run", deck], nranks=nranks, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and re.search(match, lines[0]), p.stderr
    assert not (tmp_path / "o").exists()


def test_checkpoint_restart_is_bit_identical_and_blowup_keeps_it(run, tmp_path):
    common = {"time.t_end": 1.5, "advection.momentum": "5th"}
    ref = write(tmp_path, "taylor_green", "ref.toml", **common, **{"output.dir": str(tmp_path / "ref")})
    assert run([HPCSUITE, "run", "-q", ref], nranks=2, timeout=120).returncode == 0
    ck = tmp_path / "ck.h5"
    deck = write(tmp_path, "taylor_green", "ck.toml", **common, **{"output.dir": str(tmp_path / "ck"),
                                                                 "output.checkpoint": str(ck),
                                                                 "output.check_interval": 1})
    p = run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=120, env={"HPCSUITE_CHECKPOINT_AT_STEP": "7"})
    assert p.returncode == 85 and ck.is_file(), p.stderr
    assert "checkpointed at t = " in p.stdout
    # a continuation that blows up (a tiny Courant limit): stops, names time, variable and place,
    # and leaves the checkpoint alone
    bad = write(tmp_path, "taylor_green", "bad.toml", **common, **{"output.dir": str(tmp_path / "bad"),
                                                                 "output.checkpoint": str(ck),
                                                                 "time.blowup_courant": 0.01})
    before = ck.read_bytes()
    p = run([HPCSUITE, "run", "-q", bad], nranks=2, timeout=120)
    assert p.returncode == 1
    assert "the run blew up at t = " in p.stderr and "Courant number" in p.stderr and "at cell (i, j, k) = (" in p.stderr
    assert "last good checkpoint" in p.stderr and ck.read_bytes() == before
    # the real continuation (same layout: bit-identical needs the same reduction order)
    p = run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=120)
    assert p.returncode == 0, p.stderr
    assert not ck.exists()
    with h5py.File(tmp_path / "ref" / "fields.h5", "r") as a, h5py.File(tmp_path / "ck" / "fields.h5", "r") as b:
        assert a["u"].attrs["steps"] == b["u"].attrs["steps"]
        for k in "uvw":
            assert np.array_equal(a[k][...], b[k][...]), k


def test_template_lists_every_table(run):
    p = run([HPCSUITE, "run", "--template", "les"], timeout=60)
    assert p.returncode == 0
    for t in ("[case]", "[grid]", "[advection]", "[subgrid]", "[physics]", "[time]", "[output]"):
        assert t in p.stdout


SMALL = {"grid.nx": 12, "grid.ny": 12, "grid.xsize": 1200.0, "grid.ysize": 1200.0, "time.t_end": 120.0,
         "output.stats_every": 30.0, "output.sections_every": 60.0}


def test_bomex_small_runs_writes_statistics_and_plots(run, tmp_path):
    out = tmp_path / "o"
    deck = write(tmp_path, "bomex_small", **SMALL, **{"output.dir": str(out)})
    p = run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr
    with h5py.File(out / "stats.h5", "r") as f:
        t = f["timeseries/time"][()]
        assert np.allclose(t, [30, 60, 90, 120])
        assert np.allclose(f["timeseries/wthl_s"][()], 8e-3) and np.allclose(f["timeseries/ustar"][()], 0.28)
        # the initial state, sampled before the first step: the case's profiles plus small perturbations
        from hpcsuite.les.cases import bomex_profiles
        assert f["initial"].attrs["time"] == 0.0
        ref = bomex_profiles(f["zf"][()])
        assert np.abs(f["initial/thl"][()] - ref["thl"]).max() < 0.03
        assert np.abs(f["initial/qt"][()] - ref["qt"]).max() < 1e-5 and np.all(f["initial/ql"][()] == 0.0)
    with h5py.File(out / "fields.h5", "r") as f:
        assert set(f) == {"u", "v", "w", "thl", "qt", "e12", "ql"}
        assert f["w"].shape == (12, 12, 65) and np.all(f["w"][:, :, 0] == 0) and np.all(f["w"][:, :, -1] == 0)
        thl = f["thl"][()]
        assert np.all(np.isfinite(thl)) and 298 < thl.min() and thl.max() < 320
        assert np.all(f["e12"][()] > 0)
    with h5py.File(out / "fields.h5", "r") as f:
        final = {k: f[k][()] for k in ("thl", "ql")}
    with h5py.File(out / "sections.h5", "r") as f:
        s = f["crosssection"]
        assert s["xz/ql"].shape == (2, 12, 64) and s["xy/thl"].shape == (2, 12, 12, 2)
        assert np.allclose(s["xz/time"][()], [60.0, 120.0])
        # the last sample is the final state: the x-z section through the cloudiest row (or the
        # middle one without cloud) and the x-y sections at the deck's levels
        rows = final["ql"].sum(axis=(0, 2))
        j = int(np.argmax(rows)) if rows.max() > 0 else 6
        assert s["xz/y"][-1] == pytest.approx((j + 0.5) * 100.0)
        assert np.array_equal(s["xz/thl"][-1], final["thl"][:, j, :])
        assert np.array_equal(s["xy/thl"][-1], final["thl"][:, :, [12, 20]])
    p = run([HPCSUITE, "les", "plot", out], timeout=120)
    assert p.returncode == 0, p.stderr
    for png in ("profiles.png", "timeseries.png", "crosssection.png"):
        assert (out / "plots" / png).stat().st_size > 1000


@pytest.mark.skipif(not gpu_status()[0], reason="no usable GPU")
def test_bomex_small_on_the_gpu_gives_the_cpu_statistics(run, tmp_path):
    """The moist case end to end on the GPU (every physics term, the statistics' device reductions):
    the time series, hourly profiles, initial state and surface density of the CPU run, to rounding."""
    out = {}
    for dev in ("cpu", "gpu"):
        d = write(tmp_path, "bomex_small", f"{dev}.toml", **dict(SMALL, **{
            "time.t_end": 600.0, "output.stats_every": 60.0, "output.sections_every": 0.0, "app.device": dev,
            "output.dir": str(tmp_path / dev)}))
        p = run([HPCSUITE, "run", "-q", d], timeout=300)
        assert p.returncode == 0, p.stderr
        with h5py.File(tmp_path / dev / "stats.h5", "r") as f:
            out[dev] = {f"{g}/{k}": f[g][k][()] for g in ("timeseries", "profiles", "initial") for k in f[g]}
            out[dev]["rho_surface"] = f.attrs["rho_surface"]
    assert out["cpu"].keys() == out["gpu"].keys() and out["cpu"]["timeseries/time"].size == 10
    for k, ref in out["cpu"].items():
        scale = np.nanmax(np.abs(ref)) if np.any(np.isfinite(ref)) else 0.0
        np.testing.assert_allclose(out["gpu"][k], ref, rtol=1e-9, atol=1e-9 * scale, equal_nan=True, err_msg=k)


def test_a_6_hour_bomex_run_ends_with_the_dales_comparison(run, tmp_path):
    """A coarse 4 x 4 x 10 BOMEX for 6 h (seconds): the last result line compares hours 3-6 with
    DALES's BOMEX run (matched definitions); ``les compare`` prints the same as a table with the
    DALES means, the accepted ranges and the sources named; the statistics file names the case."""
    d = write(tmp_path, "bomex_small", **{"grid.nx": 4, "grid.ny": 4, "grid.xsize": 2000.0, "grid.ysize": 2000.0,
                                          "grid.nz": 10, "time.t_end": 21600.0, "output.stats_every": 3600.0,
                                          "output.sections_every": 0.0, "output.fields": False,
                                          "output.dir": str(tmp_path / "o")})
    p = run([HPCSUITE, "run", "-q", d], timeout=300)
    assert p.returncode == 0, p.stderr
    line = [ln for ln in p.stdout.splitlines()
            if "BOMEX hours 3-6 against the DALES 3.2 reference run (matched definitions)" in ln]
    assert len(line) == 1 and re.search(r"; [0-6] of 6 within$", line[0]), p.stdout
    with h5py.File(tmp_path / "o" / "stats.h5", "r") as f:
        assert f.attrs["case"] == "bomex" and f["timeseries/time"][-1] == 21600.0
        t = f["timeseries/time"][()]
        sel = (t >= 3 * 3600) & (t <= 6 * 3600)
        cover = float(np.mean(f["timeseries/cloud_cover"][()][sel]))
        zi = float(np.mean(f["timeseries/zi_dales"][()][sel]))
    # the same comparison as a table, from the command line; the run's own line said the same
    p = run([HPCSUITE, "les", "compare", tmp_path / "o"])
    assert p.returncode == 0, p.stderr
    assert ("| quantity | definition (as DALES modtimestat) | this run, hours 3-6 | DALES 3.2 run, hours 3-6 | "
            "accepted range | intercomparison | unit | within |") in p.stdout
    n_within = int(re.search(r"; ([0-6]) of 6 within$", line[0]).group(1))
    assert f"\n{n_within} of 6 within the ranges" in p.stdout
    from hpcsuite.les.cases import BOMEX_REFERENCE, dales_bomex_reference
    ref = dales_bomex_reference()
    lo, hi = BOMEX_REFERENCE["cloud_cover"][:2]
    assert re.search(rf"\| cloud_cover \| fraction of columns with ql > 0 \(DALES cc\) \| {cover:.4g} \| "
                     rf"{ref['cloud_cover']:.4g} \| {lo:.4g} - {hi:.4g} \| not cited \| 1 \| (yes|NO) \|", p.stdout), p.stdout
    assert f"| zi_dales | largest thv gradient of 4-column groups, refined (DALES zi) | {zi:.4g} | {ref['zi_dales']:.4g} |" in p.stdout
    assert "github.com/dalesteam/dales cases/bomex/results_3.2.0/tmser.001.nc" in p.stdout
    assert "Intercomparison: Siebesma et al. 2003" in p.stdout and "read off" not in p.stdout
    p = run([HPCSUITE, "les", "compare", tmp_path / "o", "--hours", "1", "2"])
    assert p.returncode == 0 and "| this run, hours 1-2 | DALES 3.2 run, hours 1-2 |" in p.stdout
    assert "note:" not in p.stdout
    p = run([HPCSUITE, "les", "compare", tmp_path / "o", "--hours", "5", "7"])
    assert p.returncode == 0 and "# note: samples end at 6 h, before the window's end (7 h)" in p.stdout
    for bad, msg in ((["--hours", "3", "1"], "give FROM < TO"), ([], "no such run folder")):
        p = run([HPCSUITE, "les", "compare", tmp_path / ("o" if bad else "missing"), *bad])
        assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_bomex_restart_is_bit_identical(run, tmp_path):
    small = dict(SMALL, **{"time.t_end": 90.0, "output.stats_every": 30.0, "output.sections_every": 0.0})
    ref = write(tmp_path, "bomex_small", "ref.toml", **small, **{"output.dir": str(tmp_path / "ref")})
    assert run([HPCSUITE, "run", "-q", ref], nranks=2, timeout=300).returncode == 0
    ck = tmp_path / "ck.h5"
    deck = write(tmp_path, "bomex_small", "ck.toml", **small, **{"output.dir": str(tmp_path / "ck"),
                                                               "output.checkpoint": str(ck),
                                                               "output.check_interval": 1})
    p = run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=300, env={"HPCSUITE_CHECKPOINT_AT_STEP": "4"})
    assert p.returncode == 85, p.stderr
    assert run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=300).returncode == 0
    with h5py.File(tmp_path / "ref" / "fields.h5", "r") as a, h5py.File(tmp_path / "ck" / "fields.h5", "r") as b:
        for k in a:
            assert np.array_equal(a[k][...], b[k][...]), k
    # the statistics continue across the restart: the same time series as the uninterrupted run
    with h5py.File(tmp_path / "ref" / "stats.h5", "r") as a, h5py.File(tmp_path / "ck" / "stats.h5", "r") as b:
        assert np.array_equal(a["timeseries/time"][()], [30.0, 60.0, 90.0])
        for k in a["timeseries"]:
            assert np.array_equal(a["timeseries"][k][()], b["timeseries"][k][()], equal_nan=True), k
        for k in a["profiles"]:
            assert np.array_equal(a["profiles"][k][()], b["profiles"][k][()], equal_nan=True), k
        assert a["initial"].attrs["time"] == b["initial"].attrs["time"] == 0.0 and set(a["initial"]) == set(b["initial"])
        for k in a["initial"]:
            assert np.array_equal(a["initial"][k][()], b["initial"][k][()]), k
    assert not ck.exists() and not (tmp_path / "ck.h5.outputs.pkl").exists()


def test_cbl_deck_runs(run, tmp_path):
    deck = write(tmp_path, "cbl", **{"grid.nx": 12, "grid.ny": 12, "grid.xsize": 1200.0, "grid.ysize": 1200.0,
                                     "time.t_end": 120.0, "output.dir": str(tmp_path / "o")})
    p = run([HPCSUITE, "run", "-q", deck], nranks=1, timeout=300)
    assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "o" / "stats.h5", "r") as f:
        assert np.allclose(f["timeseries/wthl_s"][()], 0.1)


def test_dales_case_files(run, tmp_path):
    from hpcsuite.les.cases import bomex_profiles, write_dales_case
    zf = np.arange(25.0, 3200.0, 50.0)
    write_dales_case(tmp_path / "case", 7, zf, bomex_profiles(zf))
    small = dict(SMALL, **{"time.t_end": 30.0, "output.stats_every": 0.0, "output.sections_every": 0.0})
    deck = write(tmp_path, "bomex_small", **small, **{"case.kind": "dales", "case.folder": str(tmp_path / "case"),
                                                      "case.expnr": 7, "output.dir": str(tmp_path / "o")})
    p = run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr
    # profiles that end below the domain top: one line naming the file, before the run
    write_dales_case(tmp_path / "low", 7, zf[:40], bomex_profiles(zf[:40]))
    deck = write(tmp_path, "bomex_small", "low.toml", **small, **{"case.kind": "dales", "case.folder": str(tmp_path / "low"),
                                                                "case.expnr": 7, "output.dir": str(tmp_path / "o2")})
    p = run([HPCSUITE, "run", "-q", deck], nranks=2, timeout=120)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "[case] folder" in lines[0] and "prof.inp.007: profiles end at" in lines[0] and "below the domain" in lines[0]


def test_bomex_small_same_fields_at_1_to_4_ranks(run, tmp_path):
    # every physics term too (surface, moist thermodynamics, TKE, Coriolis, subsidence, radiation)
    small = dict(SMALL, **{"output.stats_every": 0.0, "output.sections_every": 0.0})
    fields = {}
    for n in (1, 2, 3, 4):
        deck = write(tmp_path, "bomex_small", f"b{n}.toml", **small, **{"output.dir": str(tmp_path / f"o{n}")})
        p = run([HPCSUITE, "run", "-q", deck], nranks=n, timeout=300)
        assert p.returncode == 0, p.stderr
        with h5py.File(tmp_path / f"o{n}" / "fields.h5", "r") as f:
            fields[n] = {k: f[k][()] for k in f}
    for n in (2, 3, 4):
        for k, ref in fields[1].items():
            scale = max(np.abs(ref).max(), 1e-30)
            assert np.abs(fields[n][k] - ref).max() <= 1e-10 * scale, (n, k)
