"""tomo: the Savu-style pipeline at 1-4 ranks on tmpfs (HDF5 and object intermediates), on disk,
and on a real Ceph cluster. The reconstruction is checked in the test against a phantom built here
from scikit-image's Shepp-Logan image (independently of the app) and against scikit-image's FBP of
noiseless projections; results must not depend on the rank count."""
import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from helpers import HPCSUITE

SMALL = dict(size=32, slices=4, angles=40)
# The bound on the reconstruction's relative L2 error for these decks, near what the pipeline
# achieves: measured 0.397 with seed 0 (the tests' seed; the same at 1-4 ranks), 0.383-0.397 over
# seeds 0-2, and 0.748-0.768 without the ring filter (hpcsuite run on the SMALL deck, 2026-12-01).
MAX_ERROR = 0.41


def deck_text(out, backend="tmpfs", extra_staging="", ring=True, size=32, slices=4, angles=40, sdir=""):
    return f"""[app]
name = "tomo"
[phantom]
size = {size}
slices = {slices}
angles = {angles}
[pipeline]
ring_filter = {'true' if ring else 'false'}
[staging]
backend = "{backend}"
dir = "{sdir}"
{extra_staging}
[output]
file = "{out}"
max_error = {MAX_ERROR}
"""


def run_tomo(run, tmp_path, tag, nranks=1, rc=0, **kw):
    out = tmp_path / f"{tag}.h5"
    deck = tmp_path / f"{tag}.toml"
    deck.write_text(deck_text(out, **kw))
    p = run([HPCSUITE, "run", deck], nranks=nranks, timeout=180)
    assert p.returncode == rc, p.stdout + p.stderr
    m = re.search(r"relative L2 = ([0-9.]+)", p.stdout)
    with h5py.File(out, "r") as f:
        return p, float(m.group(1)), f["recon"][...], f["phantom"][...], dict(f.attrs)


