"""DistArray's NumPy interface vs NumPy on the local block and vs Heat, same data, ranks and threads.

    mpiexec -n 2 .venv-heat/bin/python bench/pgas_numpy.py      # with Heat (bench/setup_heat_env.sh)
    mpiexec -n 2 .venv/bin/python bench/pgas_numpy.py           # without Heat: the NumPy columns only
    .venv/bin/python bench/pgas_numpy.py --rows 2000 --cube 256 --repeat 9
    HPCSUITE_BENCH_ROWS=2000 ...                                 # --rows' default (columns = rows / 2)

Rows (an ``n x n/2`` float64 array ``x`` and ``y``, rows BLOCKED over the ranks; Heat: split=0):

* ``sqrt(x*2 + y) - 1``: an elementwise chain of same-pattern operands (no communication). Its
  NumPy reference is the same chain on this rank's block (the goal: within 1.1x of it).
* ``x.sum(axis=0)``, ``x.sum(axis=1)``, ``x.sum()``: reductions along each axis and over all.
* ``x.T @ y``: a transpose (a Heat split change / our local transpose) and a matrix product
  (here: local products and one reduce-scatter of their row blocks, as the inner dimension is
  split alike; Heat: its own matmul).
* ``x + z`` with ``z`` split along columns (BLOCKED columns; Heat: split=1): one operand is
  redistributed first (Heat raises for operands of different splits, so its side is
  ``hx + ht.resplit(hz, 0)``, what a Heat user writes).
* ``max(x*2+y)`` after ``np.abs``: chain + reduction.
* with ``--cube N``: ``np.sqrt(a*2 + b)`` on ``N^3`` float64 arrays (BLOCKED along dimension 0)
  against NumPy on the block: the per-operation overhead and memory behaviour at a large size.

Each sample is the slowest rank's time after a barrier; the variants are interleaved sample by
sample and the median of each is printed with the ratios. Torch (Heat) gets the same number of
threads as NumPy's BLAS here (``common.THREADS``), set before Heat runs.

Memory: the extra array-sized buffers a chain leaves at its peak, ours (windows made or kept in
the pool, from ``pgas.memory``) vs NumPy's (``tracemalloc`` peak over the block).

Kernel floors (printed last, with Heat's environment): the local kernels alone on one rank's
block while every rank runs them (NumPy's ``add.reduce``, BLAS ``gemv`` with ones, torch's
``sum``; NumPy's and torch's GEMM for ``x.T @ y``) at the same threads: a row cannot be faster
than its kernel, so they say how much of "1.5x faster than Heat" the hardware allows.
"""
import argparse
import os
import statistics
import time
import tracemalloc
import warnings

import numpy as np
from mpi4py import MPI

from common import COMM, THREADS, Table

from hpcsuite import pgas
from hpcsuite.pgas import memory

warnings.filterwarnings("ignore")
try:
    import torch
    torch.set_num_threads(THREADS)               # equal threads, before Heat runs anything
    import heat as ht
except Exception as exc:                         # noqa: BLE001 - no Heat environment
    ht, why = None, f"{type(exc).__name__}: {exc}"

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--rows", type=int, default=int(os.environ.get("HPCSUITE_BENCH_ROWS", "2000")),
                help="rows of x and y (columns: rows / 2); default $HPCSUITE_BENCH_ROWS or 2000")
ap.add_argument("--cube", type=int, default=0, metavar="N",
                help="also time np.sqrt(a*2 + b) on N^3 float64 arrays against NumPy (0: skip)")
ap.add_argument("--repeat", type=int, default=9, help="interleaved samples per variant (median)")
ap.add_argument("--chains-only", action="store_true",
                help="only the elementwise chains, with NumPy also on the window memory itself and "
                     "the number of new windows the timed chains made (no Heat, no memory table)")
args = ap.parse_args()

