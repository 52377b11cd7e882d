"""The autotuner on a synthetic program whose cost per configuration is known exactly."""
import math
import statistics
import time

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.runtime import compute
from hpcsuite.tune import Autotuner, Model, Space
from hpcsuite.tune.tuner import STOP_LITTLE_RAN

UNIT = 0.002           # seconds; a configuration (a, b) costs about steps * UNIT * a * b


def make_run(team, steps=8):
    buf = np.zeros(16)

    def run(cfg):
        a, b = cfg["a"], cfg["b"]
        if cfg.get("broken"):
            raise ValueError("this configuration cannot work for the matrix")
        for _ in range(steps):
            compute("work", (a, b), time.sleep, UNIT * a * b)
            team.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return run


@pytest.mark.mpi
def test_grid_search_skips_work_and_keeps_the_best_among_the_finalists(team):
    space = Space({"a": [1, 2, 3], "b": [1, 2, 4]}, constraints=[lambda c: c["a"] * c["b"] != 6])
    tuner = Autotuner(space, make_run(team), strategy="grid", tolerance=0.1, confidence=0.9, min_samples=2)
    assert len(tuner.configs) == 8                     # 9 minus the constrained-out (3, 2)
    res = tuner.tune(compare_full=True)
    assert res.true_best_config in tuner.configs and res.best_config in res.finalists
    ok = [r for r in res.results if r.status == "ok"]
    assert len(ok) == 8 and sum(r.skipped > 0 for r in ok) >= 4   # most configurations skipped work
    assert res.skipped_fraction > 0.2
    assert "predicted s" in res.table() and res.to_json()["speedup"] is not None
    # the accuracy is judged in test_prediction_error_within_the_measured_noise (1-2 ranks)


def noise_bound(res) -> float:
    """The bound on the mean prediction error of a search with ``compare_full``: each
    configuration's full runs spread by a relative standard deviation, whose median s says how
    precisely one configuration's time can be known in this run; bound = max(0.2, 4 s).
    Measured with this test's search on the shared 2-core machine (other jobs at a load of
    18-20): 1 rank s = 0.065-0.16, errors 0.08-0.21 (at most 3.3 s); 2 ranks s = 0.08-0.24,
    errors 0.10-0.67 (two of six above 4 s: hence the second search below); a model charging
    3-8x its means gave errors 1.5-9.2."""
    spreads = sorted(statistics.stdev(r.full_runs) / statistics.fmean(r.full_runs)
                     for r in res.results if len(r.full_runs) > 1)
    return max(0.2, 4 * statistics.median(spreads))


class ScaledModel(Model):
    """A deliberately broken model: charges ``factor`` times the mean of every skipped kernel."""

    factor = 1.0

    def mean(self, key, **kw):
        return self.factor * super().mean(key, **kw)


def _search(team, model):
    space = Space({"a": [1, 2, 3], "b": [1, 2]})
    tuner = Autotuner(space, make_run(team, steps=4), model=model, iterations=3, remeasure=2)
    return tuner.tune(compare_full=True, full_repeats=3)


@pytest.mark.mpi
def test_prediction_error_within_the_measured_noise_and_a_broken_model_outside(team):
    """Mean prediction error and the chosen configuration within the bound the run's own noise
    sets (see ``noise_bound``); a model whose charged means are 1 + 10 x bound too large exceeds
    it. At most one second search when the first exceeds the bound (a burst of the other jobs on
    this machine); the broken model gets no second chance."""
    if team.size > 2:
        pytest.skip("more ranks than the 2 cores of the CI machine: kernel times include waiting "
                    "for a core, no accuracy to judge (checked at 1 and 2 ranks)")
    for attempt in range(2):
        res = _search(team, Model(tolerance=0.1, confidence=0.9, min_samples=2))
        bound = noise_bound(res)
        good = res.mean_relative_prediction_error < bound and res.best_within < bound
        if team.bcast(good):
            break
    assert res.mean_relative_prediction_error < bound, (bound, res.table())
    assert res.best_within < bound, (bound, res.table())
    broken = ScaledModel(tolerance=0.1, confidence=0.9, min_samples=2)
    broken.factor = 1 + 10 * bound
    res = _search(team, broken)
    assert res.mean_relative_prediction_error > bound, (bound, res.table())


