"""tune.stats at its edges, against independent references: the normal quantile (scipy.stats),
moments and their merges on the gathered samples (NumPy), the steadiness criterion at its
boundaries with exactly representable numbers, the snapshot log of statistics along the path, and
the JSON file read back. Written to kill the mutants that scripts/mutation.sh found surviving (issue
21 item 5); each test checks documented behaviour, not the implementation's wording."""
import json
import math
import re

import numpy as np
import pytest
from scipy import stats as sps

from hpcsuite.tune import KernelStats, Model, merge_moments, z_value
from hpcsuite.tune.stats import _unmerge

KEY = ("comp", "gemm", (64, 64, 64))


def _moments(x):
    x = np.asarray(x, float)
    return (x.size, float(x.mean()) if x.size else 0.0, float(((x - x.mean()) ** 2).sum()) if x.size else 0.0)


def _stats_of(x):
    s = KernelStats()
    for v in x:
        s.add(float(v))
    return s


@pytest.mark.parametrize("c", [0.5, 0.8, 0.9, 0.95, 0.99])
def test_z_value_is_the_two_sided_normal_quantile(c):
    assert z_value(c) == pytest.approx(sps.norm.ppf(0.5 + c / 2), rel=1e-12)
    assert Model(confidence=c).z == pytest.approx(sps.norm.ppf(0.5 + c / 2), rel=1e-12)


@pytest.mark.parametrize("sizes", [(1, 1), (1, 5), (5, 1), (2, 3), (30, 70)])
def test_merge_is_the_summary_of_the_union(sizes):
    rng = np.random.default_rng(sum(sizes))
    x = rng.lognormal(-5, 0.7, size=sum(sizes))
    a, b = x[:sizes[0]], x[sizes[0]:]
    n, mean, m2 = merge_moments(_moments(a), _moments(b))
    assert n == x.size and mean == pytest.approx(x.mean(), rel=1e-13)
    assert m2 == pytest.approx(_moments(x)[2], rel=1e-10)
    # symmetric in its arguments
    assert merge_moments(_moments(b), _moments(a)) == pytest.approx((n, mean, m2), rel=1e-12)


def test_merge_with_an_empty_summary_is_the_other_one():
    b = _moments([1.0, 2.0, 4.0])
    assert merge_moments((0, 0.0, 0.0), b) == b
    assert merge_moments(b, (0, 0.0, 0.0)) == b
    assert merge_moments((0, 0.0, 0.0), (0, 0.0, 0.0)) == (0, 0.0, 0.0)


@pytest.mark.parametrize("split", [1, 2, 9])
def test_unmerge_gives_the_rest_of_the_samples(split):
    x = np.random.default_rng(split).exponential(1e-3, size=10)
    n, m, q = _unmerge(_moments(x), _moments(x[:split]))
    ref = _moments(x[split:])
    assert n == ref[0] and m == pytest.approx(ref[1], rel=1e-10)
    assert q == pytest.approx(ref[2], rel=1e-7, abs=1e-20)


def test_unmerge_of_everything_or_more_is_empty_and_never_negative():
    x = _moments([1.0, 2.0, 3.0])
    assert _unmerge(x, x) == (0, 0.0, 0.0)
    assert _unmerge(_moments([1.0, 2.0]), x) == (0, 0.0, 0.0)       # more than the total: empty
    # identical samples: the rest has no spread (exactly 0, not a rounding residue below it)
    assert _unmerge(_moments([1.0] * 5), _moments([1.0] * 2)) == (3, 1.0, 0.0)
    # a residue of rounding below zero is clamped to 0
    n, m, q = _unmerge((3, 0.1, 0.0), (1, 0.3, 0.0))
    assert n == 2 and m == pytest.approx(0.0, abs=1e-15) and q == 0.0


