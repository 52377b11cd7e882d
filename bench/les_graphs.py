"""The LES step on the GPU with its stages as CUDA graphs and without (``les.graphs``), same run.

Two BOMEX-like models from the same initial state, one stepping with graphs and one with a launch
per kernel, step in turns (``--repeats`` rounds of ``--steps`` steps each, the device synchronised
around each round); the table gives the median time per step of each and their ratio. Both have
then taken the same steps from the same state, so their fields must be the same bit for bit: the
last column says whether they are (the check of ``tests/les/test_graphs.py`` on the real device).

    python bench/les_graphs.py --shape 64 64 80                 # on a GPU machine
    python bench/les_graphs.py --shape 512 512 128 --steps 3
    PYTHONPATH=tests/fakegpu python bench/les_graphs.py --shape 16 16 16 --steps 2   # dry run, stand-in

One process (graphs apply at one rank).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[64, 64, 80], metavar=("NX", "NY", "NZ"))
    ap.add_argument("--schemes", nargs="+", default=["2nd", "5th"], choices=["2nd", "5th"])
    ap.add_argument("--steps", type=int, default=5, help="steps per round")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (each model once per round)")
    args = ap.parse_args()
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team
    team = Team.world()
    if team.size != 1:
        sys.exit("les_graphs.py: one process (CUDA graphs apply at one rank)")
    shape = tuple(args.shape)
    print(f"# LES step, BOMEX-like {'x'.join(map(str, shape))}, GPU, stages as CUDA graphs or not; "
          f"median of {args.repeats} rounds of {args.steps} steps, models in turns")
    print(f"{'scheme':6s} {'graphs s/step':>14s} {'launches s/step':>16s} {'speed-up':>9s}  identical  graphs")
    for scheme in args.schemes:
        models = {on: bomex_like(shape, team, device="gpu", scheme=scheme, graphs=on) for on in (True, False)}
        sync = models[True].store.arrays["u"].device.synchronize
        for m in models.values():            # warm-up (kernels, FFT plans), then the captures
            for _ in range(3):
                m.step()
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeats):
            for on in (False, True):
                m = models[on]
                sync()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    m.step()
                sync()
                times[on].append((time.perf_counter() - t0) / args.steps)
        same = all(np.array_equal(a.get(), models[False].ctx.fields[n].get())
                   for n, a in models[True].ctx.fields.items())
        same = same and models[True].t == models[False].t
        on, off = statistics.median(times[True]), statistics.median(times[False])
        print(f"{scheme:6s} {on:14.6f} {off:16.6f} {off / on:9.2f}  {'yes' if same else 'NO':9s}  "
              f"{models[True].graphs_reason}")
        for m in models.values():
            m.free()
        del models
    return 0


if __name__ == "__main__":
    sys.exit(main())
