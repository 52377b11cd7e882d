"""Kernel statistics and the steadiness test, against NumPy and the normal quantile."""
import math

import numpy as np
import pytest

from hpcsuite.tune import KernelStats, Model, z_value


def test_welford_matches_numpy():
    x = np.random.default_rng(0).exponential(1e-3, size=500)
    s = KernelStats()
    for v in x:
        s.add(float(v))
    assert s.n == 500 and s.mean == pytest.approx(x.mean(), rel=1e-12)
    assert s.variance == pytest.approx(x.var(ddof=1), rel=1e-10)
    assert s.stderr == pytest.approx(x.std(ddof=1) / math.sqrt(500), rel=1e-10)


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