def test_variance_and_stderr_need_two_samples():
    s = KernelStats()
    assert s.variance == math.inf and s.stderr == math.inf and s.moments == (0, 0.0, 0.0)
    s.add(2.0)
    assert s.variance == math.inf and s.stderr == math.inf and s.moments == (1, 2.0, 0.0)
    s.add(4.0)
    assert s.variance == pytest.approx(np.var([2.0, 4.0], ddof=1)) == 2.0
    assert s.stderr == pytest.approx(sps.sem([2.0, 4.0]), rel=1e-14)
    x = np.random.default_rng(3).normal(1.0, 0.1, 7)
    t = _stats_of(x)
    assert t.moments == pytest.approx(_moments(x), rel=1e-12)
    assert t.stderr == pytest.approx(sps.sem(x), rel=1e-12)


def test_steadiness_is_a_strict_bound_on_the_relative_half_width():
    # n = 4, M2 = 0.75: variance 0.25, stderr sqrt(0.25 / 4) = 0.25 exactly; mean 1 -> width 0.25 z
    s = KernelStats(4, 1.0, 0.75)
    assert s.stderr == 0.25
    assert not s.steady(1.0, 0.25, 2)            # equal to the tolerance: not below it
    assert s.steady(1.0, 0.2500001, 2)
    assert s.steady(0.5, 0.125 + 1e-12, 2) and not s.steady(0.5, 0.125, 2)   # z scales the width
    assert s.steady(1.0, 0.2500001, 4)           # exactly min_samples is enough
    assert not s.steady(1.0, 0.2500001, 5)       # one fewer is not
    # scipy's t-free normal interval agrees on the criterion
    x = np.random.default_rng(1).normal(2.0, 0.05, 12)
    k = _stats_of(x)
    z = sps.norm.ppf(0.975)
    width = z * sps.sem(x) / x.mean()
    assert k.steady(z, width * 1.001, 3) and not k.steady(z, width * 0.999, 3)


def test_steadiness_needs_two_samples_and_a_positive_mean():
    exact2 = KernelStats(2, 1.0, 0.0)            # two equal samples: zero width
    assert exact2.steady(1.96, 0.05, 2)
    assert not exact2.steady(1.96, 0.05, 3)
    assert not KernelStats(1, 1.0, 0.0).steady(1.96, 0.05, 1)   # one sample never (min 2)
    assert not KernelStats(5, 0.0, 0.0).steady(1.96, 0.05, 2)   # a zero mean: no relative width
    assert not KernelStats(5, -1.0, 0.0).steady(1.96, 0.05, 2)


def test_model_parameters_are_checked_with_their_names():
    for kw, text in ((dict(tolerance=0), "tolerance must be in (0, 1), got 0"),
                     (dict(tolerance=1), "tolerance must be in (0, 1), got 1"),
                     (dict(confidence=0), "confidence must be in (0, 1), got 0"),
                     (dict(confidence=1), "confidence must be in (0, 1), got 1"),
                     (dict(min_samples=1), "min_samples must be an integer >= 2, got 1"),
                     (dict(min_samples=2.0), "min_samples must be an integer >= 2, got 2.0"),
                     (dict(min_samples="3"), "min_samples must be an integer >= 2, got '3'")):
        with pytest.raises(ValueError, match="^" + re.escape(text) + "$"):
            Model(**kw)
    m = Model(tolerance=1e-9, confidence=0.999, min_samples=2)     # just inside every range
    assert (m.tolerance, m.confidence, m.min_samples) == (1e-9, 0.999, 2)
    m = Model(tolerance=0.999, confidence=1e-3)
    assert (m.tolerance, m.confidence, m.min_samples) == (0.999, 1e-3, 3)
    d = Model()
    assert (d.tolerance, d.confidence, d.min_samples) == (0.05, 0.95, 3)
    # the fresh state: nothing measured, learned, logged or sent, no origin
    assert (d.kernels, d.remote, d.changes, d.sent, d.origin, len(d)) == ({}, {}, [], {}, None, 0)


