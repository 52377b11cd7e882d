"""Merging the reports of a tuning sweep split over a job array (``hpcsuite tune --collect``)."""
from __future__ import annotations

import json
from pathlib import Path

from .tuner import TuningResult, write_report

__all__ = ["collect_reports"]


def collect_reports(paths, out: str | None = None) -> dict:
    """Merge JSON reports (one per array task) and pick the best configuration. Local.

    Raises ``OSError``/``ValueError`` naming the file that is missing or not a tuning report.
    """
    results, first = [], None
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except FileNotFoundError:
            raise OSError(f"{p}: no such report") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not a JSON tuning report ({exc})") from None
        if not isinstance(data, dict) or "results" not in data:
            raise ValueError(f"{p}: not a tuning report (no 'results')")
        first = first or data
        results.extend(data["results"])
    ok = [r for r in results if r.get("status") == "ok" and r.get("predicted_time") is not None]
    if not ok:
        raise ValueError("no valid configuration in the reports")
    best = min(ok, key=lambda r: r["predicted_time"])
    merged = dict(first, results=results, best_config=best["config"],
                  best_predicted_time=best["predicted_time"], best_breakdown=best.get("breakdown") or None,
                  tuning_wall_time_s=sum(json.loads(Path(p).read_text()).get("tuning_wall_time_s", 0)
                                         for p in paths))
    if out:
        res = TuningResult(merged.get("strategy", "grid"), merged.get("mode", "selective"))
        res.results, res.best_config = results, best["config"]
        res.best_predicted_time, res.tuning_wall_time_s = best["predicted_time"], merged["tuning_wall_time_s"]
        res.best_breakdown = merged["best_breakdown"]
        write_report(res, out)
    return merged
