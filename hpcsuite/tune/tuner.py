"""The autotuner: search a configuration space, predicting each configuration's time from a
selective execution instead of running it fully.

Strategies:

* ``grid``: every configuration of the space (that satisfies the constraints), in order;
* ``random``: ``samples`` configurations drawn without replacement;
* ``racing``: the grid, but a configuration is abandoned once the evidence against it is stronger
  than the noise the search measures. Within a run (from its second run on: the first pays
  first-touch costs), when its merged critical path (a lower bound of the run's time) exceeds
  ``(1 + tolerance)`` times the incumbent's mean run plus a one-sided prediction bound of one run
  (Student's t at ``(1 - confidence) / configurations``, Bonferroni, with the incumbent's standard
  error and the run-to-run spread pooled over the configurations finished so far); between runs,
  when Welch's t-test says its runs are slower than ``(1 + tolerance)`` times the incumbent's at
  that corrected level (each sample's variance at least the pooled spread: the runs of one
  configuration follow each other and share the machine's state of that moment). Before any
  spread has been measured nothing is dropped.

Robust choice: after the search, every configuration that Welch's test (Holm-corrected, level
``1 - confidence``) cannot tell from the best is a finalist (at most ``finalists`` of them, fastest
first); the finalists, the winner among them, are run ``remeasure`` more times, interleaved
(round-robin, after one untimed round), and their predictions become the medians of those runs,
so a prediction that was low by chance (the winner's curse of a minimum over noisy estimates) and
a drift of the machine during the search do not decide. A warm model (one loaded with
statistics) is first rescaled to the machine's current speed: two profile runs of the first
configuration, the second compared kernel by kernel with the model (the ratio of the total times
of its computation kernels, over all ranks; of its communication kernels if it has no computation
kernel), ``TuningResult.calibration``.

Each configuration is evaluated over ``iterations`` runs of its program, as an iterative
application (or a benchmark loop) runs it, and as the reference autotuner evaluates
configurations: the first runs execute and time the kernels, later ones skip what became steady.
A configuration's first run pays first-touch costs (page faults, first calls), so it learns only
provisionally (``Execution(record="provisional")``: it skips a kernel once steady within the run,
and the model forgets those samples afterwards). The predicted time of a configuration is the
median over its runs after the first (the first alone when it is the only one) of the predicted
critical path, as the full comparison keeps the median of its runs without interception.

Path breakdown: each configuration's ``breakdown`` splits its predicted time into computation,
communication and idle (synchronisation) on the critical path's last rank (see
:mod:`hpcsuite.tune.execution`), from the run whose prediction is the median (the mean of the
two middle runs' breakdowns for an even count), so the parts add up to ``predicted_time``; the
chosen configuration's is ``TuningResult.best_breakdown``. The plot stacks the three parts.

Adaptive runs (``adaptive=True``, the default): ``iterations`` is the most runs a configuration
gets. Its runs stop early once no rank executed any kernel in a run, or the executed kernels took
less than a tenth of the tolerance of the predicted path (every other kernel charged from the
model: a further run would charge the same means and re-measure only the program's own code
between kernels and those few kernels; this may end a configuration after its first run, which
learns only provisionally: see above), or once it has had two runs and the mean of its runs is
known to the tolerance (relative confidence half-width of its runs below ``tolerance``, the criterion of a
kernel applied to the configuration; racing first measures one spread without that stop, and
the spreads of configurations stopped so are left out of the pooled noise, being selected small).
Once the model is shared from the earlier configurations a
later one so costs one or two selective runs instead of ``iterations``: measured, this is most of
what it takes to tune faster than one full run of every configuration (bench/RESULTS.md, issue 24).

Kernel statistics persist across configurations (later ones skip kernels that earlier ones made
steady) and can be saved to / loaded from a model file. A configuration whose run raises is
recorded as invalid with the reason, and the search goes on. With ``compare_full`` every valid
configuration is also executed fully without interception, in the same run, so the report says how
good the predictions were and whether the chosen configuration is really (near) the best.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from mpi4py import MPI
from scipy import stats as sps

from .execution import MODES, Abandoned, Execution, ExecutionResult, run_full
from .stats import Model

__all__ = ["Space", "Autotuner", "TuningResult", "ConfigResult", "STRATEGIES"]

STRATEGIES = ("grid", "random", "racing")
# why adaptive runs stopped a configuration early (ConfigResult.stopped)
STOP_NOTHING_RAN, STOP_RUNS_AGREE = "no kernel executed", "runs agree"
STOP_LITTLE_RAN = "executed kernels under a tenth of the tolerance"
#: a run whose executed kernels took less than this fraction of ``tolerance`` x its predicted path
#: ends a configuration's runs like a run with nothing executed: a further run would re-measure
#: only those kernels, and even an error of 100 % in their time moves the prediction by less
#: than a tenth of the tolerance (measured: a once-per-run panel Bcast of 1-4 MB, 0.06 % of a
#: Cholesky run, kept every later configuration of a block size running twice; RESULTS, issue 24)
LITTLE_RAN = 0.1


class Space:
    """A configuration space: named parameters with lists of values, and constraints.

    Parameters
    ----------
    params : dict
        ``{name: [values...]}``; values are numbers, strings, booleans or tuples of them.
    constraints : sequence of callables
        ``constraint(config) -> bool``; configurations failing any are left out.

    Raises
    ------
    ValueError
        An empty space, a parameter without values, or values of an unsupported type.
    """

    def __init__(self, params: dict, constraints: Sequence[Callable[[dict], bool]] = ()):
        if not isinstance(params, dict) or not params:
            raise ValueError("the space is empty: give at least one parameter with values")
        for name, values in params.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise ValueError(f"parameter {name!r}: values must be a non-empty list, got {values!r}")
            for v in values:
                if not _allowed(v):
                    raise ValueError(f"parameter {name!r}: unsupported value {v!r} (numbers, strings, "
                                     f"booleans or tuples of them)")
        for c in constraints:
            if not callable(c):
                raise ValueError(f"constraints must be callables, got {c!r}")
        self.params = {k: [tuple(v) if isinstance(v, list) else v for v in vals] for k, vals in params.items()}
        self.constraints = list(constraints)

    def grid(self) -> list[dict]:
        """Every configuration satisfying the constraints, in a fixed order."""
        names = list(self.params)
        out = []
        for combo in itertools.product(*(self.params[n] for n in names)):
            cfg = dict(zip(names, combo))
            if all(c(cfg) for c in self.constraints):
                out.append(cfg)
        if not out:
            raise ValueError("no configuration of the space satisfies the constraints")
        return out

    def __len__(self) -> int:
        return len(self.grid())


def _allowed(v) -> bool:
    if isinstance(v, (list, tuple)):
        return all(_allowed(x) for x in v)
    return isinstance(v, (bool, int, float, str))


@dataclass
class ConfigResult:
    """One configuration's outcome."""

    config: dict
    status: str                        # "ok" | "invalid" | "abandoned"
    predicted_time: float | None = None
    measured_time: float | None = None
    executed: int = 0
    skipped: int = 0
    reason: str = ""
    tuning_time: float = 0.0           # wall time spent on it in the tuning loop (not preparing it)
    runs: list = field(default_factory=list)        # predicted time of each run of the search
    remeasured: list = field(default_factory=list)  # finalists: the interleaved runs after it
    full_runs: list = field(default_factory=list)   # compare_full: each full run's time
    breakdown: dict = field(default_factory=dict)   # computation / communication / idle of the prediction
    stopped: str = ""                  # adaptive runs: why its runs stopped before ``iterations``