def test_stats_creates_once():
    m = Model()
    s = m.stats(KEY)
    assert m.stats(KEY) is s and m.kernels == {KEY: s} and len(m) == 1 and s.moments == (0, 0.0, 0.0)


def test_own_or_merged_statistics_decide_steadiness_and_the_charged_mean():
    m = Model(tolerance=0.1, confidence=0.9, min_samples=3)
    m.origin = 0
    assert not m.steady(KEY) and m.mean(KEY) == 0.0          # unknown: never skipped, costs nothing
    assert m.merged(KEY).moments == (0, 0.0, 0.0)           # no statistics at all: an empty summary
    own = [1.0, 1.2]
    for t in own:
        m.record(KEY, t)
    assert not m.steady(KEY)                                 # two samples of three needed
    assert m.mean(KEY) == pytest.approx(1.1)                 # nothing from others: its own mean
    assert m.merged(KEY).moments == pytest.approx(_moments(own))
    # another rank's 6 samples of the same kernel: the merge is steady, its mean is charged
    other = [1.1, 1.05, 1.15, 1.1, 1.1, 1.1]
    assert m.learn(1, KEY, *_moments(other))
    assert m.merged(KEY).moments == pytest.approx(_moments(own + other), rel=1e-12)
    z = sps.norm.ppf(0.95)
    assert z * sps.sem(own + other) / np.mean(own + other) < 0.1
    assert m.steady(KEY) and m.mean(KEY) == pytest.approx(np.mean(own + other), rel=1e-12)
    # a kernel known only from another rank
    k2 = ("comm", "Bcast", 2, 64)
    assert m.learn(2, k2, *_moments([2.0, 2.0, 2.0]))
    assert k2 not in m.kernels and m.steady(k2) and m.mean(k2) == 2.0
    # own statistics steady: the own mean, even if the merge says otherwise
    k3 = ("comp", "potrf", (8,))
    for t in (3.0, 3.0, 3.0):
        m.record(k3, t)
    m.learn(1, k3, *_moments([1.0, 9.0, 1.0, 9.0]))
    assert m.steady(k3) and m.mean(k3) == 3.0
    assert m.merged(k3).mean == pytest.approx(np.mean([3, 3, 3, 1, 9, 1, 9]))
    # own statistics steady without any snapshot
    k4 = ("comp", "trsm", (4,))
    for t in (0.5, 0.5, 0.5):
        m.record(k4, t)
    assert m.steady(k4) and m.mean(k4) == 0.5 and m.merged(k4).moments == (3, 0.5, 0.0)
    # neither own nor merged steady: not skipped, but the merged mean is what would be charged
    k5 = ("comp", "syrk", (4,))
    m.record(k5, 1.0)
    m.learn(3, k5, *_moments([5.0]))
    assert not m.steady(k5) and m.mean(k5) == pytest.approx(3.0)


def test_own_samples_are_logged_at_doubling_counts_from_min_samples():
    for min_samples, logged_at in ((2, [2, 4, 8, 16]), (3, [4, 8, 16]), (4, [4, 8, 16]), (5, [8, 16])):
        m = Model(min_samples=min_samples)
        m.origin = 5
        at = []
        for i in range(1, 17):
            m.record(KEY, 1.0 + 0.01 * i)
            if len(m.changes) > len(at):
                at.append(i)
        assert at == logged_at, min_samples
        assert set(m.changes) == {(5, KEY)}
    quiet = Model(min_samples=2)                   # no origin (not sharing): nothing is logged
    for _ in range(8):
        quiet.record(KEY, 1.0)
    assert quiet.changes == [] and quiet.kernels[KEY].n == 8