@pytest.mark.mpi
def test_iterations_skip_more_in_later_runs_and_compare_as_many_full_runs(team):
    """Each configuration runs 4 times: the first run samples every kernel, later runs skip the
    steady ones; the full comparison runs each configuration as often (median kept)."""
    space = Space({"a": [1, 2], "b": [1]})
    calls = []
    run = make_run(team, steps=2)

    def counted(cfg):
        calls.append(dict(cfg))
        run(cfg)

    tuner = Autotuner(space, counted, strategy="grid", tolerance=0.5, confidence=0.9, min_samples=2,
                      iterations=4, remeasure=0, adaptive=False)  # loose: 4 ranks on 2 cores are noisy
    res = tuner.tune(compare_full=True)
    assert res.iterations == 4 and res.to_json()["iterations"] == 4
    # 4 selective + 4 full runs of each configuration (+ the skeleton warm-up of the first)
    assert sum(c == {"a": 2, "b": 1} for c in calls) == 8
    for r in res.results:
        assert r.status == "ok" and r.executed + r.skipped == 4 * 2 * 2   # 4 runs x 2 steps x 2 kernels
        assert r.skipped >= 2                     # later runs skipped steady kernels
        # per run, like the full runs' median (a total over the 4 runs would be 4x that)
        assert r.predicted_time >= 2 * UNIT * r.config["a"] * 0.9
        # (accuracy: test_prediction_error_within_the_measured_noise_and_a_broken_model_outside)
    with pytest.raises(ValueError, match="iterations must be an integer >= 1"):
        Autotuner(space, counted, iterations=0)


@pytest.mark.mpi
def test_adaptive_runs_stop_a_configuration_whose_kernels_are_known(team):
    """Parameter ``c`` changes nothing the kernels see, so once the first configuration made
    them steady the others execute nothing in their first run and stop there (every rank alike);
    ``adaptive=False`` gives every configuration all its runs."""
    space = Space({"a": [1], "b": [1], "c": [0, 1, 2]})
    res = Autotuner(space, make_run(team, steps=4), tolerance=0.5, confidence=0.9, min_samples=2,
                    iterations=6, remeasure=0).tune()
    first, *later = res.results
    assert all(r.status == "ok" for r in res.results), res.table()
    for r in res.results:
        assert r.executed + r.skipped == len(r.runs) * 4 * 2 and len(r.runs) <= 6
        assert (len(r.runs) < 6) is (r.stopped != "")
    # loose (0.5, shares): 4 ranks on 2 cores still make their Allreduce steady after 6 runs
    assert all(r.stopped for r in later) and sum(len(r.runs) for r in later) < 2 * 6, res.table()
    assert team.allgather([len(r.runs) for r in res.results]) == [[len(r.runs) for r in res.results]] * team.size
    fixed = Autotuner(space, make_run(team, steps=1), tolerance=0.5, confidence=0.9, min_samples=2,
                      iterations=3, remeasure=0, adaptive=False).tune()
    assert [len(r.runs) for r in fixed.results] == [3, 3, 3] and not any(r.stopped for r in fixed.results)


