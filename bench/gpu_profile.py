"""Where the GPU time of an LES step or a stencil-solver run goes, function by function.

CuPy launches kernels asynchronously, so a Python profile of a GPU run charges the time to whatever
waits next. With ``CUPY_LAUNCH_BLOCKING=1`` (set here before CuPy is imported) every launch waits for
its kernel, and cProfile's cumulative times become GPU times per function (plus launch overhead,
which is what a small grid is made of). Also prints the step's timers (asynchronous run) by part.

    python bench/gpu_profile.py les --shape 512 512 128 --scheme 2nd
    python bench/gpu_profile.py stencil --n 256
    python bench/gpu_profile.py reductions --shape 512 512 128     # the time-step reductions
    python bench/gpu_profile.py launches --timers-only             # host cost of one launch, by kind
    PYTHONPATH=tests/fakegpu python bench/gpu_profile.py les --shape 32 32 16   # the stand-in

One process; prints the top functions of the hpcsuite package by cumulative time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys


def les(args) -> None:
    from hpcsuite.les.model import bomex_like, time_steps
    from hpcsuite.runtime import Team, Timers
    team = Team.world()
    timers = Timers()
    m = bomex_like(tuple(args.shape), team, device="gpu", scheme=args.scheme, timers=timers)
    timers._sync = m.store.arrays["u"].device.synchronize
    m.step()
    if args.blocking:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            m.step()
        m.store.arrays["u"].device.synchronize()
        prof.disable()
        show(prof, args.steps, args.top)
    else:
        timers.total.clear()
        timers.calls.clear()
        t = time_steps(m, team, args.steps)
        print(f"# seconds per step (median of {args.steps}): {sorted(t)[len(t) // 2]:.4f}; by timer:")
        for name, v in sorted(timers.summary(team).items(), key=lambda kv: -kv[1]["max"]):
            print(f"  {name:22s} {v['max'] / (args.steps + 1):.4f} s/step")
    m.free()


def reductions(args) -> None:
    """Milliseconds of the reductions of the LES time-step choice, on a 3-D interior view."""
    import time

    import cupy as xp
    nx, ny, nz = args.shape
    full = xp.random.random((nx + 6, ny + 6, nz + 1))
    view = full[3:-3, 3:-3, :nz]
    cont = xp.ascontiguousarray(view)

    def ms(fn, rep=10):
        fn()
        xp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(rep):
            fn()
        xp.cuda.Device().synchronize()
        return 1e3 * (time.perf_counter() - t0) / rep
    cases = {
        "max(view)": lambda: xp.max(view), "max(max(view, -1))": lambda: xp.max(xp.max(view, axis=-1)),
        "sum(view)": lambda: xp.sum(view), "sum(sum(view, -1))": lambda: xp.sum(xp.sum(view, axis=-1)),
        "max(contiguous)": lambda: xp.max(cont), "sum(contiguous)": lambda: xp.sum(cont),
        "abs(view)": lambda: xp.abs(view), "view / 2 + view": lambda: view / 2.0 + view,
        "max(view, -1)": lambda: xp.max(view, axis=-1),
        # the horizontal means (thermo's reference profile, statistics): one value per level
        "sum(view, (0, 1))  (thermo before)": lambda: xp.sum(view, axis=(0, 1)),
        "sum(sum(view, 0), 0)": lambda: xp.sum(xp.sum(view, axis=0), axis=0),
        "sum(sum(view, 1), 0)  (thermo now)": lambda: xp.sum(xp.sum(view, axis=1), axis=0),
        "ones @ contiguous (gemv)": lambda: xp.ones(nx * ny) @ cont.reshape(nx * ny, nz),
    }
    print(f"# reductions on a {nx}x{ny}x{nz} interior view of a halo block (ms, mean of 10)")
    for name, fn in cases.items():
        print(f"  {name:36s} {ms(fn):8.3f}")
    from hpcsuite.les.model import bomex_like
    from hpcsuite.runtime import Team
    m = bomex_like((nx, ny, nz), Team.world(), device="gpu")
    m.step()
    ctx = m.ctx
    from hpcsuite.les.timestep import local_rates
    print(f"  {'local_rates(ctx)':22s} {ms(lambda: local_rates(ctx)):8.3f}")
    print(f"  {'rates (with floats)':22s} {ms(lambda: m.stepper.rates(ctx, 1.0)):8.3f}")
    print(f"  {'k_max()':22s} {ms(lambda: m.k_max()):8.3f}")
    m.free()


def launches(args) -> None:
    """Host microseconds per kernel launch, by kind: what a launch-bound step (the LES on the
    64 x 64 x 80 BOMEX grid: ``bench/gpu_launches.py`` counts its launches) is made of. Each kind
    is launched ``--n`` times back to back, then the device is synchronised: on a GPU that keeps
    up, the time per call is the host's cost of one launch."""
    import time

    import cupy as xp

    from hpcsuite.les import gpukernels
    nx, ny, nz = args.shape
    h = 3
    a = xp.random.random((nx + 2 * h, ny + 2 * h, nz))
    b, t = xp.random.random(a.shape), xp.random.random(a.shape)
    view = a[h:-h, h:-h, :]
    I, J = slice(h, h + nx), slice(h, h + ny)
    one = xp.zeros((1, 1, 1))
    cell = (slice(0, 1), slice(0, 1))
    cases = {
        "raw kernel, 1 thread (rk_update on 1 cell)": lambda: gpukernels.rk_update(one, one, 0.5, one, cell),
        "raw kernel, whole block (rk_update)": lambda: gpukernels.rk_update(a, b, 0.5, t, (I, J)),
        "ufunc on an interior view (view * 2.0)": lambda: view * 2.0,
        "ufunc in place (a += b)": lambda: a.__iadd__(b),
        "copy into a slice (a[I, J] = b[I, J])": lambda: a.__setitem__((I, J), b[I, J]),
        "reduction (sum over the last axis)": lambda: xp.sum(view, axis=-1),
        "rfft along x": lambda: xp.fft.rfft(view, axis=0),
    }
    sync = xp.cuda.Device().synchronize
    print(f"# host microseconds per launch, {args.n} back to back, on a {nx}x{ny}x{nz} block with halo {h}")
    for name, fn in cases.items():
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.n):
            fn()
        sync()
        print(f"  {name:44s} {1e6 * (time.perf_counter() - t0) / args.n:9.1f}")