rank, size = COMM.Get_rank(), COMM.Get_size()
n = args.rows
shape = (n, n // 2)
rng = np.random.default_rng(1)
X = rng.standard_normal(shape)
Y = rng.standard_normal(shape)
R = pgas.BLOCKED
x = pgas.from_numpy(X, dist=(R, pgas.NONE), root=None)
y = pgas.from_numpy(Y, dist=(R, pgas.NONE), root=None)
z = pgas.from_numpy(Y, dist=(pgas.NONE, R), root=None)
xl, yl = x.local.copy(), y.local.copy()           # NumPy: the same block, plain memory
if ht is not None:
    hx = ht.array(X, split=0)
    hy = ht.array(Y, split=0)
    hz = ht.array(Y, split=1)


def sample(fn) -> float:
    COMM.Barrier()
    t0 = time.perf_counter()
    fn()
    return COMM.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def race(variants: dict, repeat: int = args.repeat) -> dict:
    """Median time of each variant, samples interleaved (variant by variant, round by round)."""
    for fn in variants.values():
        fn()                                     # warm-up (pools, plans, caches)
    times = {k: [] for k in variants}
    for _ in range(repeat):
        for k, fn in variants.items():
            times[k].append(sample(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def check(got, want, what):
    got = got.to_numpy() if isinstance(got, pgas.DistArray) else np.asarray(got)
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9), what


def heat_np(h):
    return h.numpy() if hasattr(h, "numpy") else np.asarray(h)


rows = [
    ("sqrt(x*2+y) - 1", lambda: np.sqrt(abs(x * 2 + y)) - 1, lambda: np.sqrt(abs(xl * 2 + yl)) - 1,
     (lambda: ht.sqrt(ht.abs(hx * 2 + hy)) - 1) if ht else None, np.sqrt(abs(X * 2 + Y)) - 1),
    ("x.sum(axis=0)", lambda: x.sum(axis=0), lambda: xl.sum(axis=0),
     (lambda: hx.sum(axis=0)) if ht else None, X.sum(axis=0)),
    ("x.sum(axis=1)", lambda: x.sum(axis=1), lambda: xl.sum(axis=1),
     (lambda: hx.sum(axis=1)) if ht else None, X.sum(axis=1)),
    ("x.sum()", lambda: x.sum(), lambda: xl.sum(), (lambda: hx.sum().item()) if ht else None, X.sum()),
    ("max(|x*2+y|)", lambda: abs(x * 2 + y).max(), lambda: abs(xl * 2 + yl).max(),
     (lambda: ht.abs(hx * 2 + hy).max().item()) if ht else None, abs(X * 2 + Y).max()),
    # Heat refuses operands of different splits (NotImplementedError "DNDarrays must have the same
    # split axes"): its user resplits one first, which is what is timed
    ("x + z (z column-split)", lambda: x + z, None, (lambda: hx + ht.resplit(hz, 0)) if ht else None, X + Y),
    ("x.T @ y", lambda: x.T @ y, None, (lambda: hx.T @ hy) if ht else None, X.T @ Y),
]

if args.cube:
    c3 = (args.cube,) * 3
    A3 = pgas.from_numpy(rng.standard_normal(c3), root=None)
    B3 = pgas.from_numpy(rng.standard_normal(c3), root=None)
    al3, bl3 = A3.local.copy(), B3.local.copy()
    rows.insert(0, (f"sqrt(|a*2+b|), {args.cube}^3", lambda: np.sqrt(abs(A3 * 2 + B3)),
                    lambda: np.sqrt(abs(al3 * 2 + bl3)), None, None))

if args.chains_only:
    made = [0]
    _init = memory.Segment.__init__

    def counted(self, *a, **k):
        made[0] += 1
        _init(self, *a, **k)
    memory.Segment.__init__ = counted
    xv, yv = x.local, y.local
    chains = [("sqrt(|x*2+y|) - 1", lambda: np.sqrt(abs(x * 2 + y)) - 1, lambda: np.sqrt(abs(xl * 2 + yl)) - 1,
               lambda: np.sqrt(abs(xv * 2 + yv)) - 1)]
    if args.cube:
        A3v, B3v = A3.local, B3.local
        chains.append((f"sqrt(|a*2+b|), {args.cube}^3", lambda: np.sqrt(abs(A3 * 2 + B3)),
                       lambda: np.sqrt(abs(al3 * 2 + bl3)), lambda: np.sqrt(abs(A3v * 2 + B3v))))
    ct = Table(f"Elementwise chains (median of {args.repeat}, interleaved), {size} rank(s)",
               ["chain", "ours ms", "NumPy ms", "ours/NumPy", "NumPy on the window / NumPy",
                "new windows while timed"])
    for name, ours, npy, win in chains:
        for f in (ours, npy, win):
            f()
        before = made[0]
        t = race({"ours": ours, "numpy": npy, "window": win})
        ct.add(name, t["ours"] * 1e3, t["numpy"] * 1e3, t["ours"] / t["numpy"], t["window"] / t["numpy"],
               made[0] - before)
    ct.show()
    memory.Segment.__init__ = _init
    for a in (x, y, z) + ((A3, B3) if args.cube else ()):
        a.free()
    raise SystemExit(0)

tab = Table(f"DistArray NumPy interface, {shape[0]} x {shape[1]} float64, {THREADS} thread(s)/rank "
            f"(median of {args.repeat}, interleaved)",
            ["operation", "ours ms", "NumPy block ms", "ours/NumPy", "Heat ms", "Heat/ours"])
for name, ours, local, heat, want in rows:
    if want is not None:
        check(ours(), want, name)
    if heat is not None and name not in ("x.T @ y",):
        h = heat()
        if hasattr(h, "split") and h.split is not None:
            h = h.resplit_(None) if hasattr(h, "resplit_") else h
        np.testing.assert_allclose(heat_np(h) if not np.isscalar(h) else h, want, rtol=1e-9, atol=1e-9)
    variants = {"ours": ours}
    if local is not None:
        variants["numpy"] = local
    if heat is not None:
        variants["heat"] = heat
    t = race(variants)
    tab.add(name, t["ours"] * 1e3, t["numpy"] * 1e3 if local else "-",
            t["ours"] / t["numpy"] if local else "-", t["heat"] * 1e3 if heat else "-",
            t["heat"] / t["ours"] if heat else "-")
tab.show()
if rank == 0 and ht is None:
    print(f"(Heat not importable here: {why}; NumPy columns only)")


# ---------------------------------------------------------------------- memory of a chain
block = xl.nbytes


def ours_extra(chain) -> int:
    """Array-sized windows a chain leaves live (its dropped temporaries stay queued until the
    next collective point) or pooled, besides its result. Collective."""
    pgas.collect()
    memory.drain_pool()
    live0 = pgas.live_segments()
    r = chain()
    extra = pgas.live_segments() - live0 - 1 + memory.pooled_segments()
    del r
    pgas.collect()
    return extra


def numpy_extra(chain) -> float:
    tracemalloc.start()
    r = chain()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del r
    return round(peak / block - 1, 2)


mem = Table("Memory of a chain: array-sized buffers besides the result, at the peak",
            ["chain", "ours (windows live or pooled)", "NumPy (tracemalloc peak / block - 1)"])
mem.add("((x*2 + y)*3 - x)/2", ours_extra(lambda: ((x * 2 + y) * 3 - x) / 2),
        numpy_extra(lambda: ((xl * 2 + yl) * 3 - xl) / 2))
mem.add("np.sqrt(x*2 + y)", ours_extra(lambda: np.sqrt(x * 2 + y)), numpy_extra(lambda: np.sqrt(xl * 2 + yl)))
mem.show()
for a in (x, y, z):
    a.free()
if args.cube:
    A3.free()
    B3.free()


# ---------------------------------------------------------------------- kernel floors
if ht is not None:
    tx, ty = torch.from_numpy(xl), torch.from_numpy(yl)
    o1, o0 = np.ones(xl.shape[1]), np.ones(xl.shape[0])
    floors = [
        ("sum along the rows (axis=1)", {"numpy add.reduce": lambda: xl.sum(axis=1), "BLAS gemv": lambda: xl @ o1,
                                          "torch": lambda: tx.sum(1)}),
        ("sum down the columns (axis=0)", {"numpy add.reduce": lambda: xl.sum(axis=0), "BLAS gemv": lambda: o0 @ xl,
                                            "torch": lambda: tx.sum(0)}),
        ("sum of all", {"numpy add.reduce": lambda: xl.sum(), "BLAS gemv": lambda: o0 @ (xl @ o1),
                        "torch": lambda: tx.sum()}),
        ("local product xl.T @ yl", {"numpy add.reduce": None, "BLAS gemv": lambda: xl.T @ yl,
                                     "torch": lambda: tx.T @ ty}),
    ]
    kt = Table(f"Kernel floors on one rank's {xl.shape[0]} x {xl.shape[1]} block, every rank at once, "
               f"{THREADS} thread(s) (median of {args.repeat}, interleaved; the product row: NumPy's BLAS "
               f"GEMM in the gemv column)", ["kernel", "numpy ms", "BLAS ms", "torch ms", "torch / best of ours"])
    for name, fs in floors:
        t = race({k: f for k, f in fs.items() if f is not None})
        ours_best = min(t.get("numpy add.reduce", float("inf")), t["BLAS gemv"])
        kt.add(name, t["numpy add.reduce"] * 1e3 if "numpy add.reduce" in t else "-", t["BLAS gemv"] * 1e3,
               t["torch"] * 1e3, t["torch"] / ours_best)
    kt.show()
