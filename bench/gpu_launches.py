"""Kernel launches per LES step on the GPU path, counted on the CuPy stand-in (no GPU needed).

On the BOMEX grid (64 x 64 x 80) a GPU step is launch-bound: the kernels are short and CuPy spends
several microseconds of Python per launch. The stand-in (``tests/fakegpu``) counts every operation
that would be a kernel launch or a device copy on a GPU, so the launch count per step, by part of
the step and by kind of operation, can be driven down on any machine:

    PYTHONPATH=tests/fakegpu .venv/bin/python bench/gpu_launches.py --shape 16 16 20
    PYTHONPATH=tests/fakegpu .venv/bin/python bench/gpu_launches.py --no-fused   # array-API source only
    PYTHONPATH=tests/fakegpu .venv/bin/python bench/gpu_launches.py --host-cost  # host time per step
    PYTHONPATH=tests/fakegpu .venv/bin/python bench/gpu_launches.py --graphs on  # the step as a CUDA graph

With ``--graphs on`` the three stages run as one CUDA graph (``les.graphs``): a graph launch counts
as one, and what the graph holds (its kernel and copy nodes, captured once) is listed after it.

``--host-cost`` replaces every CUDA kernel by a no-op and times what is left of a step: the Python
that decides, prepares and launches the kernels (on a GPU it runs while earlier kernels execute),
plus the stand-in's own bookkeeping and NumPy's work for the operations that are not raw kernels. A
profile splits it into those parts; the suite's own share is an estimate (the profiler slows
call-heavy code more than the rest) of the host time a step would cost beside CuPy's own launch
overhead.

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
    ap.add_argument("--graphs", default="off", choices=["off", "on"],
                    help="the stages as one CUDA graph (les.graphs; the stand-in's capture)")
    ap.add_argument("--host-cost", action="store_true",
                    help="time a step with every CUDA kernel a no-op, and split the time by profile")
    args = ap.parse_args()
    if args.host_cost:
        return host_cost(args)
    try:
        from cupy import _core
        from cupy._core import launches
    except ImportError:
        sys.exit("gpu_launches.py: needs the CuPy stand-in: PYTHONPATH=tests/fakegpu")
    from hpcsuite.les import ops
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team, Timers

    if args.no_fused:
        ops.select("reference")

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
    m = bomex_like(tuple(args.shape), Team.world(), device="gpu", scheme=args.scheme, timers=timers,
                   graphs=args.graphs == "on")
    m.step()                                               # compiles, plans, caches
    if m.graph is not None:
        m.step()                                           # captures the graph (once)
    timers.per_part.clear()
    launches.clear()
    if args.sites:
        _core.launch_sites = collections.Counter()
    for _ in range(args.steps):
        m.step()
    total = sum(launches.values()) / args.steps
    parts = sorted(timers.per_part.items(), key=lambda kv: -sum(kv[1].values()))
    print(f"# launches per step, BOMEX-like {'x'.join(map(str, args.shape))}, {args.scheme} order, "
          f"{'array-API source only' if args.no_fused else 'with the CUDA kernels'}, "
          f"{'stages as one CUDA graph' if m.graph is not None else 'no graph'} ({m.graphs_reason}): {total:.0f}")
    for name, c in parts:
        n = sum(c.values()) / args.steps
        top = ", ".join(f"{k} {v / args.steps:.0f}" for k, v in c.most_common(args.kinds))
        print(f"  {name:12s} {n:6.0f}   {top}")
    outside = total - sum(sum(c.values()) for _, c in parts) / args.steps
    print(f"  {'(no part)':12s} {outside:6.0f}")
    if m.graph is not None and m.graph.graph is not None:
        nodes = m.graph.graph.nodes
        top = ", ".join(f"{k} {v}" for k, v in nodes.most_common(args.kinds))
        print(f"# in the graph (captured {m.graph.captures}x): {sum(nodes.values())} nodes, {top}; "
              f"{len(m.graph.graph.allocations)} allocations during the capture "
              f"({sum(m.graph.graph.allocations) / 1e6:.2f} MB, the graph's own pool)")
    if args.sites:
        print(f"# the {args.sites} source lines making the most launches (per step)")
        for site, n in _core.launch_sites.most_common(args.sites):
            print(f"  {n / args.steps:6.0f}  {site}")
    m.free()
    return 0


def host_cost(args) -> int:
    """``--host-cost``: the host time of a step whose CUDA kernels do nothing, split by a profile."""
    import cProfile
    import pstats
    import statistics
    import time

    from cupy import _kernels
    from hpcsuite.les import timestep
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team

    compiled = _kernels.RawModule.get_function

    def no_op_function(self, name):
        compiled(self, name)                         # (compiled as before: a missing kernel still fails)

        def launch(grid, block, kargs, **kw):
            _kernels._launched(f"raw:{name}")
            for a in kargs:                          # the stand-in's unwrapping of the arguments, kept
                _kernels.unwrap(a)
        return launch

    _kernels.RawModule.get_function = no_op_function
    rates = timestep.TimeStepper.rates

    def steady_rates(self, *a, **k):                 # fields stay as they were: no blow-up, same dt
        rates(self, *a, **k)
        return 1.0, 0.0, False

    timestep.TimeStepper.rates = steady_rates
    m = bomex_like(tuple(args.shape), Team.world(), device="gpu", scheme=args.scheme)
    for _ in range(3):
        m.step()
    n = max(args.steps, 10)
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            m.step()
        batches.append((time.perf_counter() - t0) / n)
    wall = statistics.median(batches)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        m.step()
    prof.disable()
    parts: dict[str, float] = {}
    for (fn, _line, _name), (_cc, _nc, tt, _ct, _callers) in pstats.Stats(prof).stats.items():
        part = ("stand-in" if "fakegpu" in fn or "cuda_emulation" in fn else
                "hpcsuite" if "/hpcsuite/" in fn else
                "numpy" if "numpy" in fn else "builtins and other")
        parts[part] = parts.get(part, 0.0) + tt
    total = sum(parts.values())
    print(f"# host time per step with no-op CUDA kernels, BOMEX-like {'x'.join(map(str, args.shape))}, "
          f"{args.scheme} order: {1e3 * wall:.2f} ms (median of 5 x {n} steps)")
    for part, tt in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {part:20s} {100 * tt / total:5.1f} %   ~{1e3 * wall * tt / total:.2f} ms")
    m.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