def stencil(args) -> None:
    import numpy as np

    from hpcsuite import pgas
    from hpcsuite.runtime import Team
    from hpcsuite.solvers import StencilSolver, heat_coeffs
    n, team = args.n, Team.world()
    s = StencilSolver((n, n, n), "7", heat_coeffs(1.0, 1e-6, (1 / n,) * 3), team=team, depth=1,
                      backend="gpu")
    u0 = pgas.zeros((n, n, n), team=team)
    u0.local[...] = np.random.default_rng(1).random(u0.local.shape)
    s.run(u0, args.steps)
    prof = cProfile.Profile()
    prof.enable()
    s.run(u0, args.steps)
    prof.disable()
    show(prof, 1, args.top)


def show(prof, per: int, top: int) -> None:
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("cumulative").print_stats("hpcsuite", top)
    print(f"# cProfile, CUPY_LAUNCH_BLOCKING={os.environ.get('CUPY_LAUNCH_BLOCKING')}, "
          f"totals over {per} repetition(s)")
    print("   ncalls" + out.getvalue().split("ncalls", 1)[-1][:12000])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("les", help="BOMEX-like LES steps")
    a.add_argument("--shape", type=int, nargs=3, default=[512, 512, 128])
    a.add_argument("--scheme", default="2nd", choices=["2nd", "5th"])
    a.add_argument("--steps", type=int, default=2)
    r = sub.add_parser("reductions", help="the reductions of the LES time-step choice")
    r.add_argument("--shape", type=int, nargs=3, default=[512, 512, 128])
    r.add_argument("--top", type=int, default=0)
    r.add_argument("--timers-only", dest="blocking", action="store_false")
    n = sub.add_parser("launches", help="host cost of one kernel launch, by kind")
    n.add_argument("--shape", type=int, nargs=3, default=[64, 64, 80])
    n.add_argument("--n", type=int, default=500, help="launches per kind")
    n.add_argument("--timers-only", dest="blocking", action="store_false")
    b = sub.add_parser("stencil", help="the deep-halo stencil solver (7-point heat)")
    b.add_argument("--n", type=int, default=256)
    b.add_argument("--steps", type=int, default=20)
    for p in (a, b):
        p.add_argument("--top", type=int, default=40, help="functions shown")
        p.add_argument("--timers-only", dest="blocking", action="store_false",
                       help="(les) only the asynchronous run's timers, no blocking profile")
    args = ap.parse_args()
    {"les": les, "stencil": stencil, "reductions": reductions, "launches": launches}[args.what](args)
    return 0


if __name__ == "__main__":
    if "--timers-only" not in sys.argv:
        os.environ.setdefault("CUPY_LAUNCH_BLOCKING", "1")    # before CuPy is imported
    sys.exit(main())