@pytest.mark.mpi
def test_a_configuration_whose_executed_kernels_are_a_sliver_of_its_path_stops_after_one_run(team):
    """Each configuration brings one kernel of its own, called once per run and about 10,000x
    shorter than the rest of its path (known from the first configuration): it never becomes steady, but a
    run in which only it executes predicts to far better than the tolerance, so the later
    configurations stop after their first run (which learns provisionally)."""
    space = Space({"a": [1], "b": [1], "c": [0, 1, 2]})

    def run(cfg):        # computation only: no collective whose steadiness the load could delay
        # (the sliver computes, a few us: a sleep that short took over a ms to wake up at 4 ranks)
        compute("sliver", (cfg["c"],), sum, range(100))
        for _ in range(8):
            compute("work", (1,), time.sleep, UNIT)
    res = Autotuner(space, run, tolerance=0.5, confidence=0.9, min_samples=2, iterations=4,
                    remeasure=0).tune()
    first, *later = res.results
    assert all(r.status == "ok" for r in res.results), res.table()
    assert [len(r.runs) for r in later] == [1, 1], res.table()
    assert all(r.stopped == STOP_LITTLE_RAN and r.executed >= 1 for r in later), res.table()
    assert team.allgather([r.stopped for r in later]) == [[r.stopped for r in later]] * team.size


@pytest.mark.mpi
def test_preparing_inputs_is_reported_apart_from_the_tuning_time(team):
    """The full runs of ``compare_full`` reuse the prepared inputs, so preparing them (here 0.3 s a
    configuration) is counted on neither side: ``prepare_time_s``, not ``tuning_wall_time_s``."""
    space = Space({"a": [1], "b": [1, 2]})
    work = make_run(team, steps=1)

    def prepare(cfg):
        time.sleep(0.3)
        return cfg["b"]
    res = Autotuner(space, lambda cfg, state: work(cfg), prepare=prepare, iterations=2, remeasure=0,
                    min_samples=2).tune(compare_full=True, full_repeats=1)
    assert res.prepare_time_s >= 2 * 0.3 * 0.99, res.prepare_time_s
    assert all(r.tuning_time < 0.3 for r in res.results), [r.tuning_time for r in res.results]
    assert res.tuning_wall_time_s < 0.6 and res.to_json()["prepare_time_s"] == res.prepare_time_s


@pytest.mark.mpi
def test_invalid_configurations_are_recorded_and_the_search_goes_on(team):
    # a 4x cost difference: far above the noise of oversubscribed, loaded ranks
    space = Space({"a": [1, 4], "b": [1], "broken": [False, True]})
    res = Autotuner(space, make_run(team, steps=4), min_samples=2).tune()
    bad = [r for r in res.results if r.status == "invalid"]
    assert len(bad) == 2 and all("cannot work for the matrix" in r.reason for r in bad)
    assert res.best_config == {"a": 1, "b": 1, "broken": False}


@pytest.mark.mpi
def test_racing_abandons_configurations_that_cannot_win(team):
    """(4, 4) costs 16x (1, 1): far beyond the spread of runs measured on the first configuration
    (racing needs several runs per configuration to measure one; with one run nothing is dropped)."""
    space = Space({"a": [1, 4], "b": [1, 4]})
    model = Model(tolerance=0.1, confidence=0.9, min_samples=2)
    res = Autotuner(space, make_run(team, steps=4), strategy="racing", model=model, iterations=3).tune()
    status = {(r.config["a"], r.config["b"]): r.status for r in res.results}
    assert status[(1, 1)] == "ok" and status[(4, 4)] == "abandoned"
    # not (1, 1) itself: at a load of 5-6 one 2-rank run chose (1, 4), its kernel means measured
    # in a quieter moment than (1, 1)'s (a 2 ms sleep then takes up to ~8 ms)
    assert res.best_config != {"a": 4, "b": 4} and res.best_config in res.finalists
    # the same decisions on every rank
    assert team.allgather(sorted(status.items())) == [sorted(status.items())] * team.size


def make_noisy_run(team, steps=4, slow=()):
    """Configurations ``c`` that cost the same, except those in ``slow`` (5x). Every run has, with
    probability 0.3, a glitch: 40 % more time spent outside the kernels (as on a loaded machine),
    drawn from a seeded generator, the same on every rank. Old racing dropped a configuration as
    soon as one of its runs exceeded the best by the tolerance (5 %)."""
    rng = np.random.default_rng(11)
    buf = np.zeros(4)

    def run(cfg):
        f = 5 if cfg["c"] in slow else 1
        glitch = rng.random() < 0.3
        for _ in range(steps):
            compute("work", (f,), time.sleep, UNIT * f)
            if glitch:
                time.sleep(0.4 * UNIT * f)
            team.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return run


