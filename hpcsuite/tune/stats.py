"""Per-kernel running statistics and the steadiness test that decides when a kernel may be skipped.

A kernel (routine + key) is *steady* once its mean time is known to a relative confidence interval
narrower than the tolerance: ``z(confidence) * stderr / mean < tolerance`` with at least
``min_samples`` samples (the reference autotuner's criterion). Statistics are Welford running
moments, they persist across the configurations of a tuning run, and a :class:`Model` can be saved
to and loaded from a JSON file so a later job starts warm.

Statistics along the path: besides its own samples (``Model.kernels``), a rank keeps the latest
snapshot of every other rank's own samples that reached it with the execution path
(``Model.learn``; the instrumented execution sends them along with its path messages). A kernel is
steady when its own statistics are, or when the merge of all snapshots (Chan et al.'s parallel
merge of count, mean and M2, as the reference tool merges them) is. Snapshots are keyed by the rank
that measured them and replaced by newer ones (larger count), never added twice, so a sample that
travels two routes is counted once.

The tolerance is the path's, shared out by weight: a kernel that takes the fraction ``share`` of
the predicted path (its calls per run times its mean, over the path, from the last run that
charged or timed it: :meth:`Model.note_shares`) is steady once ``z * stderr / mean < tolerance /
sqrt(share)`` (at most :data:`MAX_HALF_WIDTH`). The squares of the kernels' absolute half-widths
times their calls then add up to at most ``(tolerance * path)**2`` (their errors are independent
and add in quadrature), so the path is known to the tolerance while a kernel of a hundredth of it
needs a 10x wider interval than one kernel that is the whole path. Measured (bench/RESULTS.md,
issue 24, "What a later configuration still executes"): with one interval per kernel, the 3 us
``syrk`` of block 32 (1 % of the path, 4,096 calls per run, preemptions of milliseconds on a
shared machine) was never steady after 20,000 samples, and such intervals were 93 % of the
kernel executions of a 16-configuration search. Before a kernel's first run its share is
not recorded; an execution then passes its running estimate (the kernel's calls so far times its
mean, over the path so far; 1 at the start of a run, the single-kernel criterion).

Samples are clipped at :data:`CLIP_ABOVE_FASTEST` times the fastest one of the same kernel on the
same rank before they enter the moments (winsorised from above). Descheduling, interrupts and page
faults only ever add time, and a kernel of a few microseconds preempted for milliseconds would
otherwise lift its mean, and so the charge of every later skipped call, far above any full run:
measured (bench/RESULTS.md, issue 24, fourteenth session), the 2-rank Cholesky deck of the tests
over-predicted by a mean 0.09-0.34 (median 0.14, 32 runs) without clipping and 0.08-0.18 (median
0.11, 36 runs) with it. A kernel whose times genuinely differ by more than 2x between calls with
one key (in and out of cache) is charged less than its mean; keys carry the shapes, which decide
most of that.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

__all__ = ["KernelStats", "Model", "z_value", "merge_moments", "MAX_HALF_WIDTH", "CLIP_ABOVE_FASTEST"]

#: A sample counts as at most this many times the fastest sample of its kernel (see the notes).
CLIP_ABOVE_FASTEST = 2.0

#: The widest relative half-width a kernel is ever skipped with, however small its share: a mean
#: from a few samples known to no better than itself is charged for nothing.
MAX_HALF_WIDTH = 0.5


def z_value(confidence: float) -> float:
    """Two-sided normal quantile: ``z_value(0.95) == 1.959...``."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def merge_moments(a: tuple, b: tuple) -> tuple:
    """Merge two ``(count, mean, M2)`` summaries of disjoint samples (Chan, Golub and LeVeque's
    parallel update): the result is the summary of the union. Local.

    >>> merge_moments((2, 1.0, 2.0), (1, 4.0, 0.0))     # samples {0, 2} and {4}
    (3, 2.0, 8.0)
    """
    na, ma, qa = a
    nb, mb, qb = b
    if na == 0:
        return (nb, mb, qb)
    if nb == 0:
        return (na, ma, qa)
    n = na + nb
    d = mb - ma
    return (n, ma + d * nb / n, qa + qb + d * d * na * nb / n)


