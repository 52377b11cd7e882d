"""PGAS one-sided get/put on GPU arrays against raw CuPy device-to-device copies of the same bytes
(issue 26: the goal is >= 0.8x), through each path of :mod:`hpcsuite.pgas.device_rma`.

    mpiexec -n 2 python bench/gpu_pgas.py                 # sizes 1, 16, 128 MiB per rank
    mpiexec -n 2 python bench/gpu_pgas.py --quick         # small sizes (a dry run)
    PYTHONPATH=tests/fakegpu HPCSUITE_GPU_AWARE_MPI=1 mpiexec -n 2 python bench/gpu_pgas.py --quick
                                                          # the dry run on the CuPy stand-in, every path

Each rank reads (get) and writes (put) the whole block of the next rank (a contiguous selection)
and every other element of it (a strided selection), through a :class:`DeviceWindow` of each path
that this machine offers: ``ipc`` (ranks on one node), ``mpi`` (a CUDA-aware MPI), ``host`` (staging,
always). The reference is a raw CuPy copy of the same bytes on this rank's device: ``dst[...] = src``
of two device arrays of the block's size (for the strided rows, ``dst[...] = src[::2]``). Each
repetition times the reference and the PGAS call back to back (interleaved, the device synchronised
before each clock stops), and the ratio is the median over repetitions of reference time / PGAS
time (1.0 = as fast as a local device copy). Rank 0 prints; ``--json`` appends one line per row.
On the stand-in the numbers say nothing about a GPU (NumPy behind CuPy's API): it is a dry run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def _timed(fn, sync) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def measure(w, a, team, xp, sync, strided: bool, repeat: int) -> dict:
    """Interleaved medians: raw copy, PGAS get, PGAS put of the next rank's block."""
    nxt = (team.rank + 1) % team.size
    n = a.local.shape[0]
    sel = slice(nxt * n, (nxt + 1) * n, 2 if strided else 1)
    m = len(range(*sel.indices(a.shape[0])))
    src = xp.arange(n, dtype=a.dtype)
    dst = xp.empty(m, dtype=a.dtype)
    out = xp.empty(m, dtype=a.dtype)
    val = xp.ones(m, dtype=a.dtype)
    raw = (lambda: dst.__setitem__(Ellipsis, src[::2])) if strided else (lambda: dst.__setitem__(Ellipsis, src))
    get = lambda: w.get(sel, out=out)                     # noqa: E731
    put = lambda: w.put(sel, val)                         # noqa: E731
    for f in (raw, get, put):                             # warm-up (plans, first touch)
        f()
    team.barrier()
    rows = {"raw": [], "get": [], "put": []}
    for _ in range(repeat):
        rows["raw"].append(_timed(raw, sync))
        rows["get"].append(_timed(get, sync))
        rows["raw"].append(_timed(raw, sync))
        rows["put"].append(_timed(put, sync))
    w.fence()
    med = {k: statistics.median(v) for k, v in rows.items()}
    nbytes = m * a.dtype.itemsize
    return {"bytes": nbytes, "raw_s": med["raw"], "get_s": med["get"], "put_s": med["put"],
            "get_ratio": med["raw"] / med["get"], "put_ratio": med["raw"] / med["put"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a dry run)")
    ap.add_argument("--mib", type=float, nargs="*", help="block sizes per rank in MiB")
    ap.add_argument("--repeat", type=int, default=0, help="repetitions (default 15, 3 with --quick)")
    ap.add_argument("--paths", nargs="*", default=None, help="paths to try (default: every one offered)")
    ap.add_argument("--json", help="append one JSON line per row here (rank 0)")
    args = ap.parse_args()
    from hpcsuite import pgas
    from hpcsuite.pgas.device_rma import DeviceWindow
    from hpcsuite.runtime import Team, gpu_aware_mpi, gpu_status
    team = Team.world()
    ok, why = gpu_status()
    if not ok:
        if team.rank == 0:
            print(f"# no GPU ({why}): nothing to measure", flush=True)
        return 0
    sizes = args.mib or ([0.0625, 1.0] if args.quick else [1.0, 16.0, 128.0])
    repeat = args.repeat or (3 if args.quick else 15)
    paths = args.paths or (["ipc"] + (["mpi"] if gpu_aware_mpi() else []) + ["host"])
    if team.rank == 0:
        print(f"# ranks {team.size}; CUDA-aware MPI: {gpu_aware_mpi()}; paths {paths}; "
              f"median of {repeat} interleaved repetitions; ratio = raw device copy time / PGAS time",
              flush=True)
        print(f"{'path':6s} {'selection':10s} {'MiB':>8s} {'raw GB/s':>9s} {'get GB/s':>9s} "
              f"{'put GB/s':>9s} {'get/raw':>8s} {'put/raw':>8s}", flush=True)
    for mib in sizes:
        n = max(2, int(mib * 2**20) // 8)
        a = pgas.zeros(n * team.size, device="gpu")
        dev = a.device
        for path in paths:
            try:
                w = DeviceWindow(a, path=path)
            except (ValueError, RuntimeError) as exc:
                if team.rank == 0:
                    print(f"{path:6s} not available: {exc}", flush=True)
                continue
            for strided in (False, True):
                r = measure(w, a, team, dev.xp, dev.synchronize, strided, repeat)
                # the slowest rank's ratios (every rank measures its own neighbour)
                worst = team.comm.allreduce((min(r["get_ratio"], r["put_ratio"]), team.rank),
                                            op=_min_pair())
                r = team.comm.bcast(r, root=worst[1])
                if team.rank == 0:
                    gbs = lambda t: r["bytes"] / t / 1e9     # noqa: E731
                    label = "every 2nd" if strided else "contiguous"
                    print(f"{w.path:6s} {label:10s} {r['bytes'] / 2**20:8.3f} {gbs(r['raw_s']):9.3f} "
                          f"{gbs(r['get_s']):9.3f} {gbs(r['put_s']):9.3f} {r['get_ratio']:8.2f} "
                          f"{r['put_ratio']:8.2f}", flush=True)
                    if args.json:
                        with open(args.json, "a") as f:
                            f.write(json.dumps({"bench": "pgas_device", "path": w.path, "selection": label,
                                                "ranks": team.size, **r}) + "\n")
            w.free()
        a.free()
    return 0


def _min_pair():
    from mpi4py import MPI
    return MPI.MINLOC


if __name__ == "__main__":
    sys.exit(main())