@pytest.mark.mpi
def test_racing_drops_only_on_evidence_stronger_than_the_noise(team):
    """Five equally fast configurations with random 40 % glitches (noise) and one 5x slower: racing
    keeps every equal one (a glitch is weaker evidence than the spread the search measures) and
    drops the slow one; the finalists are re-measured and the choice is one of the equal ones."""
    space = Space({"c": [0, 1, 2, 3, 4, 5]})
    model = Model(tolerance=0.05, confidence=0.95, min_samples=2)
    tuner = Autotuner(space, make_noisy_run(team, slow={3}), strategy="racing", model=model, iterations=5,
                      remeasure=2, adaptive=False)   # every configuration's spread measured
    res = tuner.tune()
    status = {r.config["c"]: r.status for r in res.results}
    assert all(status[c] == "ok" for c in (0, 1, 2, 4, 5)), res.table()
    # the slow one must go when the spread the search measured is below the effect: with a
    # relative spread s of one run the in-run bound is at most 1.05 + t * 1.1 * s times the
    # incumbent (t < 3.5 at these degrees of freedom), under 5x for s < 0.3. On the shared 2-core
    # machine, with other jobs, 2-rank runs of this program spread by 40 % and more (measured):
    # then no drop is expected, and none of the equal ones may be dropped either.
    # (at 4 ranks on 2 cores the Allreduce waits dilute the 5x to far less): so a kept slow
    # configuration must have shown weak evidence, a small ratio or a large spread
    spread = math.sqrt(tuner._noise()[0])
    if status[3] != "abandoned":
        slow = next(r for r in res.results if r.config["c"] == 3)
        others = [v for r in res.results if r.config["c"] != 3 for v in r.runs[1:]]
        ratio = np.median(slow.runs[1:]) / np.median(others)
        assert spread >= 0.3 or ratio < 3, (spread, ratio, res.table())
        assert res.best_config["c"] != 3 or ratio < 1.5
    # the winner's figure is the median of its interleaved re-measurement, not of its search runs
    win = next(r for r in res.results if r.config == res.best_config)
    assert len(win.remeasured) == 2 and res.best_predicted_time == pytest.approx(np.median(win.remeasured))
    assert res.best_config in res.finalists and 1 <= len(res.finalists) <= 4
    assert team.allgather(sorted(status.items())) == [sorted(status.items())] * team.size


def test_racing_bound_follows_the_measured_spread():
    """The in-run bound is (1 + tolerance) x the incumbent's mean plus a one-sided Student-t
    bound of one run, Bonferroni over the configurations (scipy as the reference); none before a
    spread has been measured."""
    from scipy import stats
    from hpcsuite.tune import ConfigResult
    tuner = Autotuner(Space({"c": list(range(10))}), lambda c: None, strategy="racing", tolerance=0.05,
                      confidence=0.95)
    inc = ConfigResult({"c": 0}, "ok", predicted_time=1.0, runs=[2.0, 1.0, 1.1, 0.9, 1.0])
    tuner._done = []
    assert tuner._bound(inc) is None
    tuner._done = [inc]
    x = np.array([1.0, 1.1, 0.9, 1.0])                      # the first run (first touch) is left out
    var_rel = ((x / x.mean() - 1) ** 2).sum() / 3
    t = stats.t.ppf(1 - 0.05 / 10, 3)
    want = 1.05 * x.mean() + t * np.sqrt(var_rel * x.mean() ** 2 * (1 + 1 / 4))
    assert tuner._bound(inc) == pytest.approx(want, rel=1e-12)
    # Welch between runs: a clearly slower sample is dropped, a noisy equal one is not
    assert tuner._slower([5.0, 3.0, 3.1, 2.9], inc) is not None
    assert tuner._slower([5.0, 1.3, 0.9, 1.0], inc) is None
    grid = Autotuner(Space({"c": [0]}), lambda c: None)
    assert grid._bound(inc) is None and grid._slower([5.0, 3.0, 3.1, 2.9], inc) is None


