"""The autotuner on a synthetic program whose cost per configuration is known exactly."""
import time

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.runtime import compute
from hpcsuite.tune import Autotuner, Model, Space

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
def test_grid_search_finds_the_best_and_predicts_well(team):
    space = Space({"a": [1, 2, 3], "b": [1, 2, 4]}, constraints=[lambda c: c["a"] * c["b"] != 6])
    tuner = Autotuner(space, make_run(team), strategy="grid", tolerance=0.1, confidence=0.9, min_samples=2)
    assert len(tuner.configs) == 8                     # 9 minus the constrained-out (3, 2)
    res = tuner.tune(compare_full=True)
    assert res.true_best_config == {"a": 1, "b": 1}
    assert res.best_within <= 0.05                     # the chosen one is within 5% of the best
    ok = [r for r in res.results if r.status == "ok"]
    assert len(ok) == 8 and sum(r.skipped > 0 for r in ok) >= 4   # most configurations skipped work
    tol = 0.3 if team.size <= 2 else 0.8
    assert res.mean_relative_prediction_error < tol
    assert res.skipped_fraction > 0.2
    assert res.tuning_wall_time_s < res.full_wall_time_s     # skipping made tuning cheaper
    assert "predicted s" in res.table() and res.to_json()["speedup"] > 1


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

    tuner = Autotuner(space, counted, strategy="grid", tolerance=0.2, confidence=0.9, min_samples=2,
                      iterations=4)
    res = tuner.tune(compare_full=True)
    assert res.iterations == 4 and res.to_json()["iterations"] == 4
    # 4 selective + 4 full runs of each configuration (+ the skeleton warm-up of the first)
    assert sum(c == {"a": 2, "b": 1} for c in calls) == 8
    for r in res.results:
        assert r.status == "ok" and r.executed + r.skipped == 4 * 2 * 2   # 4 runs x 2 steps x 2 kernels
        assert r.skipped >= 2                     # later runs skipped steady kernels
        # per run, like the full runs' median (a total over the 4 runs would be 4x that)
        assert r.predicted_time >= 2 * UNIT * r.config["a"] * 0.9
        assert r.predicted_time == pytest.approx(r.measured_time, rel=0.5 if team.size <= 2 else 1.0)
    with pytest.raises(ValueError, match="iterations must be an integer >= 1"):
        Autotuner(space, counted, iterations=0)


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
    space = Space({"a": [1, 4], "b": [1, 4]})
    model = Model(tolerance=0.1, confidence=0.9, min_samples=2)
    res = Autotuner(space, make_run(team), strategy="racing", model=model).tune()
    status = {(r.config["a"], r.config["b"]): r.status for r in res.results}
    assert status[(1, 1)] == "ok" and status[(4, 4)] == "abandoned"
    assert res.best_config == {"a": 1, "b": 1}
    # the same decisions on every rank
    assert team.allgather(sorted(status.items())) == [sorted(status.items())] * team.size


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
    warm = Model.load(path) if team.rank == 0 else Model.load(path)
    r2 = Autotuner(space, make_run(team, steps=4), strategy="random", samples=4, seed=3, model=warm).tune()
    assert sum(r.skipped for r in r2.results) > sum(r.skipped for r in r1.results)


@pytest.mark.parametrize("kw,msg", [
    (dict(space={}), "space is empty"),
    (dict(space={"a": []}), "non-empty list"),
    (dict(space={"a": [object()]}), "unsupported value"),
    (dict(space={"a": [1]}, strategy="bayes"), "strategy must be one of"),
    (dict(space={"a": [1]}, tolerance=1.2), "tolerance must be in"),
    (dict(space={"a": [1]}, confidence=0.0), "confidence must be in"),
    (dict(space={"a": [1]}, strategy="random"), "samples >= 1"),
])
def test_bad_tuning_inputs(kw, msg):
    params = kw.pop("space")
    with pytest.raises(ValueError, match=msg):
        Autotuner(Space(params), lambda c: None, **kw)