def independent_phantom(k, nz, n):
    """The documented 3-D phantom, written out here: Shepp-Logan scaled by 0.65 + 0.35 sin(...)."""
    from skimage.data import shepp_logan_phantom
    from skimage.transform import resize
    m = max(4, int(round(n * (0.65 + 0.35 * np.sin(np.pi * (k + 0.5) / nz)))))
    img = np.zeros((n, n))
    o = (n - m) // 2
    img[o:o + m, o:o + m] = resize(shepp_logan_phantom(), (m, m), order=1, anti_aliasing=True)
    for i in range(n):                       # zero outside the circle radon() requires
        for j in range(n):
            if (i - n // 2) ** 2 + (j - n // 2) ** 2 > (n // 2) ** 2:
                img[i, j] = 0.0
    return img


def rel_err(a, b, n):
    yy, xx = np.mgrid[:n, :n] - (n - 1) / 2
    mask = np.hypot(xx, yy) < n / 2 - 1
    return np.sqrt(((a - b)[:, mask] ** 2).sum() / (b[:, mask] ** 2).sum())


def test_same_reconstruction_at_1_to_4_ranks_and_checked_against_the_phantom(run, tmp_path):
    results = {}
    for n in (1, 2, 3, 4):
        p, err, recon, phantom, attrs = run_tomo(run, tmp_path, f"r{n}", nranks=n)
        results[n] = recon
        assert attrs["ranks"] == n and attrs["layout"] == "hdf5"
    ph = np.stack([independent_phantom(k, 4, 32) for k in range(4)])
    np.testing.assert_allclose(phantom, ph, atol=1e-6)
    mine = rel_err(results[1], ph, 32)
    assert mine == pytest.approx(err, rel=1e-3)            # the printed error is the real one
    assert mine < MAX_ERROR
    for n in (2, 3, 4):
        np.testing.assert_allclose(results[n], results[1], rtol=0, atol=1e-5)
    # against scikit-image's FBP of noiseless projections: the pipeline adds only noise and rings
    from skimage.transform import iradon, radon
    th = np.linspace(0, 180, 40, endpoint=False)
    clean = np.stack([iradon(radon(s, th, circle=True), th, circle=True) for s in ph])
    assert rel_err(clean, ph, 32) < 0.19     # what FBP itself can do at this size: 0.180 (noiseless)
    assert rel_err(results[1], clean, 32) < 0.39   # the rest is photon noise and rings: 0.372 (seed 0)
    assert not list(Path("/dev/shm").glob("hpcsuite-store-*-tomo-*"))   # private store removed


def test_ring_filter_reduces_the_error(run, tmp_path):
    _, with_filter, *_ = run_tomo(run, tmp_path, "ring", **SMALL)
    p, without, *_ = run_tomo(run, tmp_path, "noring", ring=False, rc=1)   # rings: above the bound
    assert with_filter < MAX_ERROR < without and f"ABOVE the bound {MAX_ERROR:g}" in p.stdout


def test_object_layout_and_disk_backend_give_the_same_result(run, tmp_path):
    *_, ref, _, _ = run_tomo(run, tmp_path, "ref", nranks=2)
    p, _, objs, _, attrs = run_tomo(run, tmp_path, "obj", nranks=2, extra_staging='layout = "objects"')
    assert attrs["layout"] == "objects"
    np.testing.assert_array_equal(objs, ref)
    disk = tmp_path / "inter"
    p, _, d, _, attrs = run_tomo(run, tmp_path, "disk", nranks=2, backend="disk",
                                 extra_staging=f'disk_dir = "{disk}"\nkeep = true')
    np.testing.assert_array_equal(d, ref)
    with h5py.File(tmp_path / "disk.h5", "r") as f:          # kept intermediates are linked
        assert set(f["intermediate"]) == {"raw", "corrected", "filtered", "recon"}
        np.testing.assert_array_equal(f["intermediate/recon/data"][...], ref)
    assert "timing: io" in p.stdout


def test_bad_decks_fail_with_one_line(run, tmp_path):
    deck = tmp_path / "d.toml"
    deck.write_text(deck_text(tmp_path / "o.h5", slices=2))
    p = run([HPCSUITE, "run", deck], nranks=3)
    assert p.returncode == 2 and "[phantom] slices" in p.stderr and p.stderr.strip().count("\n") == 0
    deck.write_text(deck_text(tmp_path / "o.h5", backend="rados", sdir=tmp_path / "none"))
    p = run([HPCSUITE, "run", deck], nranks=2)
    assert p.returncode == 2 and "[staging] dir" in p.stderr and "no staging deployment there" in p.stderr
    deck.write_text(deck_text(tmp_path / "o.h5", backend="tmpfs", extra_staging='layout = "hdf"'))
    p = run([HPCSUITE, "run", deck])
    assert p.returncode == 2 and "[staging] layout" in p.stderr


@pytest.mark.skipif(not Path("/usr/bin/ceph-mon").exists(), reason="Ceph not installed")
@pytest.mark.timeout(240)
def test_on_a_ceph_cluster(run, tmp_path):
    d = tmp_path / "ceph"
    p = run([HPCSUITE, "stage", "up", "--backend", "rados", "--osd-size", "512M", "--dir", d], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        p, err, recon, _, attrs = run_tomo(run, tmp_path, "ceph", nranks=2, backend="rados", sdir=d)
        assert attrs["layout"] == "objects" and err < MAX_ERROR
        *_, ref, _, _ = run_tomo(run, tmp_path, "ref", nranks=1)
        np.testing.assert_array_equal(recon, ref)
        st = run([HPCSUITE, "stage", "status", "--json", "--dir", d])
        assert st.returncode == 0 and json.loads(st.stdout)["health"].startswith("HEALTH_"), st.stdout
        # intermediates deleted at the end: the pool listing is exact (status's object count comes
        # from the manager's usage statistics, which lag by seconds)
        ls = run([HPCSUITE, "stage", "ls", "--dir", d])
        assert ls.returncode == 0 and ls.stdout.strip() == "", ls.stdout
    finally:
        p = run([HPCSUITE, "stage", "down", "--dir", d])
        assert p.returncode == 0 and not d.exists()