def test_finalists_are_those_holm_cannot_tell_from_the_best():
    from scipy import stats
    from hpcsuite.tune import ConfigResult
    tuner = Autotuner(Space({"c": list(range(4))}), lambda c: None, confidence=0.95, finalists=4)
    runs = {0: [9, 1.00, 1.02, 0.98, 1.01], 1: [9, 1.01, 0.97, 1.05, 1.00],     # as fast
            2: [9, 1.50, 1.52, 1.49, 1.51], 3: [9, 1.2, 0.8, 1.6, 1.0]}       # slower / too noisy to tell
    ok = [ConfigResult({"c": c}, "ok", predicted_time=float(np.median(r)), runs=r) for c, r in runs.items()]
    fin = [r.config["c"] for r in tuner._finalists(ok)]
    assert fin[0] == 0 and set(fin) == {0, 1, 3}
    p2 = stats.ttest_ind(runs[2][1:], runs[0][1:], equal_var=False, alternative="greater").pvalue
    assert p2 < 0.05 / 3                                      # Holm's first step rejects it
    assert [r.config["c"] for r in Autotuner(Space({"c": [0]}), lambda c: None, finalists=1)._finalists(ok)] == [0]


@pytest.mark.mpi
def test_random_strategy_and_warm_model(team, shared_tmp):
    space = Space({"a": [1, 2, 3], "b": [1, 2]})
    t1 = Autotuner(space, make_run(team, steps=4), strategy="random", samples=4, seed=3, min_samples=2)
    assert len(t1.configs) == 4
    r1 = t1.tune()
    path = shared_tmp / "model.json"
    if team.rank == 0:
        t1.model.save(path)
    team.barrier()
    # the warm search's tolerance from the noise the first search measured: the widest relative
    # half-width of the saved kernels (the same file on every rank). With the default 5 % this
    # test failed at loads of 9-17, when a 2 ms sleep's samples spread by more than that and no
    # saved kernel was steady, so the warm search skipped nothing
    saved = Model.load(path)
    widest = max(saved.z * s.stderr / s.mean for s in saved.kernels.values() if s.n >= 2)
    tol = max(1.05 * widest, 0.05)
    if tol >= 0.99:
        pytest.skip(f"the first search's kernels spread too much to be known to any tolerance ({widest:.2f})")
    warm = Model.load(path, tolerance=tol)
    r2 = Autotuner(space, make_run(team, steps=4), strategy="random", samples=4, seed=3, model=warm).tune()
    assert sum(r.skipped for r in r2.results) > sum(r.skipped for r in r1.results), (tol, r1.table(), r2.table())


@pytest.mark.parametrize("kw,msg", [
    (dict(space={}), "space is empty"),
    (dict(space={"a": []}), "non-empty list"),
    (dict(space={"a": [object()]}), "unsupported value"),
    (dict(space={"a": [1]}, strategy="bayes"), "strategy must be one of"),
    (dict(space={"a": [1]}, tolerance=1.2), "tolerance must be in"),
    (dict(space={"a": [1]}, confidence=0.0), "confidence must be in"),
    (dict(space={"a": [1]}, strategy="random"), "samples >= 1"),
    (dict(space={"a": [1]}, remeasure=-1), "remeasure must be an integer >= 0"),
    (dict(space={"a": [1]}, finalists=0), "finalists must be an integer >= 1"),
])
def test_bad_tuning_inputs(kw, msg):
    params = kw.pop("space")
    with pytest.raises(ValueError, match=msg):
        Autotuner(Space(params), lambda c: None, **kw)
