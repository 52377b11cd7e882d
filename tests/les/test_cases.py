"""Cases: BOMEX profiles against the published values (written out here), DALES file round trips
and their one-line errors, the sample inputs/dales_bomex case, the dry CBL and the BOMEX
comparison."""
import numpy as np
import pytest

from helpers import ROOT
from hpcsuite.les import cases
from hpcsuite.runtime import InputError


def test_bomex_profiles_match_the_published_values():
    z = np.array([0.0, 300.0, 400.0, 520.0, 700.0, 1000.0, 1480.0, 1500.0, 1800.0, 2000.0, 2100.0,
                  2500.0, 3000.0])
    p = cases.bomex_profiles(z)
    np.testing.assert_allclose(p["thl"], [298.7, 298.7, 298.7, 298.7, 298.7 + 3.7 * 180 / 960,
                                          298.7 + 3.7 * 480 / 960, 302.4, 302.4 + 5.8 * 20 / 520,
                                          302.4 + 5.8 * 320 / 520, 308.2, 308.2 + 0.365, 308.2 + 1.825,
                                          308.2 + 3.65], rtol=1e-12)
    np.testing.assert_allclose(p["qt"] * 1e3, [17.0, 17 - 0.7 * 300 / 520, 17 - 0.7 * 400 / 520, 16.3,
                                               16.3 - 5.6 * 180 / 960, 16.3 - 5.6 * 480 / 960, 10.7,
                                               10.7 - 6.5 * 20 / 520, 10.7 - 6.5 * 320 / 520, 4.2,
                                               4.2 - 0.12, 4.2 - 0.6, 3.0], rtol=1e-12)
    np.testing.assert_allclose(p["u"], [-8.75] * 5 + [-8.75 + 1.8e-3 * (zz - 700) for zz in z[5:]])
    np.testing.assert_allclose(p["ug"], -10 + 1.8e-3 * z)
    np.testing.assert_allclose(p["wfls"] * 100, [0, -0.13, -0.65 * 400 / 1500, -0.65 * 520 / 1500,
                                                 -0.65 * 700 / 1500, -0.65 * 1000 / 1500, -0.65 * 1480 / 1500,
                                                 -0.65, -0.65 * 300 / 600, -0.65 * 100 / 600, 0, 0, 0], atol=1e-12)
    day = 86400.0
    np.testing.assert_allclose(p["dthlrad"] * day, [-2] * 8 + [-2 * 700 / 1000, -2 * 500 / 1000,
                                                                -2 * 400 / 1000, 0, 0], atol=1e-12)
    np.testing.assert_allclose(p["dqtdt"] / 1e-8, [-1.2, -1.2, -0.6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], atol=1e-12)
    assert not np.any(p["v"]) and not np.any(p["vg"])


def test_dales_round_trip_and_interpolation(tmp_path):
    zf = np.linspace(10.0, 2990.0, 75)
    prof = cases.bomex_profiles(zf)
    prof["tke"] = 0.5 + 1e-4 * zf
    p1, p2 = cases.write_dales_case(tmp_path, 7, zf, prof)
    assert p1.name == "prof.inp.007" and p2.name == "lscale.inp.007"
    lines = p1.read_text().splitlines()
    assert lines[0].startswith("#") and lines[1].startswith("#") and len(lines[2].split()) == 6
    back = cases.read_dales_case(tmp_path, 7, zf)
    for k in ("thl", "qt", "u", "v", "tke", "ug", "vg", "wfls", "dqtdt", "dthlrad"):
        np.testing.assert_allclose(back[k], prof[k], rtol=1e-10, atol=1e-20)
    # linear profiles are reproduced exactly on another grid (and kept constant below the first level)
    z2 = np.array([5.0, 33.3, 1234.5, 2990.0])
    lin = {k: 1.0 + 2e-3 * zf for k in ("thl", "ug", "dthlrad")}
    cases.write_dales_case(tmp_path, 8, zf, lin)
    got = cases.read_dales_case(tmp_path, 8, z2)
    np.testing.assert_allclose(got["thl"], [1 + 2e-3 * 10] + list(1.0 + 2e-3 * z2[1:]), rtol=1e-10)
    np.testing.assert_allclose(got["dthlrad"], got["ug"])
    assert not np.any(got["qt"])
    np.testing.assert_array_equal(cases.dales_heights(tmp_path, 7), zf)


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")


