"""Why a selective search still executes kernels: counts (not timings, which the load moves) of
every kernel execution of a grid search over the Cholesky space, by configuration, run, kernel
and reason, plus the signatures each configuration brings that the shared model has not seen.

Reasons (``Execution.why``): ``new signature`` (no sample of this exact key on any rank known
here), ``too few samples`` (fewer than ``--min-samples``), ``interval wider than tolerance`` (the
relative confidence half-width of the mean is not below ``--tolerance``), ``another rank not
steady`` (a collective this rank could skip but a participant could not), ``sender not steady``
(a ``Sendrecv`` receiver follows its sender), ``never skipped (Wait)`` (local completions),
``not skippable (...)`` (collectives the tuner never skips), ``half of a Sendrecv``.

It then times, for one configuration per block size once its model is steady, a full run, a
selective run and the number of intercepted calls: the cost of a selective run per intercepted
call against the kernels' own mean times (is a kernel worth intercepting at all).

    mpiexec -n 2 python bench/tune_signatures.py [--n 4096] [--blocks 32 64 128 256] [--iterations 5]
        [--adaptive] [--no-shares] [--timing]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402,F401  (fits BLAS threads per rank)
from mpi4py import MPI  # noqa: E402

from hpcsuite.runtime import Team  # noqa: E402
from hpcsuite.tune import Model, Space  # noqa: E402
from hpcsuite.tune.execution import Execution, run_full  # noqa: E402
from hpcsuite.tune.targets import TARGETS  # noqa: E402

COMM = MPI.COMM_WORLD


def say(*a) -> None:
    if COMM.Get_rank() == 0:
        print(*a, flush=True)


def total(counter_list) -> Counter:
    c = Counter()
    for x in counter_list:
        c.update(x)
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--blocks", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--min-samples", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--adaptive", action="store_true",
                    help="stop a configuration after a run in which no rank executed a kernel")
    ap.add_argument("--no-shares", action="store_true",
                    help="every kernel to the tolerance on its own (before: no sharing out by path share)")
    ap.add_argument("--timing", action="store_true", help="also time full vs selective runs per block")
    args = ap.parse_args()
    team = Team.world()
    target = TARGETS["cholesky"](team, n=args.n)
    space = Space({"block": args.blocks, "grid": ["auto"], "variant": ["bcast", "ring"], "lookahead": [0, 1]})
    model = Model(args.tolerance, args.confidence, args.min_samples)
    if args.no_shares:                  # the criterion before the path's tolerance was shared out
        model.tolerance_of = lambda key, share=None: model.tolerance
    say(f"# cholesky n = {args.n}, {COMM.Get_size()} ranks, {args.iterations} runs per configuration, "
        f"tolerance {args.tolerance}, confidence {args.confidence}, min samples {args.min_samples}")
    say("# per configuration: executed kernel calls per run (all ranks), then the reasons over its runs")
    every = Counter()
    later = Counter()
    first_of_block = set()
    for i, cfg in enumerate(space.grid()):
        state = target.prepare(dict(cfg))
        per_run, why_all, new_keys = [], Counter(), set()
        for it in range(args.iterations):
            before = set(model.kernels) | set(model.remote)
            ex = Execution(model, "selective")
            ex.why = {}
            with ex:
                target.run(dict(cfg), state)
            new_keys |= (set(model.kernels) | set(model.remote)) - before
            counts = (COMM.allreduce(ex.result.executed), COMM.allreduce(ex.result.skipped))
            per_run.append(counts)
            why_all.update(ex.why)
            if args.adaptive and COMM.allreduce(ex.result.executed) == 0:
                break
        state.free()
        why = total(COMM.allgather(why_all))
        new_keys = set().union(*COMM.allgather(new_keys))
        fams = Counter(k[1] for k in new_keys)
        every.update(why)
        if cfg["block"] in first_of_block:
            later.update(why)
        first_of_block.add(cfg["block"])
        say(f"{cfg}: executed/skipped per run " + " ".join(f"{e}/{s}" for e, s in per_run) +
            f"; new signatures {len(new_keys)} ({', '.join(f'{k} {v}' for k, v in fams.most_common())})")
        by_reason = defaultdict(list)
        for (reason, name), c in why.most_common():
            by_reason[reason].append(f"{name} {c}")
        for reason, items in sorted(by_reason.items(), key=lambda kv: -sum(int(x.split()[-1]) for x in kv[1])):
            say(f"#   {reason:32s} " + ", ".join(items))
    for title, c in (("all configurations", every), ("later configurations of a block size", later)):
        say(f"# {title}: executed calls by reason")
        red = Counter()
        for (reason, _), v in c.items():
            red[reason] += v
        for reason, v in red.most_common():
            say(f"#   {reason:32s} {v}")
    say("# the most sampled signatures on rank 0: samples, mean us, relative std, relative CI half-width "
        "(z * stderr / mean); the share of the last run's path it takes")
    top = sorted(model.kernels.items(), key=lambda kv: -kv[1].n)[:10]
    for k, s in top:
        say(f"#   {k[:2]} {str(k[2:])[:40]:40s} n {s.n:6d} mean {1e6 * s.mean:8.1f} rel.std "
            f"{(s.variance ** 0.5) / s.mean:6.2f} half-width {model.z * s.stderr / s.mean:6.3f} "
            f"share {getattr(model, 'share', {}).get(k, float('nan')):.4f}")
    if args.timing:
        say("# block, full ms, selective ms, intercepted calls per run, selective us per call, "
            "kernel mean us (median over signatures, computation / communication)")
        for block in args.blocks:
            cfg = {"block": block, "grid": "auto", "variant": "bcast", "lookahead": 0}
            state = target.prepare(dict(cfg))
            ts, tsel, calls = [], [], 0
            for _ in range(3):
                ts.append(run_full(lambda: target.run(dict(cfg), state), COMM))
                COMM.Barrier()
                t0 = time.perf_counter()
                with Execution(model, "selective") as ex:
                    target.run(dict(cfg), state)
                tsel.append(COMM.allreduce(time.perf_counter() - t0, op=MPI.MAX))
                calls = ex.result.executed + ex.result.skipped
            comp = [s.mean for k, s in model.kernels.items() if k[0] == "comp" and s.n and
                    k[2][:1] and True]
            comm = [s.mean for k, s in model.kernels.items() if k[0] == "comm" and s.n]
            state.free()
            f, s = statistics.median(ts), statistics.median(tsel)
            say(f"{block} {1e3 * f:.1f} {1e3 * s:.1f} {calls} {1e6 * s / max(calls, 1):.1f} "
                f"{1e6 * statistics.median(comp or [0]):.1f} / {1e6 * statistics.median(comm or [0]):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
