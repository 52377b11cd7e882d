"""The predicted critical path split into computation, communication and idle on the critical
path's last rank: the parts add up to the prediction, an imbalance known by construction (one
rank works, the others wait for it, then do less work) shows as idle on the critical rank, the
tuner's per-configuration breakdowns go with its median predictions, and the report carries
them (1-4 ranks)."""
import json
import time

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.runtime import compute
from hpcsuite.tune import Autotuner, ConfigResult, Execution, Model, Space, TuningResult, write_report
from hpcsuite.tune.tuner import PARTS, median_breakdown

SLOW, FAST = 0.06, 0.02       # seconds of sleep (frees the core: the waits are not CPU contention)


def _sums(b: dict, total: float) -> bool:
    return set(b) == set(PARTS) and min(b.values()) >= 0 and abs(sum(b.values()) - total) <= 1e-9 * max(total, 1)


@pytest.mark.mpi
def test_parts_add_up_and_waiting_for_another_rank_shows_as_idle(team):
    buf = np.zeros(1)
    with Execution(Model(), "profile") as ex:
        if team.rank == 0:
            compute("slow", (), time.sleep, SLOW)
        team.Allreduce(MPI.IN_PLACE, buf)
        if team.rank > 0:
            compute("fast", (), time.sleep, FAST)
    r = ex.result
    assert _sums(r.breakdown, r.predicted), (r.breakdown, r.predicted)
    assert team.allgather((r.breakdown, r.critical_rank)) == [(r.breakdown, r.critical_rank)] * team.size
    if team.size == 1:
        assert r.critical_rank == 0 and r.breakdown["idle"] <= 1e-12 and r.breakdown["computation"] >= SLOW
        return
    # every other rank ends FAST after the slow rank's SLOW: the critical path ends on one of them,
    # which computed FAST (plus glue) and waited for rank 0 (idle: SLOW less its own time before)
    b = r.breakdown
    assert r.critical_rank != 0 and r.predicted >= SLOW + FAST
    assert FAST <= b["computation"] < FAST + 0.5 * SLOW, b
    assert b["idle"] > 0.5 * SLOW and b["communication"] > 0, b


def test_median_breakdown_goes_with_the_median_prediction():
    runs = [3.0, 1.0, 2.0]
    parts = [{"computation": t, "communication": 0.0, "idle": 0.0} for t in runs]
    assert median_breakdown(runs, parts)["computation"] == 2.0
    even = median_breakdown([4.0, 1.0, 2.0, 3.0], [{"computation": t / 2, "communication": t / 2, "idle": 0.0}
                                                   for t in [4.0, 1.0, 2.0, 3.0]])
    assert sum(even.values()) == 2.5                  # statistics.median of the four
    assert median_breakdown([1.0], [{}]) == {} and median_breakdown([], []) == {}


@pytest.mark.mpi
def test_tuner_breakdowns_add_up_to_its_predictions(team):
    buf = np.zeros(4)

    def program(cfg):
        for _ in range(cfg["steps"]):
            compute("work", (), time.sleep, 0.002 * (1 + team.rank % 2))
            team.Allreduce(MPI.IN_PLACE, buf)

    res = Autotuner(Space({"steps": [2, 4]}), program, iterations=3, remeasure=1,
                    tolerance=0.5, min_samples=2).tune()
    for r in res.results:
        assert r.status == "ok" and _sums(r.breakdown, r.predicted_time), (r.breakdown, r.predicted_time)
    assert res.best_breakdown and _sums(res.best_breakdown, res.best_predicted_time)
    assert team.allgather(res.best_breakdown) == [res.best_breakdown] * team.size


def test_report_carries_the_breakdowns(tmp_path):
    parts = [{"computation": 0.5, "communication": 0.25, "idle": 0.25}, {"computation": 1.0, "communication": 0.0,
                                                                          "idle": 0.5}]
    res = TuningResult("grid", "selective", best_config={"x": 1}, best_predicted_time=1.0, best_breakdown=parts[0])
    res.results = [ConfigResult({"x": x}, "ok", predicted_time=sum(b.values()), measured_time=1.1, breakdown=b)
                   for x, b in zip((1, 2), parts)]
    write_report(res, tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["breakdown"] for r in report["results"]] == parts and report["best_breakdown"] == parts[0]
    # the stacked plot: tests/tune/test_program_target.py (through hpcsuite tune)