def test_dales_errors_are_one_line_and_name_the_file(tmp_path):
    zf = np.linspace(20, 980, 25)
    with pytest.raises(InputError, match=r"prof\.inp\.001: missing DALES input file"):
        cases.read_dales_case(tmp_path, 1, zf)
    cases.write_dales_case(tmp_path, 1, zf, cases.bomex_profiles(zf))
    (tmp_path / "lscale.inp.001").unlink()
    with pytest.raises(InputError, match=r"lscale\.inp\.001: missing"):
        cases.read_dales_case(tmp_path, 1, zf)
    cases.write_dales_case(tmp_path, 1, zf, cases.bomex_profiles(zf))
    with pytest.raises(InputError, match=r"prof\.inp\.001: profiles end at 980 m, below .* 1500 m"):
        cases.read_dales_case(tmp_path, 1, np.array([20.0, 1500.0]))
    good = (tmp_path / "prof.inp.001").read_text().splitlines()
    _write(tmp_path / "prof.inp.001", good[:4] + [" ".join(good[4].split()[:4])] + good[5:])
    with pytest.raises(InputError, match=r"prof\.inp\.001: line 5 has 4 columns, expected 6"):
        cases.read_dales_case(tmp_path, 1, zf)
    _write(tmp_path / "prof.inp.001", good[:3] + ["100 300 0.01 x 0 1"] + good[4:])
    with pytest.raises(InputError, match=r"line 4 holds a value that is not a number"):
        cases.read_dales_case(tmp_path, 1, zf)
    _write(tmp_path / "prof.inp.001", good[:2] + [good[3], good[2]] + good[4:])
    with pytest.raises(InputError, match=r"heights must increase"):
        cases.read_dales_case(tmp_path, 1, zf)
    with pytest.raises(InputError, match="expnr"):
        cases.read_dales_case(tmp_path, "abc", zf)
    with pytest.raises(InputError, match="case folder not found"):
        cases.read_dales_case(tmp_path / "nope", 1, zf)
    for exc in (InputError,):
        try:
            cases.read_dales_case(tmp_path, 1, np.array([20.0, 1500.0]))
        except exc as e:
            assert "\n" not in str(e)


def test_the_sample_dales_bomex_case_is_bomex():
    folder = ROOT / "inputs" / "dales_bomex"
    zf = (np.arange(80) + 0.5) * 40.0
    got = cases.read_dales_case(folder, 1, zf)
    ref = cases.bomex_profiles(zf)
    for k in ("thl", "qt", "u", "ug", "wfls", "dthlrad", "dqtdt"):
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-9, atol=1e-18)
    prof = cases.profiles_for_model(got)
    assert set(prof) >= {"thl0", "qt0", "u0", "v0", "ug", "vg", "wfls", "dthlrad", "dqtdt"}


def test_dry_cbl_and_encroachment():
    zf = np.array([50.0, 450.0, 550.0, 1500.0])
    p = cases.cbl_profiles(zf, theta0=300.0, h0=500.0, gamma=0.006)
    np.testing.assert_allclose(p["thl"], [300, 300, 300.3, 306.0])
    assert not np.any(p["qt"])
    Q, gamma, t = 0.1, 0.006, 3600.0
    # the heat put in, (1 + 2A) Q t, fills the triangle between the mixed layer and the stable profile
    h = cases.encroachment_height(t, Q, gamma, A=0.0)
    assert 0.5 * gamma * h ** 2 == pytest.approx(Q * t)
    assert cases.encroachment_height(t, Q, gamma, h0=300.0, A=0.2) == pytest.approx(np.sqrt(300 ** 2 + 2 * 1.4 * Q * t / gamma))
    with pytest.raises(InputError, match="gamma"):
        cases.encroachment_height(t, Q, 0.0)