def _unmerge(total: tuple, part: tuple) -> tuple:
    """The summary of ``total``'s samples that are not in ``part`` (the inverse of the merge)."""
    n, m, q = total
    n0, m0, q0 = part
    n1 = n - n0
    if n1 <= 0:
        return (0, 0.0, 0.0)
    m1 = (n * m - n0 * m0) / n1
    d = m1 - m0
    return (n1, m1, max(q - q0 - d * d * n0 * n1 / n, 0.0))


@dataclass
class KernelStats:
    """Running count, mean and sum of squared deviations (Welford) of one kernel's time, each
    sample clipped at :data:`CLIP_ABOVE_FASTEST` times the fastest so far (see the module notes)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    skipped: int = 0
    fastest: float = math.inf

    def add(self, t: float) -> None:
        if t < self.fastest:
            self.fastest = t
        if self.fastest > 0.0:
            t = min(t, CLIP_ABOVE_FASTEST * self.fastest)
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

    @property
    def moments(self) -> tuple:
        """``(count, mean, M2)``."""
        return (self.n, self.mean, self.m2)


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
        # statistics along the path: other ranks' own samples, the latest snapshot per rank
        self.remote: dict[tuple, dict[int, tuple]] = {}
        self._loaded: dict[tuple, tuple] = {}      # what load() gave (the same on every rank)
        self.changes: list = []                    # (origin, key) log of changes, for sharing
        self.origin: int | None = None             # this rank's id in the snapshots (world rank)
        self.sent: dict = {}                       # channel -> position in ``changes`` sent up to
        self.share: dict[tuple, float] = {}        # key -> its fraction of the last path that had it

    def tolerance_of(self, key: tuple, share: float | None = None) -> float:
        """The relative half-width ``key`` must reach: ``tolerance / sqrt(share)``, at most
        :data:`MAX_HALF_WIDTH` (see the module notes); ``share`` is used for a kernel whose
        share no earlier run recorded (an execution's running estimate), else 1. Local."""
        share = self.share.get(key, 1.0 if share is None else share)
        if share >= 1.0:
            return self.tolerance
        return min(self.tolerance / math.sqrt(max(share, 1e-12)), max(MAX_HALF_WIDTH, self.tolerance))

    def note_shares(self, calls: dict, path: float) -> None:
        """Record each kernel's share of a run's predicted ``path``: ``calls`` maps a key to its
        calls in that run (executed and skipped); its mean here times its calls, over the path.
        Local (each rank its own calls; the skip decisions of collectives are agreed anyway).
        A kernel measured nowhere yet (a run that kept no samples, ``Execution(record=False)``)
        gets no share: a share of 0 would give it the widest tolerance in the next run, however
        much of the path it is; the running estimate of that run applies instead."""
        if not path > 0:
            return
        for k, c in calls.items():
            s = self.kernels.get(k)
            m = s.mean if s is not None and s.n else (self.merged(k).mean if k in self.remote else 0.0)
            if m > 0.0:
                self.share[k] = min(c * m / path, 1.0)

    def stats(self, key: tuple) -> KernelStats:
        s = self.kernels.get(key)
        if s is None:
            s = self.kernels[key] = KernelStats()
        return s

    def steady(self, key: tuple, share: float | None = None) -> bool:
        """Whether ``key`` may be skipped: its own statistics, or the merge with the other ranks'
        snapshots, have a relative confidence half-width below its tolerance
        (:meth:`tolerance_of`). Local."""
        tol = self.tolerance_of(key, share)
        s = self.kernels.get(key)
        if s is not None and s.steady(self.z, tol, self.min_samples):
            return True
        return key in self.remote and self.merged(key).steady(self.z, tol, self.min_samples)

    def mean(self, key: tuple, share: float | None = None) -> float:
        """The time charged for a skipped ``key``: its own mean when its own statistics are steady
        (a kernel may take different times on different ranks), else the merged mean. Local."""
        s = self.kernels.get(key)
        if key not in self.remote or (s is not None and s.steady(self.z, self.tolerance_of(key, share),
                                                                 self.min_samples)):
            return s.mean if s is not None else 0.0
        return self.merged(key).mean

    def merged(self, key: tuple) -> KernelStats:
        """Own statistics merged with every other rank's latest snapshot of ``key``. Local."""
        s = self.kernels.get(key)
        acc = s.moments if s is not None else (0, 0.0, 0.0)
        for snap in self.remote.get(key, {}).values():
            acc = merge_moments(acc, snap)
        return KernelStats(*acc)

    def record(self, key: tuple, t: float) -> None:
        """Add a sample of this rank's own. Local.

        The change is logged for the path when the count reaches a power of two, from
        ``min_samples`` on: a snapshot carries all samples so far, so sending it at 2, 4, 8, ...
        samples costs a logarithmic number of messages per kernel instead of one per sample."""
        s = self.stats(key)
        s.add(t)
        if self.origin is not None and s.n >= self.min_samples and not s.n & (s.n - 1):
            self.changes.append((self.origin, key))

    def known(self) -> list:
        """Every ``(origin, key)`` with a snapshot to send (own samples beyond the loaded ones, and
        other ranks' snapshots). Local."""
        out = [(self.origin, k) for k in self.kernels] if self.origin is not None else []
        out.extend((o, k) for k, snaps in self.remote.items() for o in snaps)
        return out

    def snapshot(self, origin: int, key: tuple) -> tuple | None:
        """``(count, mean, M2)`` of ``origin``'s own samples of ``key`` as this rank knows them
        (for this rank: its own samples, less what :meth:`load` gave, which every rank has)."""
        if origin == self.origin:
            s = self.kernels.get(key)
            if s is None:
                return None
            base = self._loaded.get(key)
            return _unmerge(s.moments, base) if base else s.moments
        return self.remote.get(key, {}).get(origin)

    def learn(self, origin: int, key: tuple, n: int, mean: float, m2: float) -> bool:
        """Take ``origin``'s snapshot of ``key`` if it is newer (more samples) than the one known.
        Returns whether anything changed. Local."""
        if origin == self.origin or n <= 0:
            return False
        snaps = self.remote.setdefault(key, {})
        old = snaps.get(origin)
        if old is not None and old[0] >= n:
            return False
        snaps[origin] = (n, mean, m2)
        if old is None or n >= 2 * old[0]:       # forwarded at doubling counts, as own samples
            self.changes.append((origin, key))
        return True

    def rescale(self, factor: float) -> None:
        """Multiply every kernel's times by ``factor`` (a calibration against the machine's current
        speed): means by ``factor``, M2 by its square. Local."""
        if not factor > 0:
            raise ValueError(f"rescale factor must be positive, got {factor}")
        f2 = factor * factor
        for s in self.kernels.values():
            s.mean *= factor
            s.m2 *= f2
            s.fastest *= factor
        self._loaded = {k: (n, m * factor, q * f2) for k, (n, m, q) in self._loaded.items()}
        for snaps in self.remote.values():
            for o, (n, m, q) in list(snaps.items()):
                snaps[o] = (n, m * factor, q * f2)

    def __len__(self) -> int:
        return len(self.kernels)

    # ------------------------------------------------------------------ persistence
    def to_json(self) -> dict:
        """Parameters and this rank's own statistics. Local. (Not merged with the other ranks':
        a communication kernel's time differs from rank to rank, by the waiting for partners, and
        the merged interval is wider than one rank's; a warm job loads one rank's file on all.)"""
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
            k = _tupled(row["key"])
            # (the fastest sample is not kept: new samples, on this machine, clip against their own)
            m.kernels[k] = KernelStats(row["n"], row["mean"], row["m2"])
            m._loaded[k] = (row["n"], row["mean"], row["m2"])
        return m


def _jsonable(k):
    return [_jsonable(x) for x in k] if isinstance(k, tuple) else k


def _tupled(k):
    return tuple(_tupled(x) for x in k) if isinstance(k, list) else k
