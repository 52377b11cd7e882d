"""Where a selective run's time goes: one Cholesky configuration per block size, timed as a full run
(no interception), a selective run (the kernels steady after a few runs are skipped and charged)
and a skeleton run (no kernel executed at all: what remains is the factorization's own Python and
data movement between kernels, and the tuner's path messages). The selective/skeleton ratio says how
much of a selective run the executed kernels still take; full/skeleton bounds the speed-up of any
skipping.

    mpiexec -n 2 python bench/tune_selective_cost.py [--n 4096] [--blocks 32 64 128 256]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Table  # noqa: E402

from hpcsuite.runtime import Team  # noqa: E402
from hpcsuite.runtime.threads import fit_threads  # noqa: E402
from hpcsuite.tune import Model  # noqa: E402
from hpcsuite.tune.execution import Execution  # noqa: E402
from hpcsuite.tune.targets import TARGETS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--blocks", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--variant", default="ring", choices=["bcast", "ring"])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    team = Team.world()
    fit_threads(team)
    target = TARGETS["cholesky"](team, n=args.n)
    tab = Table(f"cost of a selective run, cholesky n = {args.n}, variant {args.variant}, median of {args.repeat}",
                ["block", "full ms", "selective ms", "skeleton ms", "kernels/run", "full/selective",
                 "skeleton share of selective"])
    for block in args.blocks:
        cfg = {"block": block, "grid": "auto", "variant": args.variant, "lookahead": 1}
        state = target.prepare(dict(cfg))
        model = Model(tolerance=0.05, confidence=0.95, min_samples=2)
        for _ in range(4):                               # the kernels become steady
            with Execution(model, "selective"):
                target.run(dict(cfg), state)
        out, kernels = {}, 0
        for mode in ("full", "selective", "skeleton"):
            ts = []
            for _ in range(args.repeat):
                team.barrier()
                t0 = time.perf_counter()
                if mode == "full":
                    target.run(dict(cfg), state)
                else:
                    with Execution(model, mode) as ex:
                        target.run(dict(cfg), state)
                    kernels = ex.result.executed + ex.result.skipped
                team.barrier()
                ts.append(time.perf_counter() - t0)
            out[mode] = statistics.median(ts)
        state.free()
        tab.add(block, 1e3 * out["full"], 1e3 * out["selective"], 1e3 * out["skeleton"], kernels,
                out["full"] / out["selective"], out["skeleton"] / out["selective"])
    tab.show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