def test_known_lists_own_and_learned_snapshots():
    m = Model()
    m.record(KEY, 1.0)
    assert m.known() == []                         # no origin: own samples are not shared
    m.learn(3, ("k",), 2, 1.0, 0.0)
    assert m.known() == [(3, ("k",))]
    m.origin = 0
    m.learn(4, ("k",), 2, 1.0, 0.0)
    m.learn(4, KEY, 2, 1.0, 0.0)
    assert sorted(m.known(), key=repr) == sorted([(0, KEY), (3, ("k",)), (4, ("k",)), (4, KEY)], key=repr)


def test_snapshots_and_learning():
    m = Model(min_samples=2)
    m.origin = 0
    assert m.snapshot(0, KEY) is None and m.snapshot(1, KEY) is None
    x = [1.0, 1.5, 1.9]                           # within 2x of the fastest: none clipped
    for t in x:
        m.record(KEY, t)
    assert m.snapshot(0, KEY) == pytest.approx(_moments(x))
    # learning: only newer snapshots of other ranks, never an empty one or this rank's own
    assert not m.learn(1, KEY, 0, 0.0, 0.0) and KEY not in m.remote
    assert not m.learn(1, KEY, -1, 0.0, 0.0) and KEY not in m.remote
    assert not m.learn(0, KEY, 5, 9.0, 0.0) and m.snapshot(0, KEY) == pytest.approx(_moments(x))
    m.changes.clear()
    assert m.learn(1, KEY, 1, 7.0, 0.0) and m.snapshot(1, KEY) == (1, 7.0, 0.0)
    assert m.changes == [(1, KEY)]                # new: forwarded
    assert not m.learn(1, KEY, 1, 8.0, 0.0) and m.snapshot(1, KEY) == (1, 7.0, 0.0)   # same count
    assert m.learn(1, KEY, 2, 7.5, 0.5) and m.changes == [(1, KEY)] * 2          # doubled: forwarded
    assert m.learn(1, KEY, 3, 7.0, 1.0) and m.changes == [(1, KEY)] * 2          # newer, not doubled
    assert m.snapshot(1, KEY) == (3, 7.0, 1.0) and m.snapshot(2, KEY) is None
    assert m.learn(1, KEY, 5, 7.0, 2.0) and len(m.changes) == 2                  # 5 < 2 * 3
    assert m.learn(1, KEY, 9, 7.0, 2.0) and len(m.changes) == 2                  # 9 < 2 * 5
    assert m.learn(1, KEY, 18, 7.0, 2.0) and len(m.changes) == 3                 # 18 = 2 * 9
    assert m.remote == {KEY: {1: (18, 7.0, 2.0)}}
    assert m.snapshot(1, ("other",)) is None


def test_rescale_multiplies_times():
    m = Model(min_samples=2)
    m.origin = 0
    x = np.array([1.0, 1.5, 1.9])                 # within 2x of the fastest: none clipped
    for t in x:
        m.record(KEY, float(t))
    m.learn(1, KEY, *_moments([2.0, 4.0]))
    m.rescale(3.0)
    assert m.kernels[KEY].moments == pytest.approx(_moments(3.0 * x), rel=1e-12)
    assert m.kernels[KEY].stderr == pytest.approx(sps.sem(3.0 * x), rel=1e-12)
    assert m.snapshot(1, KEY) == pytest.approx(_moments([6.0, 12.0]), rel=1e-12)
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="^" + re.escape(f"rescale factor must be positive, got {bad}") + "$"):
            m.rescale(bad)
    assert m.kernels[KEY].mean == pytest.approx(3.0 * x.mean())     # untouched by the refusals


def test_rescale_applies_to_the_loaded_base_too(tmp_path):
    m = Model(min_samples=2)
    for t in (1.0, 2.0, 3.0):
        m.stats(KEY).add(t)
    m.save(tmp_path / "m.json")
    w = Model.load(tmp_path / "m.json")
    w.origin = 0
    w.rescale(2.0)
    for t in (4.0, 8.0):                          # new samples at the rescaled speed
        w.record(KEY, t)
    # the snapshot is only the new samples: the loaded (rescaled) ones are taken out again
    assert w.snapshot(0, KEY) == pytest.approx(_moments([4.0, 8.0]), rel=1e-9, abs=1e-12)


