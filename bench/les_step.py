"""LES time step on the CPU: cell updates per second (per core) for the 2nd- and 5th-order advection
schemes, and the share of each part of a step (advection, subgrid, pressure, halos, ...).

The case is BOMEX-like (every physics term: surface, moist thermodynamics, TKE closure, Coriolis,
subsidence, radiation) on the reference 64 x 64 x 80 grid by default. Each number is the median of
several steps (each step's time the slowest rank's, started together after a barrier); the part
times are the slowest rank's totals over those steps. Strong scaling: run at 1 and 2 ranks and
compare the "per step" column (the machine has 2 cores; 4 ranks are oversubscribed).

``--no-fused`` runs the operators' array-API reference (``les.ops.select("reference")``): NumPy,
one thread per rank. A ratio between the two compares equal threads only when the kernels run on
one thread per rank as well: ``HPCSUITE_THREADS=1`` (the table's title says the threads per rank).

    HPCSUITE_THREADS=1 mpiexec -n 1 python bench/les_step.py [--no-fused]     # equal threads
    mpiexec -n 1 python bench/les_step.py
    mpiexec -n 2 python bench/les_step.py
    mpiexec -n 2 python bench/les_step.py --shape 128 128 80 --steps 5
    python bench/les_step.py --device gpu --shape 512 512 128      # on a GPU machine
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import COMM, THREADS, Table  # noqa: E402

from hpcsuite.les import ops  # noqa: E402
from hpcsuite.les.model import bomex_like, time_steps  # noqa: E402
from hpcsuite.runtime.malloc import keep_freed_memory  # noqa: E402
from hpcsuite.runtime import Team, Timers  # noqa: E402

SHOWN = ("advection", "subgrid", "pressure", "halos", "thermo", "other")


def measure(shape, scheme: str, steps: int, device: str):
    team = Team.world()
    timers = Timers()
    m = bomex_like(shape, team, device=device, scheme=scheme, timers=timers)
    if device == "gpu":
        timers._sync = m.store.arrays["u"].device.synchronize
    m.step()                          # a second warm-up step: first-touch of every buffer

    def clear():
        timers.total.clear()
        timers.calls.clear()
    samples = time_steps(m, team, steps, after_warmup=clear)
    summary = timers.summary(team)
    m.free()
    per_step = statistics.median(samples)
    parts = {k: v["max"] for k, v in summary.items()}
    total = sum(parts.values())
    grouped = {k: parts.get(k, 0.0) for k in SHOWN[:-1]}
    grouped["other"] = total - sum(grouped.values())
    return per_step, {k: v / total for k, v in grouped.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[64, 64, 80], metavar=("NX", "NY", "NZ"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--schemes", nargs="+", default=["2nd", "5th"], choices=["2nd", "5th"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--malloc-default", action="store_true",
                    help="keep glibc's malloc thresholds (the app raises them: runtime.malloc)")
    ap.add_argument("--no-fused", action="store_true",
                    help="run the operators' array-API reference (les.ops.select('reference'): not the "
                    "numba kernels on the CPU, nor the CUDA kernels on the GPU)")
    args = ap.parse_args()
    if not args.malloc_default:
        keep_freed_memory()            # as `hpcsuite run` does
    if args.no_fused:
        ops.select("reference")
    shape = tuple(args.shape)
    cells = shape[0] * shape[1] * shape[2]
    size = COMM.Get_size()
    how = ("glibc malloc defaults" if args.malloc_default else "malloc thresholds raised") + \
        (", array-API source" if args.no_fused else ", CUDA kernels" if args.device == "gpu"
         else ", fused kernels")
    tab = Table(f"LES step, BOMEX-like {'x'.join(map(str, shape))}, {args.device}, median of {args.steps} "
                f"(threads per rank {THREADS}; {how})",
                ["scheme", "s/step", "Mcell/s", "Mcell/s/rank"] + [f"%{k}" for k in SHOWN])
    for scheme in args.schemes:
        per_step, shares = measure(shape, scheme, args.steps, args.device)
        rate = cells / per_step / 1e6
        tab.add(scheme, per_step, rate, rate / size, *(round(100 * shares[k], 1) for k in SHOWN))
    tab.show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
