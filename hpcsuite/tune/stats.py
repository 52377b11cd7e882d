"""Per-kernel running statistics and the steadiness test that decides when a kernel may be skipped.

A kernel (routine + key) is *steady* once its mean time is known to a relative confidence interval
narrower than the tolerance: ``z(confidence) * stderr / mean < tolerance`` with at least
``min_samples`` samples (the reference autotuner's criterion). Statistics are Welford running
moments, they persist across the configurations of a tuning run, and a :class:`Model` can be saved
to and loaded from a JSON file so a later job starts warm.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

__all__ = ["KernelStats", "Model", "z_value"]


def z_value(confidence: float) -> float:
    """Two-sided normal quantile: ``z_value(0.95) == 1.959...``."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


@dataclass
class KernelStats:
    """Running count, mean and sum of squared deviations (Welford) of one kernel's time."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    skipped: int = 0

    def add(self, t: float) -> None:
        self.n += 1
        d = t - self.mean
        self.mean += d / self.n
        self.m2 += d * (t - self.mean)

    @property
    def variance(self) -> float:
        return self.m2 / (self.n - 1) if self.n > 1 else math.inf

    @property
    def stderr(self) -> float:
        return math.sqrt(self.variance / self.n) if self.n > 1 else math.inf

    def steady(self, z: float, tolerance: float, min_samples: int) -> bool:
        """Whether the relative confidence half-width is below ``tolerance``."""
        if self.n < max(min_samples, 2) or self.mean <= 0:
            return False
        return z * self.stderr / self.mean < tolerance


class Model:
    """Kernel statistics by key, with the steadiness parameters. Local (one per rank)."""

    def __init__(self, tolerance: float = 0.05, confidence: float = 0.95, min_samples: int = 3):
        if not 0 < tolerance < 1:
            raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence}")
        if not isinstance(min_samples, int) or min_samples < 2:
            raise ValueError(f"min_samples must be an integer >= 2, got {min_samples!r}")
        self.tolerance, self.confidence, self.min_samples = tolerance, confidence, min_samples
        self.z = z_value(confidence)
        self.kernels: dict[tuple, KernelStats] = {}

    def stats(self, key: tuple) -> KernelStats:
        s = self.kernels.get(key)
        if s is None:
            s = self.kernels[key] = KernelStats()
        return s

    def steady(self, key: tuple) -> bool:
        s = self.kernels.get(key)
        return s is not None and s.steady(self.z, self.tolerance, self.min_samples)

    def __len__(self) -> int:
        return len(self.kernels)

    # ------------------------------------------------------------------ persistence
    def to_json(self) -> dict:
        return {"tolerance": self.tolerance, "confidence": self.confidence, "min_samples": self.min_samples,
                "kernels": [{"key": _jsonable(k), "n": s.n, "mean": s.mean, "m2": s.m2}
                            for k, s in self.kernels.items()]}

    def save(self, path: str | os.PathLike) -> None:
        """Write the model as JSON (atomically: temporary file, then rename). Local."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | os.PathLike, **overrides) -> "Model":
        """A model from a JSON file written by :meth:`save` (parameters may be overridden)."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"tuning model {path} does not exist") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"tuning model {path} is not valid JSON: {exc}") from None
        params = {k: data[k] for k in ("tolerance", "confidence", "min_samples")}
        params.update(overrides)
        m = cls(**params)
        for row in data["kernels"]:
            m.kernels[_tupled(row["key"])] = KernelStats(row["n"], row["mean"], row["m2"])
        return m


def _jsonable(k):
    return [_jsonable(x) for x in k] if isinstance(k, tuple) else k


def _tupled(k):
    return tuple(_tupled(x) for x in k) if isinstance(k, list) else k