def test_save_and_load_round_trip(tmp_path):
    m = Model(tolerance=0.2, confidence=0.8, min_samples=4)
    keys = [("comp", "gemm", (64, (1, 2), 3)), ("comm", "Bcast", 4, 512), ("comp", "x", ())]
    for i, k in enumerate(keys):
        for t in (1.0, 1.5, 2.0 + i):
            m.stats(k).add(t * (i + 1))
    path = tmp_path / "model.json"
    m.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["model.json"]     # written atomically, no leftover
    data = json.loads(path.read_text())
    assert (data["tolerance"], data["confidence"], data["min_samples"]) == (0.2, 0.8, 4)
    assert data == m.to_json()
    w = Model.load(path)
    assert (w.tolerance, w.confidence, w.min_samples) == (0.2, 0.8, 4)
    assert w.z == pytest.approx(sps.norm.ppf(0.9))
    assert list(w.kernels) == keys                  # tuple keys (nested too) come back as tuples
    for k in keys:
        assert w.kernels[k].moments == m.kernels[k].moments
    o = Model.load(str(path), tolerance=0.3, min_samples=2)      # overrides; a str path works too
    assert (o.tolerance, o.confidence, o.min_samples) == (0.3, 0.8, 2)
    # a loaded model's own snapshot holds only samples measured after loading (every rank has the
    # file): none yet, then the new ones
    w.origin = 0
    assert w.snapshot(0, keys[1]) == (0, 0.0, 0.0)
    w.record(keys[1], 10.0)
    w.record(keys[1], 14.0)
    assert w.snapshot(0, keys[1]) == pytest.approx(_moments([10.0, 14.0]), rel=1e-9)
    assert w.snapshot(0, keys[0]) == (0, 0.0, 0.0)
    # saving over an existing file replaces it
    w.save(path)
    assert Model.load(path).kernels[keys[1]].n == 5 and len(list(tmp_path.iterdir())) == 1


def test_load_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="^" + re.escape(f"tuning model {missing} does not exist") + "$"):
        Model.load(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="^" + re.escape(f"tuning model {bad} is not valid JSON: ")):
        Model.load(bad)


# ---------------------------------------------------------------- the tolerance shared out by weight
# Own samples with a relative half-width of about 0.16 at 95 %: wider than the path's tolerance
# 0.05, narrower than 0.05 / sqrt(0.04) = 0.25 (the tolerance of a kernel that is 4 % of the path).
# All within 2x of the fastest (0.8): none clipped.
OWN = [1.0, 1.2, 0.8, 1.0]
OTHER = [3.0, 3.0, 3.0]                            # another rank's samples of the same kernel


def _half_width(x, confidence=0.95):
    return sps.norm.ppf(0.5 + confidence / 2) * sps.sem(x) / np.mean(x)


def _model_with_own_samples():
    m = Model(tolerance=0.05, confidence=0.95, min_samples=3)
    m.origin = 0
    for t in OWN:
        m.record(KEY, t)
    assert 0.05 < _half_width(OWN) < 0.25       # the premise of the tests below
    return m


def test_a_running_share_estimate_sets_the_tolerance_of_a_kernel_with_no_recorded_share():
    from hpcsuite.tune.stats import MAX_HALF_WIDTH
    m = _model_with_own_samples()
    assert m.tolerance_of(KEY) == 0.05                       # no share at all: the whole path
    assert m.tolerance_of(KEY, 0.04) == pytest.approx(0.05 / math.sqrt(0.04), rel=1e-12)
    assert m.tolerance_of(KEY, 1e-4) == MAX_HALF_WIDTH       # 0.05 / 0.01 = 5, capped
    # the running estimate decides steadiness and which mean is charged
    assert not m.steady(KEY) and m.steady(KEY, share=0.04)
    m.learn(1, KEY, *_moments(OTHER))
    assert _half_width(OWN + OTHER) > 0.25                   # the merge is not steady either way
    # own statistics steady at the kernel's tolerance: its own mean (times differ by rank) ...
    assert m.mean(KEY, share=0.04) == pytest.approx(np.mean(OWN), rel=1e-12)
    # ... else the merged one
    assert m.mean(KEY) == pytest.approx(np.mean(OWN + OTHER), rel=1e-12)


