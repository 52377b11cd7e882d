"""Autotuning side by side: exhaustive full runs, hpcsuite's selective search (grid, racing, warm
model) and Optuna (TPE sampler with successive-halving pruning), in one MPI run.

For the distributed Cholesky (or CholeskyQR2, or ``summa``: the plain mpi4py + NumPy SUMMA of
``examples/10_tune_plain_mpi4py.py``, tuned through ``tune.intercept_world()`` and ``tune.blas()``
with no change to its body; panel width, panels per local product, process grid) configuration space of
``inputs/tune_*.toml`` it

1. runs every configuration fully ``--iterations`` times (at least ``--truth-repeats``), round-robin
   over the configurations, each timed run right after an untimed one of the same configuration:
   the median is the *true* time per run, the time of ``--iterations`` runs of every
   configuration is what exhaustive autotuning costs (the reference wall time);
2. tunes with ``hpcsuite.tune.Autotuner`` (mode ``selective``, ``--iterations`` runs per
   configuration, as the reference autotuner evaluates each configuration over an iteration
   count): strategy ``grid``, strategy ``racing``, and ``grid`` again starting from the first
   search's saved statistics (a later job starting warm);
3. tunes with Optuna (ask/tell on rank 0, configurations broadcast): TPE sampler, successive-halving
   pruner with the number of full runs (up to ``--iterations``) as the resource,
   ``--optuna-trials`` trials;
4. runs every configuration fully ``--recheck`` times again: the mean change of the true times
   between then and now is the noise floor below which a prediction error cannot be judged
   (row "full runs again").

and prints per approach: wall time, speedup over exhaustive tuning measured two ways (``10 runs``:
``--iterations`` full runs of every configuration; ``1 run``: one full run of every configuration,
the strongest exhaustive baseline, the first timed round-robin run after the warm-up), mean
prediction error (selective runs), the chosen configuration and how much slower it truly is than
the true best. The warm-model row's wall time includes the cold grid search that built its model
(the warm search alone is printed in a comment line), and the warm model is first rescaled to the
machine's current speed (the tuner's calibration; its factor is printed). Input
matrices are built once per configuration before anything is timed.

    mpiexec -n 2 .venv/bin/python bench/tune_search.py                 # cholesky, n = 1536
    mpiexec -n 4 .venv/bin/python bench/tune_search.py --target cholqr --m 65536 --n 256 --grids 4x1 2x2 1x4
    mpiexec -n 2 .venv/bin/python bench/tune_search.py --target summa --n 2048 --panels 32 64 128 256 --depths 1 4

Optuna is optional (``pip install optuna``); without it that row is skipped with a note.
Timings on shared 2-core machines are noisy: a busy machine makes kernel times unsteady, which
costs the selective search both speed and accuracy. Check the load before reading the numbers.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (fits BLAS threads per rank)
from mpi4py import MPI  # noqa: E402

from hpcsuite.runtime import Team  # noqa: E402
from hpcsuite.tune import Autotuner, Model, Space  # noqa: E402
from hpcsuite.tune.execution import run_full  # noqa: E402
from hpcsuite.tune.targets import TARGETS, ProgramTarget  # noqa: E402

COMM = MPI.COMM_WORLD
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "10_tune_plain_mpi4py.py"


def key(cfg: dict) -> str:
    return repr(sorted(cfg.items()))


def say(*a) -> None:
    if COMM.Get_rank() == 0:
        print(*a, flush=True)


def space_for(args) -> dict:
    grids = ["auto"] if not args.grids else [tuple(int(x) for x in g.split("x")) for g in args.grids]
    if args.target == "summa":                 # the example's grids: every factorisation of the ranks
        size = COMM.Get_size()
        grids = grids if args.grids else [(p, size // p) for p in range(1, size + 1) if size % p == 0]
        return {"panel": args.panels, "depth": args.depths, "grid": grids}
    if args.target == "cholesky":
        return {"block": args.blocks, "grid": grids, "variant": ["bcast", "ring"], "lookahead": [0, 1]}
    return {"panel": args.panels, "grid": grids}


def exhaustive(configs, programs, iterations: int, repeats: int):
    """Every configuration fully, ``max(iterations, repeats)`` times. Returns (true medians, wall
    time of ``iterations`` runs of every configuration).

    The runs go round-robin over the configurations, so that a drift of the machine during the
    measurement spreads over every configuration's median instead of moving the few measured
    during it (measured one after another, whole groups of configurations, one block size, came
    out 4-5 % off together). Each timed run follows an untimed one of the same configuration,
    because a configuration's runs follow each other in a real job: without it, CholeskyQR2's
    output arrays came fresh from MPI every run (the window pool keeps one layout at a time)
    and its runs were 20 % slower than in a row. Only the timed runs count as exhaustive
    tuning's cost."""
    times = {key(cfg): [] for cfg in configs}
    for _ in range(max(iterations, repeats)):
        for cfg in configs:
            run_full(programs[key(cfg)], COMM)               # the run before, untimed
            times[key(cfg)].append(run_full(programs[key(cfg)], COMM))
    truth = {k: statistics.median(ts) for k, ts in times.items()}
    return truth, sum(sum(ts[:iterations]) for ts in times.values()), sum(ts[0] for ts in times.values())