def test_the_dales_reference_data_file_reads_as_its_header_says():
    """The shipped DALES series: read independently with NumPy's CSV reader; the header names the
    repository, path and commit; hours 3-6 means as printed by ``les compare``."""
    text = cases.DALES_TMSER.read_text()
    for s in ("github.com/dalesteam/dales", "cases/bomex/results_3.2.0/tmser.001.nc",
              "a2ea9caf75a1968f042c2384d62be9d31d947481", "DALES 3.2", "modtimestat"):
        assert s in text, s
    ncomment = sum(line.startswith("#") for line in text.splitlines())
    ref = np.genfromtxt(cases.DALES_TMSER, delimiter=",", names=True, skip_header=ncomment)
    got = cases.dales_bomex_series()
    assert set(got) == set(ref.dtype.names) and len(got["time_s"]) == 480 - 1
    for name in ref.dtype.names:
        np.testing.assert_array_equal(got[name], np.nan_to_num(ref[name]) if name == "cc" else ref[name])
    np.testing.assert_array_equal(got["time_s"], np.arange(1, 480) * 60.0)
    sel = (ref["time_s"] >= 3 * 3600) & (ref["time_s"] <= 6 * 3600)
    means = cases.dales_bomex_reference()
    assert sel.sum() == 181 and means["lwp"] == pytest.approx(1e3 * ref["lwp_bar_kg_m2"][sel].mean())
    assert means["cloud_base_avg"] == pytest.approx(ref["zb_m"][sel].mean())
    # DALES writes a fill value (NaN in the file) for the cloud heights and the cover before the
    # first cloud; a cover of 0 is read back as 0
    assert np.isnan(ref["cc"][0]) and got["cc"][0] == 0.0 and np.isnan(got["zb_m"][0])
    assert means["cloud_cover"] == pytest.approx(0.1383, abs=1e-4) and means["zi_dales"] == pytest.approx(1620.0, abs=0.1)


def test_compare_bomex_flags_values_outside_the_ranges():
    t = np.arange(0, 6 * 3600 + 1, 60.0)
    ref = cases.dales_bomex_reference()
    good = {"time": t, **{k: np.where(t < 3 * 3600, 10 * v, v) for k, v in ref.items()}}   # hours 0-3 ignored
    rows = {r["name"]: r for r in cases.compare_bomex(good)}
    assert set(rows) == set(cases.BOMEX_MATCH) == set(cases.BOMEX_REFERENCE)
    assert all(r["ok"] for r in rows.values())
    for k, r in rows.items():
        assert r["value"] == pytest.approx(ref[k]) and r["dales"] == pytest.approx(ref[k])
        assert r["low"] < ref[k] < r["high"] and r["intercomparison"] is None
        assert (r["low"], r["high"]) == pytest.approx(cases.BOMEX_REFERENCE[k][:2])
    lo_base = rows["cloud_base_avg"]["low"]
    bad = dict(good, cloud_base_avg=np.full_like(t, lo_base - 1.0))
    del bad["lwp"]
    rows = {r["name"]: r for r in cases.compare_bomex(bad)}
    assert not rows["cloud_base_avg"]["ok"] and not rows["lwp"]["ok"] and np.isnan(rows["lwp"]["value"])
    assert sum(r["ok"] for r in rows.values()) == len(rows) - 2
    table = cases.format_comparison(list(rows.values()))
    assert f"| cloud_base_avg | mean over cloudy columns of the lowest cloudy level (DALES zb) | {lo_base - 1:.4g} |" in table
    assert "| lwp | " in table and "| n/a |" in table and "| not cited |" in table
    assert "tmser.001.nc" in table and "Siebesma et al. 2003" in table and "not cited" in table.splitlines()[-1]
    # the app's one-line summary at the end of a BOMEX run; nothing for a run that stops before 6 h
    line = cases.bomex_summary(good)
    assert line.startswith("BOMEX hours 3-6 against the DALES 3.2 reference run (matched definitions): ")
    assert f"cloud_cover {ref['cloud_cover']:.4g} (DALES {ref['cloud_cover']:.4g}, " in line
    assert line.endswith(f"; {len(rows)} of {len(rows)} within")
    line = cases.bomex_summary(bad)
    assert "cloud_base_avg" in line and "OUTSIDE" in line and line.endswith(f"{len(rows) - 2} of {len(rows)} within")
    short = {k: (v[t <= 5 * 3600] if v.shape == t.shape else v) for k, v in good.items()}
    assert cases.bomex_summary(short) is None
