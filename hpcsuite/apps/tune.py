"""tune: autotune a distributed factorization with statistical execution-path pruning.

Searches a space of configurations of a target (``cholesky``: block size, process grid, panel
broadcast variant, lookahead; ``cholqr``: panel width, process grid), predicting each
configuration's time from a *selective* run that skips kernels whose time is already known to the
requested confidence. Prints a table and the best configuration; writes a JSON report (and a plot
when matplotlib is installed) with each configuration's predicted time split into computation,
communication and idle on the critical path. With ``compare_full`` every configuration is also run
fully, so the report says how good the predictions were.

Target ``program`` is a user's own plain mpi4py code: a function in a Python file (``[program]``
``file`` and ``function``, relative to the deck), called with the configuration's parameters
(``[program.space]``, any names) and fixed arguments (``[program.args]``) as keyword arguments,
after an optional ``prepare`` function built its inputs; it is tuned inside
``tune.intercept_world()`` and ``tune.blas()``, so its body needs no change
(``inputs/tune_plain_mpi4py.toml`` tunes ``examples/10_tune_plain_mpi4py.py``).

Run: ``mpiexec -n 4 hpcsuite tune inputs/tune_cholesky.toml [--json FILE] [--compare-full]``
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hpcsuite import deck as dk
from hpcsuite.runtime.waiting import polite
from hpcsuite.tune import STRATEGIES, Autotuner, Model, Space, plot_report, write_report
from hpcsuite.tune.execution import MODES
from hpcsuite.tune.targets import TARGETS, ProgramTarget, load_program

NAME = "tune"
SUMMARY = "autotune distributed Cholesky / CholeskyQR2 / your own mpi4py code with statistical execution-path pruning"


@dataclass
class _TableOf(dk.Field):
    """A TOML table ``{name: value}`` (names free); ``lists``: every value a non-empty list."""

    lists: bool = False

    def words(self) -> str:
        return "table ``{name = [values...], ...}``" if self.lists else "table ``{name = value, ...}``"

    def convert(self, v):
        if not isinstance(v, dict):
            raise ValueError(f"must be a table {{name = value, ...}}, got {v!r}")
        for k, x in v.items():
            if self.lists and (not isinstance(x, list) or not x):
                raise ValueError(f"{k} must be a non-empty list of values, got {x!r}")
        return dict(v)

SCHEMA = dk.Schema({
    "app": {"name": dk.Str(help="the application: tune")},
    "tune": {
        "target": dk.Choice(choices=tuple(TARGETS), help="what to tune"),
        "strategy": dk.Choice(default="grid", choices=STRATEGIES, help="search strategy"),
        "mode": dk.Choice(default="selective", choices=MODES, help="how configurations run while searching"),
        "tolerance": dk.Float(default=0.05, gt=0, lt=1, help="relative confidence half-width for steady kernels"),
        "confidence": dk.Float(default=0.95, gt=0, lt=1, help="confidence level of that interval"),
        "min_samples": dk.Int(default=2, min=2, help="samples before a kernel may be skipped"),
        "samples": dk.Int(default=0, min=0, help="configurations for the random strategy"),
        "seed": dk.Int(default=0, min=0),
        "compare_full": dk.Bool(default=False, help="also run every configuration fully"),
        "iterations": dk.Int(default=1, min=1, help="runs of each configuration (later runs skip what "
                                                    "earlier ones made steady); times are per run"),
        "adaptive": dk.Bool(default=True, help="iterations is the most runs: a configuration stops once a "
                                               "run executed no kernel or its runs agree to the tolerance"),
        "full_repeats": dk.Int(default=0, min=0, help="full runs per configuration with compare_full "
                                                      "(median kept; 0: as many as iterations)"),
        "remeasure": dk.Int(default=3, min=0, help="interleaved runs of each finalist (the configurations "
                                                   "the search cannot tell from the best) after the search"),
        "calibrate": dk.Bool(default=True, help="rescale a warm model to the machine's current speed first"),
        "model": dk.Str(default="", help="kernel statistics to start from (a JSON model file)"),
        "save_model": dk.Str(default="", help="where to save the statistics afterwards"),
        "report": dk.Str(default="", help="JSON report file"),
        "plot": dk.Str(default="", help="PNG plot of predicted (and measured) times"),
    },
    "problem": {
        "n": dk.Int(default=0, min=0, help="matrix order (cholesky) or number of columns (cholqr)"),
        "m": dk.Int(default=0, min=0, help="number of rows (cholqr)"),
    },
    "space": {
        "block": dk.IntList(default=[], min=1, help="cholesky block sizes"),
        "panel": dk.IntList(default=[], min=1, help="cholqr panel widths"),
        "grid": dk.AnyList(default=["auto"], what='grids [Pr, Pc] or "auto"',
                           help='process grids [[Pr, Pc], ...] or ["auto"]'),
        "variant": dk.AnyList(default=["bcast"], what="strings", help='cholesky panel broadcast: "bcast", "ring"'),
        "lookahead": dk.IntList(default=[0], min=0, max=1, help="cholesky lookahead depth"),
    },
    "program": {
        "file": dk.Str(default="", help="target program: the Python file (relative to the deck)"),
        "function": dk.Str(default="run", help="target program: the function to tune"),
        "prepare": dk.Str(default="", help="target program: a function building its inputs once per "
                                           "configuration (returns a dict of keyword arguments)"),
        "args": _TableOf(default={}, help="target program: fixed keyword arguments"),
        "space": _TableOf(default={}, lists=True, help="target program: {parameter = [values...]}"),
    },
}, doc={"tune": "the search", "problem": "the matrix", "space": "the configurations to consider",
        "program": "target program: your own mpi4py code"})


def _program_file(deck) -> Path:
    f = Path(deck.program.file).expanduser()
    return f if f.is_absolute() else Path(deck.path).resolve().parent / f



def _space_params(deck) -> dict:
    if deck.tune.target == "program":
        return {k: list(v) for k, v in deck.program.space.items()}
    target = TARGETS[deck.tune.target]
    sp = deck.space
    params = {}
    for name in target.params:
        values = sp[name]
        if name == "grid":
            values = [v if v == "auto" else tuple(v) if isinstance(v, list) else v for v in values]
        if values:
            params[name] = list(values)
    return params


def check(deck, team) -> None:
    t = deck.tune
    target = TARGETS[t.target]
    if t.target == "program":
        _check_program(deck)
        if t.strategy == "random" and t.samples < 1:
            raise deck.fail("tune", "samples", "must be >= 1 for the random strategy")
        return
    if deck.program.file or deck.program.space:
        raise deck.fail("program", "file" if deck.program.file else "space",
                        f"is for target \"program\", not {t.target!r}")
    for key in target.problem_keys:
        if not deck.problem[key]:
            raise deck.fail("problem", key, f"is required for target {t.target!r}")
    if t.target == "cholqr" and deck.problem.m < deck.problem.n:
        raise deck.fail("problem", "m", f"= {deck.problem.m} must be at least n = {deck.problem.n} (a tall matrix)")
    params = _space_params(deck)
    for name, check_value in target.params.items():
        if name not in params:
            raise deck.fail("space", name, f"needs at least one value for target {t.target!r}")
        for v in params[name]:
            if not check_value(v):
                raise deck.fail("space", name, f"has an invalid value {v!r}")
    unused = [k for k in ("block", "panel") if k not in target.params and deck.space[k]]
    if unused:
        raise deck.fail("space", unused[0], f"is not a parameter of target {t.target!r}")
    for g in params.get("grid", []):
        if g != "auto" and math.prod(g) != team.size:
            raise deck.fail("space", "grid", f"{list(g)} does not hold {team.size} ranks; every grid must "
                                             f"multiply to the number of ranks (or use \"auto\")")
    if t.strategy == "random" and t.samples < 1:
        raise deck.fail("tune", "samples", "must be >= 1 for the random strategy")


def _check_program(deck) -> None:
    pr = deck.program
    if not pr.file:
        raise deck.fail("program", "file", 'is required for target "program"')
    if not pr.space:
        raise deck.fail("program", "space", 'needs at least one parameter with values for target "program"')
    used = [k for k in ("block", "panel") if deck.space[k]]
    if used:
        raise deck.fail("space", used[0], 'is not for target "program": its parameters go in [program.space]')
    clash = sorted(set(pr.space) & set(pr.args))
    if clash:
        raise deck.fail("program", "args", f"and [program.space] both set {clash[0]!r}")
    try:
        Space(_space_params(deck))
    except ValueError as exc:
        raise deck.fail("program", "space", str(exc)) from None
    for key in ("function", "prepare"):
        if not pr[key]:
            continue
        try:
            load_program(_program_file(deck), pr[key])
        except FileNotFoundError as exc:
            raise deck.fail("program", "file", f"{pr.file!r}: {exc}") from None
        except ValueError as exc:
            raise deck.fail("program", key, str(exc)) from None
        except Exception as exc:          # noqa: BLE001 - the user's file failed to import
            raise deck.fail("program", "file", f"{pr.file!r} cannot be imported: {type(exc).__name__}: "
                                               f"{exc}".splitlines()[0]) from None


def _percent(fraction) -> str:
    """``0.034`` -> ``"3.4%"``; a figure the run could not measure (``None``) says so instead of 0.0%."""
    return "unknown" if fraction is None else f"{100 * fraction:.1f}%"


def _times(ratio) -> str:
    return "unknown" if ratio is None else f"{ratio:.2f}x"


def _seconds(x) -> str:
    return "unknown" if x is None else f"{x:.3g} s"


def run(deck, ctx) -> int:
    team, log = ctx.team, ctx.log
    t = deck.tune
    compare = t.compare_full or ctx.extra.get("compare_full", False)
    report = ctx.extra.get("json") or t.report
    if t.target == "program":
        pr = deck.program
        target = ProgramTarget(team, _program_file(deck), pr.function, pr.prepare, pr.args)
    else:
        target = TARGETS[t.target](team, **{k: deck.problem[k] for k in TARGETS[t.target].problem_keys})
    model = Model.load(t.model, tolerance=t.tolerance, confidence=t.confidence, min_samples=t.min_samples) \
        if t.model else None
    space = Space(_space_params(deck))

    def progress(i, n, r):
        pred = "-" if r.predicted_time is None else f"{r.predicted_time:.4g} s"
        meas = "" if r.measured_time is None else f", measured {r.measured_time:.4g} s"
        log.info(f"[{i}/{n}] {' '.join(f'{k}={v}' for k, v in r.config.items())}: {r.status}, "
                 f"predicted {pred}{meas}, {r.executed} kernels run, {r.skipped} skipped")

    shard = ctx.extra.get("shard")
    tuner = Autotuner(space, target.run, strategy=t.strategy, mode=t.mode, tolerance=t.tolerance,
                      confidence=t.confidence, min_samples=t.min_samples, samples=t.samples or None,
                      model=model, comm=team.comm, seed=t.seed, progress=progress, prepare=target.prepare,
                      iterations=t.iterations, remeasure=t.remeasure, calibrate=t.calibrate,
                      adaptive=t.adaptive)
    if shard is not None:                 # one task of a job array: every count-th configuration
        k, count = shard
        tuner.configs = tuner.configs[k::count]
        if not tuner.configs:
            log.result(f"shard {k}/{count}: no configuration to evaluate")
            return 0
    problem = deck.program.args if t.target == "program" else {k: v for k, v in deck.problem.items() if v}
    log.info(f"tuning {t.target} ({', '.join(f'{k}={v}' for k, v in problem.items())}) over "
             f"{len(tuner.configs)} configurations on {team.size} rank(s), strategy {t.strategy}, "
             f"mode {t.mode}, {t.iterations} run(s) each, tolerance {t.tolerance}, confidence {t.confidence}")
    if polite():
        # measured: at 4 ranks on 2 cores, 6-32 % prediction error against 1-5 % with a core per rank
        log.warning("more ranks than cores on this node: kernel times include waiting for a core, "
                    "so predictions and the chosen configuration are unreliable; tune with one rank per core")
    res = tuner.tune(compare_full=compare, full_repeats=t.full_repeats or None)
    if team.rank == 0 and not ctx.quiet:
        print(res.table())
    if res.best_config is None:
        log.result("no valid configuration")
        return 1
    if res.calibration is not None:
        log.info(f"warm model rescaled by {res.calibration:.3f} to the machine's current speed")
    if res.finalists:
        log.info(f"{len(res.finalists)} finalist(s) re-measured {t.remeasure} time(s), interleaved")
    summary = (f"best {res.best_config} predicted {res.best_predicted_time:.4g} s; tuning took "
               f"{res.tuning_wall_time_s:.3g} s, {100 * res.skipped_fraction:.0f}% of kernel executions skipped"
               f" (preparing the inputs took {res.prepare_time_s:.3g} s more, counted on neither side)")
    if compare:
        summary += (f"; full runs took {res.full_wall_time_s:.3g} s ({_times(res.speedup)}; one full run per "
                    f"configuration {_seconds(res.full_one_run_s)}, {_times(res.speedup_one_run)}), mean "
                    f"prediction error {_percent(res.mean_relative_prediction_error)}, true best "
                    f"{res.true_best_config}, chosen is {_percent(res.best_within)} slower than it")
    log.result(summary)
    if res.best_breakdown:
        b = res.best_breakdown
        log.info("best configuration's predicted critical path: " +
                 ", ".join(f"{p} {b[p]:.4g} s ({100 * b[p] / max(res.best_predicted_time, 1e-300):.0f}%)"
                           for p in ("computation", "communication", "idle")))
    if team.rank == 0:
        if report:
            write_report(res, report)
            log.info(f"wrote {report}")
        if t.plot and plot_report(res, t.plot):
            log.info(f"wrote {t.plot}")
        if t.save_model:
            tuner.model.save(t.save_model)
            log.info(f"saved kernel statistics to {t.save_model}")
    return 0

