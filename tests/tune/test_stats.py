"""Kernel statistics and the steadiness test, against NumPy and the normal quantile."""
import math

import numpy as np
import pytest

from hpcsuite.tune import KernelStats, Model, z_value
from hpcsuite.tune.stats import CLIP_ABOVE_FASTEST


def test_welford_matches_numpy():
    x = np.random.default_rng(0).uniform(1e-3, 1.9e-3, size=500)     # within 2x: none clipped
    s = KernelStats()
    for v in x:
        s.add(float(v))
    assert s.n == 500 and s.mean == pytest.approx(x.mean(), rel=1e-12)
    assert s.variance == pytest.approx(x.var(ddof=1), rel=1e-10)
    assert s.stderr == pytest.approx(x.std(ddof=1) / math.sqrt(500), rel=1e-10)


def test_samples_are_clipped_at_twice_the_fastest_so_far():
    """Preemption only adds time: a sample counts as at most CLIP_ABOVE_FASTEST (2) times the fastest
    sample before it (or itself); the moments are those of the clipped samples."""
    assert CLIP_ABOVE_FASTEST == 2.0
    s = KernelStats()
    for v in (1.0, 5.0, 0.8, 3.0, 1.7):
        s.add(v)
    clipped = np.array([1.0, 2.0, 0.8, 1.6, 1.6])
    assert s.fastest == 0.8 and s.n == 5
    assert s.mean == pytest.approx(clipped.mean(), rel=1e-12)
    assert s.variance == pytest.approx(clipped.var(ddof=1), rel=1e-12)
    # a preempted sample (1000x) moves the mean of 9 samples by at most 1/9 of the fastest
    t = KernelStats()
    for v in [1e-5] * 8 + [1e-2]:
        t.add(v)
    assert t.mean == pytest.approx(1e-5 * (1 + 1 / 9), rel=1e-12)
    # a zero time (timer resolution) clips nothing after it to zero
    z = KernelStats()
    z.add(0.0)
    z.add(1e-6)
    assert z.mean == pytest.approx(0.5e-6)
    # a rescaled model clips new samples against its rescaled fastest
    m = Model(min_samples=2)
    m.record(("k",), 1.0)
    m.rescale(3.0)
    m.record(("k",), 10.0)
    assert m.kernels[("k",)].fastest == 3.0 and m.kernels[("k",)].mean == pytest.approx((3.0 + 6.0) / 2)


def test_steadiness_criterion():
    assert z_value(0.95) == pytest.approx(1.959964, rel=1e-6)
    m = Model(tolerance=0.05, confidence=0.95, min_samples=3)
    k = ("comp", "gemm", (64, 64, 64))
    for t in (1.0, 1.0):
        m.stats(k).add(t)
    assert not m.steady(k)                      # fewer than min_samples
    m.stats(k).add(1.0)
    assert m.steady(k)                          # zero variance, enough samples
    k2 = ("comp", "x", ())
    for t in (1.0, 2.0, 1.0, 2.0):
        m.stats(k2).add(t)
    s = m.stats(k2)
    assert (1.959964 * s.stderr / s.mean < 0.05) is m.steady(k2) is False
    assert not m.steady(("never", "seen"))


def test_tolerance_shared_out_by_the_kernels_share_of_the_path():
    """A kernel taking the fraction ``share`` of the path needs a relative half-width below
    ``tolerance / sqrt(share)`` (capped at MAX_HALF_WIDTH): the kernels' absolute half-widths
    times their calls then add in quadrature to at most ``tolerance`` x the path (checked on
    the shares recorded from a run's calls and path)."""
    from hpcsuite.tune.stats import MAX_HALF_WIDTH
    m = Model(tolerance=0.05, confidence=0.95, min_samples=2)
    big, small = ("comp", "big", ()), ("comp", "small", ())
    rng = np.random.default_rng(1)
    for t in rng.normal(1e-2, 1e-4, 8):                      # 1 % spread: steady on its own
        m.stats(big).add(float(t))
    for t in 1e-5 * (1 + rng.exponential(1.0, 30)):         # heavy tail: about 0.35 relative
        m.stats(small).add(float(t))
    s = m.stats(small)
    half = m.z * s.stderr / s.mean
    assert 0.05 < half < MAX_HALF_WIDTH and m.steady(big) and not m.steady(small)
    calls = {big: 20, small: 100}                            # one run: 20 big, 100 small calls
    path = 20 * m.stats(big).mean + 100 * s.mean
    m.note_shares(calls, path)
    share = 100 * s.mean / path
    assert m.share[small] == pytest.approx(share, rel=1e-12) and share < 0.02
    assert m.tolerance_of(small) == pytest.approx(min(0.05 / math.sqrt(share), MAX_HALF_WIDTH))
    assert m.steady(small) is (half < m.tolerance_of(small)) is True
    # the path's error bound: the kernels' absolute half-widths x calls, added in quadrature
    err = math.sqrt(sum((c * m.z * m.stats(k).stderr) ** 2 for k, c in calls.items()))
    assert err < 0.05 * path
    # a kernel that is the whole path keeps the single-kernel tolerance; never above the cap
    m.note_shares({small: 1}, s.mean)
    assert m.tolerance_of(small) == 0.05 and not m.steady(small)
    m.note_shares({small: 1}, 1e9 * s.mean)
    assert m.tolerance_of(small) == MAX_HALF_WIDTH


@pytest.mark.parametrize("kw,msg", [(dict(tolerance=0), "tolerance"), (dict(tolerance=1.5), "tolerance"),
                                    (dict(confidence=1.0), "confidence"), (dict(min_samples=1), "min_samples")])
def test_bad_parameters(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Model(**kw)


def test_model_round_trip(tmp_path):
    m = Model(0.1, 0.9, 4)
    for t in (1.0, 1.1, 0.9, 1.0):
        m.stats(("comm", "Bcast", 4, 512)).add(t)
        m.stats(("comp", "potrf", (128,))).add(2 * t)
    m.save(tmp_path / "model.json")
    m2 = Model.load(tmp_path / "model.json")
    assert (m2.tolerance, m2.confidence, m2.min_samples) == (0.1, 0.9, 4)
    for k, s in m.kernels.items():
        assert m2.kernels[k].n == s.n and m2.kernels[k].mean == s.mean and m2.kernels[k].m2 == s.m2
    assert m2.steady(("comp", "potrf", (128,))) == m.steady(("comp", "potrf", (128,)))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Model.load(tmp_path / "nope.json")
