"""Kernel launches per LES step on the GPU path, counted on the CuPy stand-in (no GPU needed).

On the BOMEX grid (64 x 64 x 80) a GPU step is launch-bound: the kernels are short and CuPy spends
several microseconds of Python per launch. The stand-in (``tests/fakegpu``) counts every operation
that would be a kernel launch or a device copy on a GPU, so the launch count per step, by part of
the step and by kind of operation, can be driven down on any machine:

    PYTHONPATH=tests/fakegpu .venv/bin/python bench/gpu_launches.py --shape 16 16 20
    PYTHONPATH=tests/fakegpu .venv/bin/python bench/gpu_launches.py --no-fused   # array-API source only

The count does not depend on the grid size (only on the terms), so a small grid gives the BOMEX
grid's count quickly. One process.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[16, 16, 20])
    ap.add_argument("--scheme", default="2nd", choices=["2nd", "5th"])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--no-fused", action="store_true",
                    help="without the CUDA kernels of les.gpukernels / gpusubgrid (the array-API source)")
    ap.add_argument("--kinds", type=int, default=6, help="most frequent kinds of launch shown per part")
    ap.add_argument("--sites", type=int, default=0, help="also show the source lines making the most launches")
    args = ap.parse_args()
    try:
        from cupy import _core
        from cupy._core import launches
    except ImportError:
        sys.exit("gpu_launches.py: needs the CuPy stand-in: PYTHONPATH=tests/fakegpu")
    from hpcsuite.les import gpukernels, gpusubgrid
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team, Timers

    if args.no_fused:
        gpukernels.usable = gpusubgrid.usable = lambda *a, **k: False

    class CountingTimers(Timers):
        """Timers that also charge each part the launches made inside it (outermost part only)."""

        def __init__(self):
            super().__init__()
            self.per_part: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
            self._depth = 0

        @contextlib.contextmanager
        def __call__(self, name):
            self._depth += 1
            before = launches.copy() if self._depth == 1 else None
            try:
                yield
            finally:
                self._depth -= 1
                if before is not None:
                    self.per_part[name].update(launches - before)

    timers = CountingTimers()
    m = bomex_like(tuple(args.shape), Team.world(), device="gpu", scheme=args.scheme, timers=timers)
    m.step()                                               # compiles, plans, caches
    timers.per_part.clear()
    launches.clear()
    if args.sites:
        _core.launch_sites = collections.Counter()
    for _ in range(args.steps):
        m.step()
    total = sum(launches.values()) / args.steps
    parts = sorted(timers.per_part.items(), key=lambda kv: -sum(kv[1].values()))
    print(f"# launches per step, BOMEX-like {'x'.join(map(str, args.shape))}, {args.scheme} order, "
          f"{'array-API source only' if args.no_fused else 'with the CUDA kernels'}: {total:.0f}")
    for name, c in parts:
        n = sum(c.values()) / args.steps
        top = ", ".join(f"{k} {v / args.steps:.0f}" for k, v in c.most_common(args.kinds))
        print(f"  {name:12s} {n:6.0f}   {top}")
    outside = total - sum(sum(c.values()) for _, c in parts) / args.steps
    print(f"  {'(no part)':12s} {outside:6.0f}")
    if args.sites:
        print(f"# the {args.sites} source lines making the most launches (per step)")
        for site, n in _core.launch_sites.most_common(args.sites):
            print(f"  {n / args.steps:6.0f}  {site}")
    m.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