def selective(space, target, states, strategy: str, args, model=None):
    t = Autotuner(space, target.run, strategy=strategy, mode="selective", tolerance=args.tolerance,
                  confidence=args.confidence, min_samples=args.min_samples, model=model, comm=COMM,
                  prepare=lambda cfg: states[key(cfg)], iterations=args.iterations,
                  adaptive=not args.fixed_runs)
    t._release = lambda cfg: None        # the bench keeps the prepared inputs for every approach
    return t.tune(), t.model


def _config_of(params: dict, space: dict) -> dict:
    return {name: values[[str(v) for v in values].index(params[name])] for name, values in space.items()}


def optuna_search(space, programs, args, truth, true_best):
    """TPE + successive halving (resource: repeated full runs). Rank 0 decides, all ranks run.
    Returns (best config, wall time, distinct configs run, wall time until its best-so-far was
    within 5% of the true best, or None)."""
    try:
        import optuna
    except ImportError:
        return None
    rank = COMM.Get_rank()
    study = None
    if rank == 0:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            direction="minimize", sampler=optuna.samplers.TPESampler(seed=args.seed),
            pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2))
    seen: dict = {}
    t_within = None
    COMM.Barrier()
    t0 = time.perf_counter()
    for _ in range(args.optuna_trials):
        cfg = None
        if rank == 0:
            trial = study.ask()
            # Optuna's categorical choices must be plain scalars: offer the values' strings
            cfg = {name: values[[str(v) for v in values].index(trial.suggest_categorical(name, [str(v) for v in values]))]
                   for name, values in space.items()}
        cfg = COMM.bcast(cfg)
        k = key(cfg)
        times, pruned = list(seen.get(k, [])), False
        for step in range(len(times), args.iterations):
            times.append(run_full(programs[k], COMM))
            stop = False
            if rank == 0:
                trial.report(statistics.median(times), step)
                stop = trial.should_prune()
            if COMM.bcast(stop):
                pruned = True
                break
        seen[k] = times
        if rank == 0:
            if pruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, statistics.median(times))
            done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
            so_far = _config_of(min(done, key=lambda t: t.value).params, space) if done else None
            if t_within is None and so_far and truth[key(so_far)] <= 1.05 * true_best:
                t_within = time.perf_counter() - t0
    wall = COMM.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    best = None
    if rank == 0:
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        best = _config_of(min(done, key=lambda t: t.value).params, space) if done else None
    return COMM.bcast(best), wall, len(seen), COMM.bcast(t_within)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=("cholesky", "cholqr", "summa"), default="cholesky")
    ap.add_argument("--n", type=int, default=1536)
    ap.add_argument("--m", type=int, default=65536, help="rows (cholqr)")
    ap.add_argument("--blocks", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--panels", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 4], help="summa: panels per local product")
    ap.add_argument("--grids", nargs="+", metavar="PRxPC", help="process grids (default: auto)")
    ap.add_argument("--truth-repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10,
                    help="runs per configuration (exhaustive, selective, and Optuna's largest resource)")
    ap.add_argument("--optuna-trials", type=int, default=8)
    ap.add_argument("--recheck", type=int, default=3,
                    help="full runs per configuration repeated after the searches: how far the true "
                         "times themselves drift (the noise floor of the prediction error); 0: skip")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--min-samples", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--detail", action="store_true", help="print every configuration's prediction")
    ap.add_argument("--searches", nargs="+", choices=("grid", "racing", "warm"), default=["grid", "racing", "warm"],
                    help="which selective searches to run (warm needs grid)")
    ap.add_argument("--fixed-runs", action="store_true",
                    help="every configuration gets exactly --iterations runs (the tuner's adaptive stop off)")
    ap.add_argument("--json", help="append the rows as JSON lines to this file (rank 0)")
    args = ap.parse_args()

    team = Team.world()
    problem = {"n": args.n} if args.target in ("cholesky", "summa") else {"m": args.m, "n": args.n}
    if args.target == "summa":
        target = ProgramTarget(team, EXAMPLE, "summa", "inputs", problem)
    else:
        target = TARGETS[args.target](team, **problem)
    params = space_for(args)
    space = Space(params)
    configs = space.grid()
    states = {key(c): target.prepare(dict(c)) for c in configs}
    programs = {key(c): (lambda c=c: target.run(dict(c), states[key(c)])) for c in configs}
    say(f"# {args.target} {problem}, {len(configs)} configurations, {COMM.Get_size()} ranks, "
        f"{common.THREADS} BLAS thread(s) per rank")

    # warm-up: first-call costs (imports, plan caches) out of every approach's time
    run_full(programs[key(configs[0])], COMM)
    truth, t_exhaustive, t_one = exhaustive(configs, programs, args.iterations, args.truth_repeats)
    true_best = min(truth.values())
    best_cfg = min(configs, key=lambda c: truth[key(c)])
    say(f"# true best {best_cfg}: {true_best:.4g} s per run; exhaustive ({args.iterations} full runs "
        f"each): {t_exhaustive:.3g} s; one full run of each: {t_one:.3g} s")

    rows = [(f"exhaustive full runs ({args.iterations} each)", t_exhaustive, 1.0, t_one / t_exhaustive, None,
             best_cfg, 0.0, None),
            ("exhaustive full runs (1 each)", t_one, t_exhaustive / t_one, 1.0, None, best_cfg, 0.0, None)]

    searches = []

    def error(res, ref):
        """Mean relative prediction error of a search's completed configurations against ``ref``."""
        ok = [r for r in res.results if r.status == "ok"]
        return statistics.mean(abs(r.predicted_time - ref[key(r.config)]) / ref[key(r.config)]
                               for r in ok) if ok else None

    def add(name, res, extra_wall=0.0):
        searches.append((name, res))
        err = error(res, truth)
        within = truth[key(res.best_config)] / true_best - 1 if res.best_config else None
        wall = res.tuning_wall_time_s + extra_wall
        rows.append((name, wall, t_exhaustive / wall, t_one / wall, err, res.best_config, within,
                     res.skipped_fraction))
        if res.best_breakdown:
            say(f"# {name}: chosen configuration's predicted critical path: " +
                ", ".join(f"{k} {v:.4g} s" for k, v in res.best_breakdown.items()))
        if args.detail:
            say(f"# {name}: configuration, true s per run, predicted s, signed error, kernels run/skipped")
            for r in res.results:
                tr = truth[key(r.config)]
                pe = f"{100 * (r.predicted_time / tr - 1):+.1f}%" if r.predicted_time else r.status
                say(f"#   {r.config}  {tr:.4f}  {r.predicted_time or float('nan'):.4f}  {pe}  "
                    f"{r.executed}/{r.skipped}")

    path = None
    if "grid" in args.searches:
        res, model = selective(space, target, states, "grid", args)
        add("selective grid (cold)", res)
        cold_wall = res.tuning_wall_time_s
        say("# selective grid (cold): runs per configuration " +
            " ".join(str(len(r.runs)) for r in res.results) + f"; finalists {len(res.finalists)}")
        path = None
        if COMM.Get_rank() == 0:
            path = Path(tempfile.mkdtemp()) / "model.json"
            model.save(path)
        path = COMM.bcast(str(path) if path else None)
    if "racing" in args.searches:
        res, _ = selective(space, target, states, "racing", args)
        add("selective racing (cold)", res)
    if "warm" in args.searches and "grid" in args.searches:
        warm = Model.load(path, tolerance=args.tolerance, confidence=args.confidence, min_samples=args.min_samples)
        res, _ = selective(space, target, states, "grid", args, model=warm)
        say(f"# warm search alone: {res.tuning_wall_time_s:.3g} s, model rescaled by {res.calibration}")
        add("selective grid (warm, incl. its cold search)", res, extra_wall=cold_wall)

    if args.recheck > 0:
        # the same full runs again, minutes later: a prediction cannot be judged more finely than
        # the truth holds still on a shared machine
        again, _, _ = exhaustive(configs, programs, args.recheck, 0)
        drift = [again[key(c)] / truth[key(c)] - 1 for c in configs]
        say(f"# truth re-measured after the searches ({args.recheck} full runs each): mean |change| "
            f"{100 * statistics.mean(abs(d) for d in drift):.1f}%, range {100 * min(drift):+.1f}% to "
            f"{100 * max(drift):+.1f}%")
        rows.append(("full runs again (noise floor)", None, None, None, statistics.mean(abs(d) for d in drift),
                     None, None, None))
        mid = {k: 0.5 * (truth[k] + again[k]) for k in truth}
        say("# prediction error against the true times measured before the searches / after them / "
            "the mean of both (a linear drift of the machine cancels in the last):")
        for name, res in searches:
            e = [error(res, ref) for ref in (truth, again, mid)]
            say(f"#   {name:30s} " + " / ".join("-" if x is None else f"{100 * x:.1f}%" for x in e))

    opt = optuna_search(params, programs, args, truth, true_best) if args.optuna_trials > 0 else False
    if opt is False:
        pass                                     # --optuna-trials 0: not asked for
    elif opt is None:
        say("# optuna not installed: pip install optuna to add the Optuna row")
    else:
        best, wall, distinct, t_within = opt
        within = truth[key(best)] / true_best - 1 if best else None
        say(f"# optuna: best-so-far within 5% of the true best after "
            f"{'never' if t_within is None else f'{t_within:.3g} s'}")
        rows.append((f"optuna TPE+SHA ({args.optuna_trials} trials, {distinct} distinct)", wall,
                     t_exhaustive / wall, t_one / wall, None, best, within, None))

    if COMM.Get_rank() == 0:
        print(f"\n## autotuning {args.target} {problem} ({COMM.Get_size()} ranks)")
        print(f"{'approach':48s} {'wall s':>8s} {f'vs {args.iterations} runs':>10s} {'vs 1 run':>9s} {'pred err':>9s} "
              f"{'skipped':>8s} {'chosen slower than best':>24s}  chosen")
        for name, wall, sp, sp1, err, cfg, within, skipped in rows:
            print(f"{name:48s} {'-' if wall is None else f'{wall:.3g}':>8s} "
                  f"{'-' if sp is None else f'{sp:.2f}x':>10s} {'-' if sp1 is None else f'{sp1:.2f}x':>9s} "
                  f"{'-' if err is None else f'{100 * err:.1f}%':>9s} "
                  f"{'-' if skipped is None else f'{100 * skipped:.0f}%':>8s} "
                  f"{'-' if within is None else f'{100 * within:.1f}%':>24s}  {cfg}")
        if args.json:
            with open(args.json, "a") as f:
                for r in rows:
                    f.write(json.dumps({"bench": "tune_search", "target": args.target, "ranks": COMM.Get_size(),
                                        "approach": r[0], "iterations": args.iterations, "wall_s": r[1],
                                        "speedup": r[2], "speedup_one_run": r[3], "pred_err": r[4],
                                        "chosen": r[5], "within": r[6], "skipped": r[7]}, default=str) + "\n")
    for s in states.values():
        if hasattr(s, "free"):
            s.free()
    if COMM.Get_rank() == 0 and path:
        import shutil
        shutil.rmtree(Path(path).parent, ignore_errors=True)      # the saved model's temporary folder


if __name__ == "__main__":
    main()