def test_a_recorded_share_wins_over_the_running_estimate():
    m = _model_with_own_samples()
    m.learn(1, KEY, *_moments(OTHER))
    path = 4 * np.mean(OWN) / 0.04                           # 4 calls of KEY are 4 % of the path
    m.note_shares({KEY: 4}, float(path))
    assert m.share[KEY] == pytest.approx(0.04, rel=1e-12)
    for estimate in (None, 1.0, 1e-4):
        assert m.tolerance_of(KEY, estimate) == pytest.approx(0.25, rel=1e-12)
    assert m.steady(KEY) and m.steady(KEY, share=1.0)
    assert m.mean(KEY) == pytest.approx(np.mean(OWN), rel=1e-12)    # own steady at 0.25: own mean


def test_a_share_is_a_fraction_of_the_path():
    """A kernel is at most the whole path: a recorded share is at most 1, and a share (or running
    estimate) of 1 or more gives the path's own tolerance, never a tighter one."""
    m = _model_with_own_samples()
    m.note_shares({KEY: 10}, 2.0)                 # charged 10 x 1.0 against a predicted path of 2
    assert m.share[KEY] == 1.0 and m.tolerance_of(KEY) == 0.05
    fresh = Model(tolerance=0.05)
    for estimate in (1.0, 1.5, 3.0):
        assert fresh.tolerance_of(KEY, estimate) == 0.05


def test_shares_use_the_other_ranks_mean_when_this_rank_has_none():
    m = Model(tolerance=0.05)
    m.origin = 0
    remote_only, empty_here = ("comm", "Bcast", 2, 64), ("comp", "potrf", (8,))
    m.learn(1, remote_only, *_moments([2.0, 2.0, 4.0]))
    m.stats(empty_here)                           # own statistics without a sample: as none
    m.learn(2, empty_here, *_moments([1.0, 3.0]))
    for t in (1.0, 1.0, 1.0):
        m.record(KEY, t)
    m.learn(3, KEY, *_moments([5.0, 5.0, 5.0]))   # own samples: its own mean, not the merge
    m.note_shares({remote_only: 3, empty_here: 5, KEY: 2}, 40.0)
    assert m.share[remote_only] == pytest.approx(3 * np.mean([2.0, 2.0, 4.0]) / 40, rel=1e-12)
    assert m.share[empty_here] == pytest.approx(5 * 2.0 / 40, rel=1e-12)
    assert m.share[KEY] == pytest.approx(2 * 1.0 / 40, rel=1e-12)


@pytest.mark.parametrize("path", [0.0, -1.0, math.nan])
def test_a_run_without_a_positive_path_records_no_share(path):
    m = _model_with_own_samples()
    m.note_shares({KEY: 3}, path)
    assert m.share == {} and m.tolerance_of(KEY, 0.04) == pytest.approx(0.25, rel=1e-12)


def test_a_kernel_measured_nowhere_gets_no_share():
    """A run that kept no samples (a configuration's first run) must not record a share of 0 for
    the kernels it met: that would give them the widest tolerance (MAX_HALF_WIDTH) in the next
    run however much of the path they are; their running estimate applies instead."""
    m = Model(tolerance=0.05)
    new = ("comp", "potrf", (96,))
    m.note_shares({new: 100}, 1.0)
    assert new not in m.share
    assert m.tolerance_of(new, 0.81) == pytest.approx(0.05 / 0.9, rel=1e-12)