@dataclass
class TuningResult:
    """The search's outcome, identical on every rank."""

    strategy: str
    mode: str
    results: list = field(default_factory=list)
    best_config: dict | None = None
    best_predicted_time: float | None = None
    tuning_wall_time_s: float = 0.0           # the search, without preparing inputs (below)
    prepare_time_s: float = 0.0               # preparing each configuration's inputs (``prepare``),
                                              # counted on neither side of the comparisons: the
                                              # full runs reuse the same prepared inputs
    full_wall_time_s: float | None = None
    true_best_config: dict | None = None
    mean_relative_prediction_error: float | None = None
    best_within: float | None = None          # measured(best) / measured(true best) - 1
    full_one_run_s: float | None = None       # one full run of every configuration (median run)
    calibration: float | None = None          # warm model rescaled by this factor
    best_breakdown: dict | None = None        # the chosen configuration's predicted path, split
    finalists: list = field(default_factory=list)
    skipped_fraction: float = 0.0
    tolerance: float = 0.0
    confidence: float = 0.0
    ranks: int = 1
    iterations: int = 1               # runs per configuration (times are per run)

    @property
    def speedup(self) -> float | None:
        """Against ``full_repeats`` full runs of every configuration (the compare-full runs)."""
        if self.full_wall_time_s is None or self.tuning_wall_time_s <= 0:
            return None
        return self.full_wall_time_s / self.tuning_wall_time_s

    @property
    def speedup_one_run(self) -> float | None:
        """Against the strongest exhaustive baseline: one full run of every configuration."""
        if self.full_one_run_s is None or self.tuning_wall_time_s <= 0:
            return None
        return self.full_one_run_s / self.tuning_wall_time_s

    def to_json(self) -> dict:
        d = asdict(self)
        d["speedup"] = self.speedup
        d["speedup_one_run"] = self.speedup_one_run
        return d

    def table(self) -> str:
        """The results as aligned text (configuration, predicted, measured, kernels, status)."""
        rows = [("configuration", "predicted s", "measured s", "executed", "skipped", "status")]
        for r in self.results:
            rows.append((_cfg_str(r.config), _f(r.predicted_time), _f(r.measured_time), str(r.executed),
                         str(r.skipped), r.status + (f" ({r.reason})" if r.reason else "")))
        w = [max(len(row[i]) for row in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(row[:5])) + "  " + row[5]
                 for row in rows]
        return "\n".join(lines)


def _cfg_str(cfg: dict) -> str:
    return " ".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in cfg.items())


def _f(x) -> str:
    return "-" if x is None else f"{x:.4g}"


PARTS = ("computation", "communication", "idle")


def median_breakdown(times: list, breakdowns: list) -> dict:
    """The breakdown that goes with ``statistics.median(times)``: the median run's, or the mean
    of the two middle runs' for an even count (its parts then add up to the median). Local."""
    if not times or len(breakdowns) != len(times) or not all(breakdowns):
        return {}
    order = sorted(range(len(times)), key=lambda i: times[i])
    mid = order[(len(order) - 1) // 2: len(order) // 2 + 1]
    return {p: statistics.fmean(breakdowns[i][p] for i in mid) for p in PARTS}


class Autotuner:
    """Search ``space`` for the configuration with the smallest predicted time of ``run``.

    Parameters
    ----------
    space : Space
    run : callable
        ``run(config)`` (or ``run(config, state)`` with ``prepare``): the program, collective over
        ``comm``; raising marks the configuration invalid (raise on every rank alike, e.g.
        ``ValueError`` from argument checks).
    prepare : callable, optional
        ``prepare(config) -> state``, collective, run once per configuration before it is
        evaluated (and before its full runs), outside the timed program: e.g. building the input
        matrix. ``state`` may have a ``free()`` method, called when the configuration is done.
    strategy : {"grid", "random", "racing"}
    mode : {"selective", "profile", "skeleton"}
        How each configuration is executed during the search.
    tolerance, confidence, min_samples :
        Steadiness criterion (see :class:`~hpcsuite.tune.stats.Model`); ignored if ``model`` given.
    samples : int, optional
        Number of configurations for ``random``.
    model : Model, optional
        Warm statistics (e.g. ``Model.load(path)``).
    comm : MPI communicator
        The ranks running the program (default COMM_WORLD).
    progress : callable, optional
        ``progress(i, n, ConfigResult)`` after each configuration (rank 0 prints).
    iterations : int
        Runs of the program per configuration (the time per run is what is predicted).
    remeasure : int
        Interleaved runs of every finalist after the search (0: none; the choice is then the
        smallest prediction of the search).
    finalists : int
        At most this many finalists.
    calibrate : bool
        Rescale a warm ``model`` to the machine's current speed before the search.
    share : bool
        Send kernel statistics along the execution path (see :mod:`hpcsuite.tune.execution`).
    adaptive : bool
        Stop a configuration's runs early (see the module notes); ``False``: exactly
        ``iterations`` runs each.

    Raises
    ------
    ValueError
        Bad strategy, mode, tolerance or confidence outside (0, 1), empty space: before any run.
    """

    def __init__(self, space: Space, run: Callable[[dict], object], strategy: str = "grid",
                 mode: str = "selective", tolerance: float = 0.05, confidence: float = 0.95,
                 min_samples: int = 3, samples: int | None = None, model: Model | None = None,
                 comm=None, seed: int = 0, progress: Callable | None = None,
                 prepare: Callable[[dict], object] | None = None, iterations: int = 1,
                 remeasure: int = 3, finalists: int = 4, calibrate: bool = True, share: bool = True,
                 adaptive: bool = True):
        if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
            raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
        if not isinstance(remeasure, int) or isinstance(remeasure, bool) or remeasure < 0:
            raise ValueError(f"remeasure must be an integer >= 0, got {remeasure!r}")
        if not isinstance(finalists, int) or isinstance(finalists, bool) or finalists < 1:
            raise ValueError(f"finalists must be an integer >= 1, got {finalists!r}")
        self.iterations, self.remeasure, self.max_finalists = iterations, remeasure, finalists
        self.calibrate, self.share, self.adaptive = bool(calibrate), bool(share), bool(adaptive)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not isinstance(space, Space):
            raise ValueError("space must be a hpcsuite.tune.Space")
        self.model = model if model is not None else Model(tolerance, confidence, min_samples)
        self.space, self.run, self.strategy, self.mode = space, run, strategy, mode
        self.configs = space.grid()
        if strategy == "random":
            if not isinstance(samples, int) or samples < 1:
                raise ValueError(f"strategy 'random' needs samples >= 1, got {samples!r}")
            self.configs = random.Random(seed).sample(self.configs, min(samples, len(self.configs)))
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.progress = progress
        self.prepare = prepare
        self._states: dict = {}
        self._prepared_s = 0.0         # seconds spent in prepare (not counted as tuning)
        self._done: list = []             # the configurations finished "ok" so far in this search

    # ------------------------------------------------------------------ the search
    def _program(self, cfg: dict) -> Callable[[], object]:
        """The zero-argument program for ``cfg`` (its prepared state built once). Collective."""
        if self.prepare is None:
            return lambda: self.run(dict(cfg))
        key = repr(sorted(cfg.items()))
        if key not in self._states:
            t0 = time.perf_counter()
            self._states[key] = self.prepare(dict(cfg))
            self._prepared_s += time.perf_counter() - t0
        state = self._states[key]
        return lambda: self.run(dict(cfg), state)

    def _release(self, cfg: dict) -> None:
        state = self._states.pop(repr(sorted(cfg.items())), None)
        if state is not None and hasattr(state, "free"):
            state.free()

    def _evaluate(self, cfg: dict, incumbent: ConfigResult | None) -> ConfigResult:
        t0, prepared = time.perf_counter(), self._prepared_s
        err = None
        predicted, executed, skipped, parts = [], 0, 0, []
        stop = ""
        bound = self._bound(incumbent)
        try:
            program = self._program(cfg)
            for it in range(self.iterations):
                # a first run pays first-touch costs (page faults, buffers) that later runs do not:
                # with several runs, racing judges from the second on, so no configuration is
                # dropped for its warm-up
                # ... and its kernel times are not representative either: with several runs, the
                # model keeps samples from the second on (measured: the 2-rank Cholesky of the tests
                # over-predicted by 15-20 % when skipped kernels were charged means that held
                # first-run samples, 10-12 % without them; bench/RESULTS.md); the first run learns
                # provisionally, so that it skips what became steady instead of costing a full run
                ex = Execution(self.model, self.mode, self.comm, share=self.share,
                               abandon_above=bound if (it or self.iterations == 1) else None,
                               record=True if it or self.iterations == 1 else "provisional")
                try:
                    with ex:
                        program()
                finally:
                    executed, skipped = executed + ex.result.executed, skipped + ex.result.skipped
                predicted.append(ex.result.predicted)
                parts.append(ex.result.breakdown)
                p = self._slower(predicted, incumbent)     # the same on every rank: merged paths
                if p is not None:
                    err = ("abandoned", f"slower than the best by more than the tolerance: Welch p = "
                                        f"{p:.2g} after {len(predicted)} runs")
                    break
                # after the first run only when (almost) no kernel ran in it anywhere (every kernel
                # known from earlier configurations): the first-touch costs are the executed kernels'
                stop = self._known(predicted, ex.result, first=it == 0) \
                    if self.adaptive and it < self.iterations - 1 else ""
                if stop:
                    break
        except Abandoned as exc:
            err = ("abandoned", f"predicted > {exc.bound:.4g} s after {exc.predicted:.4g} s")
        except Exception as exc:          # noqa: BLE001 - an invalid configuration, recorded
            err = ("invalid", f"{type(exc).__name__}: {exc}")
        # agree on the outcome (the lowest failing rank's reason wins)
        errs = self.comm.allgather(err)
        first = next((e for e in errs if e is not None), None)
        dt = self.comm.allreduce(time.perf_counter() - t0 - (self._prepared_s - prepared), op=MPI.MAX)
        if first is not None:
            return ConfigResult(cfg, first[0], reason=first[1].splitlines()[0][:200], tuning_time=dt,
                                executed=executed, skipped=skipped, runs=predicted)
        # the prediction: the median of the runs after the first (first-touch costs), if any
        warm = slice(1, None) if len(predicted) > 1 else slice(None)
        return ConfigResult(cfg, "ok", predicted_time=statistics.median(predicted[warm]), executed=executed,
                            skipped=skipped, tuning_time=dt, runs=predicted,
                            breakdown=median_breakdown(predicted[warm], parts[warm]), stopped=stop)

    def _known(self, runs: list, last: ExecutionResult, first: bool = False) -> str:
        """Adaptive runs: why a configuration needs no further run (see the module notes), or
        ``""``; after its ``first`` run only when (almost) nothing ran. Collective (the executed
        counts are summed; the predictions and executed times are the same on every rank)."""
        if self.comm.allreduce(last.executed) == 0:
            return STOP_NOTHING_RAN
        if last.executed_time < LITTLE_RAN * self.model.tolerance * last.predicted:
            return STOP_LITTLE_RAN
        if first or len(runs) < 2 or (self.strategy == "racing" and self._noise() is None):
            return ""                 # racing needs one spread measured without that selection
        x = self._sample(runs)        # from 3 runs on without the first (first-touch costs)
        m = statistics.fmean(x)
        half = self.model.z * statistics.stdev(x) / math.sqrt(len(x))
        return STOP_RUNS_AGREE if m > 0 and half / m < self.model.tolerance else ""

    # ------------------------------------------------------------------ statistics of the choice
    @staticmethod
    def _sample(runs: list) -> list:
        """The runs a comparison uses: without the first (first-touch costs) when 3 or more."""
        return runs[1:] if len(runs) >= 3 else list(runs)

    def _noise(self) -> tuple[float, int] | None:
        """Run-to-run relative variance pooled over the finished configurations, and its degrees
        of freedom; ``None`` before any configuration had two runs to compare. Configurations
        whose adaptive runs stopped because they agreed are left out (a spread selected small)."""
        ss, df = 0.0, 0
        for r in self._done:
            if r.stopped == STOP_RUNS_AGREE:   # stopped because its runs agreed: their spread is
                continue                       # biased low by that selection, left out
            x = self._sample(r.runs)
            if len(x) >= 2:
                m = statistics.fmean(x)
                ss += sum((v / m - 1.0) ** 2 for v in x)
                df += len(x) - 1
        return (ss / df, df) if df else None

    def _alpha(self) -> float:
        """The per-comparison level of a drop: ``1 - confidence`` over the configurations."""
        return (1.0 - self.model.confidence) / max(len(self.configs), 1)

    def _bound(self, incumbent: ConfigResult | None) -> float | None:
        """Racing's bound on one run's merged path (see the module notes), or ``None``."""
        if self.strategy != "racing" or incumbent is None:
            return None
        noise = self._noise()
        if noise is None:
            return None
        var_rel, df = noise
        x = self._sample(incumbent.runs)
        mean = statistics.fmean(x)
        var_one = var_rel * mean * mean                 # one run of a configuration like it
        t = float(sps.t.ppf(1.0 - self._alpha(), df))
        return (1.0 + self.model.tolerance) * mean + t * math.sqrt(var_one / len(x) + var_one)

    def _slower(self, runs: list, incumbent: ConfigResult | None) -> float | None:
        """Racing: Welch's p-value when ``runs`` are slower than ``(1 + tolerance)`` times the
        incumbent's at the corrected level, else ``None``."""
        if self.strategy != "racing" or incumbent is None:
            return None
        a, b = self._sample(runs), self._sample(incumbent.runs)
        if len(runs) < 3 or len(a) < 2 or len(b) < 2:
            return None
        p = self._welch(a, [(1.0 + self.model.tolerance) * v for v in b])
        return p if p < self._alpha() else None

    def _welch(self, a: list, b: list) -> float:
        """One-sided Welch p-value that ``a``'s mean exceeds ``b``'s. Each sample's variance is
        at least the run-to-run spread pooled over the configurations (relative, times its
        mean): runs of one configuration follow each other and share the machine's state of
        that moment (selective runs that charge the same means even agree almost exactly), so
        their own spread understates how far apart two configurations' runs may fall."""
        noise = self._noise()
        var_rel = noise[0] if noise else 0.0
        stats = []
        for x in (a, b):
            m = statistics.fmean(x)
            v = max(statistics.variance(x) if len(x) > 1 else 0.0, var_rel * m * m)
            stats.append((m, math.sqrt(v), len(x)))
        (ma, sa, na), (mb, sb, nb) = stats
        if sa == 0.0 and sb == 0.0:
            return 0.0 if ma > mb else 1.0
        p = float(sps.ttest_ind_from_stats(ma, sa, na, mb, sb, nb, equal_var=False,
                                           alternative="greater").pvalue)
        return 1.0 if math.isnan(p) else p

    def _finalists(self, ok: list) -> list:
        """The configurations Welch's test (Holm step-down over them, level ``1 - confidence``)
        cannot tell from the one with the smallest prediction; at most ``finalists``, fastest
        first."""
        ok = sorted(ok, key=lambda r: r.predicted_time)
        best, rest = ok[0], ok[1:]
        b = self._sample(best.runs)
        pvals = []
        for r in rest:
            a = self._sample(r.runs)
            p = 1.0
            if len(a) >= 2 and len(b) >= 2:
                p = self._welch(a, b)
            pvals.append(p)
        alpha = 1.0 - self.model.confidence
        rejected = set()
        for i, j in enumerate(sorted(range(len(rest)), key=lambda j: pvals[j])):   # Holm
            if pvals[j] >= alpha / (len(rest) - i):
                break
            rejected.add(j)
        kept = [best] + [r for j, r in enumerate(rest) if j not in rejected]
        return kept[:self.max_finalists]

    def _remeasure(self, finalists: list) -> None:
        """Run every finalist ``remeasure`` more times, round-robin after one untimed round; their
        predictions become the medians of these runs. Collective."""
        parts = {id(r): [] for r in finalists}
        for rnd in range(self.remeasure + 1):
            for r in finalists:
                ex = Execution(self.model, self.mode, self.comm, share=self.share)
                try:
                    with ex:
                        self._program(r.config)()
                except Exception as exc:      # noqa: BLE001 - ran before; recorded, not chosen
                    r.reason = f"re-measurement failed: {type(exc).__name__}: {exc}"[:200]
                    continue
                if rnd:
                    r.remeasured.append(ex.result.predicted)
                    parts[id(r)].append(ex.result.breakdown)
        for r in finalists:
            if r.remeasured:
                r.predicted_time = statistics.median(r.remeasured)
                r.breakdown = median_breakdown(r.remeasured, parts[id(r)])
            self._release(r.config)

    def _calibrate(self) -> float | None:
        """Rescale a warm model to the machine's current speed (see the module notes). Collective."""
        if not self.calibrate or not len(self.model):
            return None
        try:
            program = self._program(self.configs[0])
            fresh = Model(self.model.tolerance, self.model.confidence, self.model.min_samples)
            for cal in (Model(self.model.tolerance, self.model.confidence, self.model.min_samples), fresh):
                with Execution(cal, "profile", self.comm, share=False):
                    program()
        except Exception:                 # noqa: BLE001 - an invalid first configuration shows later
            return None
        # totals over the kernels the model knows, computation and communication apart: waiting
        # in a message (for a late partner, for a core on a busy machine) varies far more than a
        # BLAS call does, so computation alone decides where the run had any
        sums = np.zeros(4)
        for k, st in fresh.kernels.items():
            known = self.model.kernels.get(k)
            if known is not None and known.n:
                i = 0 if k[0] == "comp" else 2
                sums[i] += st.n * st.mean
                sums[i + 1] += st.n * known.mean
        sums = self.comm.allreduce(sums)
        measured, predicted = (sums[0], sums[1]) if sums[1] > 0 else (sums[2], sums[3])
        if predicted <= 0 or measured <= 0:
            return None
        factor = measured / predicted
        self.model.rescale(factor)
        return factor

    def tune(self, compare_full: bool = False, full_repeats: int | None = None) -> TuningResult:
        """Run the search; with ``compare_full`` also run every valid configuration fully
        ``full_repeats`` times (default: ``iterations``), right after its selective evaluation,
        timed separately. Collective over ``comm``."""
        full_repeats = self.iterations if full_repeats is None else full_repeats
        res = TuningResult(self.strategy, self.mode, tolerance=self.model.tolerance,
                           confidence=self.model.confidence, ranks=self.comm.Get_size(),
                           iterations=self.iterations)
        self.comm.Barrier()
        t0 = time.perf_counter()
        full_time = 0.0
        self._prepared_s = 0.0
        self._warm_up()
        res.calibration = self._calibrate()
        incumbent = None
        self._done = []
        for i, cfg in enumerate(self.configs):
            r = self._evaluate(cfg, incumbent)
            res.results.append(r)
            if r.status == "ok":
                self._done.append(r)
                if incumbent is None or r.predicted_time < incumbent.predicted_time:
                    incumbent = r
            if compare_full and r.status != "invalid":
                full_time += self._measure_full(r, full_repeats)
            # inputs are kept for the likely finalists (the fastest so far), to re-measure them
            keep = sorted(self._done, key=lambda x: x.predicted_time)[:self.max_finalists] \
                if self.remeasure else []
            for x in [r] + self._done:
                if all(x is not y for y in keep):
                    self._release(x.config)
            if self.progress:
                self.progress(i + 1, len(self.configs), r)
        ok = [r for r in res.results if r.status == "ok"]
        if ok and self.remeasure:
            finalists = self._finalists(ok)
            for r in ok:
                if r not in finalists:
                    self._release(r.config)
            self._remeasure(finalists)
            res.finalists = [r.config for r in finalists]
            ok = [r for r in finalists if r.remeasured] or ok
        if ok:
            chosen = min(ok, key=lambda r: r.predicted_time)
            res.best_config, res.best_predicted_time = chosen.config, chosen.predicted_time
            res.best_breakdown = chosen.breakdown or None
        total = self.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        res.prepare_time_s = self.comm.allreduce(self._prepared_s, op=MPI.MAX)
        res.tuning_wall_time_s = total - full_time - res.prepare_time_s
        executed = self.comm.allreduce(sum(r.executed for r in res.results))
        skipped = self.comm.allreduce(sum(r.skipped for r in res.results))
        res.skipped_fraction = skipped / (executed + skipped) if executed + skipped else 0.0
        if compare_full:
            res.full_wall_time_s = full_time
            self._summarise_full(res)
        return res

    def _measure_full(self, r: ConfigResult, repeats: int) -> float:
        """Run ``r.config`` fully ``repeats`` times (median kept); returns the time spent."""
        t0 = time.perf_counter()
        times = []
        for _ in range(repeats):
            try:
                times.append(run_full(self._program(r.config), self.comm))
            except Exception as exc:   # noqa: BLE001
                r.reason = f"full run failed: {type(exc).__name__}: {exc}"
                break
        r.measured_time = sorted(times)[len(times) // 2] if times else None
        r.full_runs = times
        return self.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    def _summarise_full(self, res: TuningResult) -> None:
        measured = [r for r in res.results if r.measured_time is not None]
        if not measured:
            return
        true_best = min(measured, key=lambda r: r.measured_time)
        res.true_best_config = true_best.config
        res.full_one_run_s = sum(r.measured_time for r in measured)
        ok = [r for r in measured if r.status == "ok" and r.predicted_time is not None]
        if ok:
            res.mean_relative_prediction_error = sum(abs(r.predicted_time - r.measured_time) / r.measured_time
                                                     for r in ok) / len(ok)
        chosen = next((r for r in measured if r.config == res.best_config), None)
        if chosen is not None:
            res.best_within = chosen.measured_time / true_best.measured_time - 1.0

    def _warm_up(self) -> None:
        """One skeleton run of the first configuration (no kernel executes): imports, caches and
        first-call costs land here instead of in the first configuration's prediction."""
        try:
            program = self._program(self.configs[0])
            with Execution(self.model, "skeleton", self.comm):
                program()
        except Exception:             # noqa: BLE001 - an invalid first configuration shows later
            pass


def write_report(res: TuningResult, path: str | os.PathLike) -> None:
    """Write the JSON report atomically (temporary file, then rename). Local (call on rank 0)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(res.to_json(), indent=1, default=str))
    tmp.replace(path)


def plot_report(res: TuningResult, path: str | os.PathLike) -> bool:
    """Bar chart of predicted (and measured) time per configuration, the predicted bars split into
    computation, communication and idle on the critical path where the breakdown is known;
    ``False`` without matplotlib. Local."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in res.results if r.predicted_time is not None or r.measured_time is not None]
    labels = [_cfg_str(r.config) for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(rows) + 2), 4.5))
    if all(r.breakdown or r.predicted_time is None for r in rows):
        bottom = [0.0] * len(rows)
        for part in PARTS:
            h = [(r.breakdown or {}).get(part, 0.0) for r in rows]
            ax.bar([i - 0.2 for i in x], h, 0.4, bottom=bottom, label=f"predicted: {part}")
            bottom = [b + v for b, v in zip(bottom, h)]
    else:
        ax.bar([i - 0.2 for i in x], [r.predicted_time or 0 for r in rows], 0.4, label="predicted (selective)")
    if any(r.measured_time for r in rows):
        ax.bar([i + 0.2 for i in x], [r.measured_time or 0 for r in rows], 0.4, label="measured (full)")
    ax.set_xticks(list(x), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("time per run (s)")
    title = f"{res.strategy} search, {res.ranks} ranks"
    if res.best_config:
        title += f": best {_cfg_str(res.best_config)}"
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
