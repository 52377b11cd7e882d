"""Example 10: tuning a plain mpi4py code with no change to its body.

Shows: ``summa`` (C = A B on a pr x pc process grid: panels of width ``panel`` broadcast along grid
rows and columns, a local ``np.dot`` every ``depth`` panels) uses only mpi4py and NumPy. Inside
``tune.intercept_world()`` its ``MPI.COMM_WORLD`` and the communicators split from it are seen by
the tuner, inside ``tune.blas()`` its ``np.dot`` calls are kernels keyed by their shapes, and an
``Autotuner`` searches panel, depth and grid in ``selective`` mode (a skipped ``np.dot`` returns
zeros of its shape: values are computed only in full runs). Checked: a plain run of the chosen
configuration equals A B (NumPy), and an intercepted profile run gives the same bits as a plain run.
Also the target of ``hpcsuite tune inputs/tune_plain_mpi4py.toml``, ``bench/tune_search.py --target summa``.

Launch:  mpiexec -n 2 python examples/10_tune_plain_mpi4py.py
"""
import numpy as np
from mpi4py import MPI


def blocks(n, grid, **_):
    """Row and column index ranges of this rank's blocks of the n x n matrices."""
    pr, pc = grid
    r, c = divmod(MPI.COMM_WORLD.Get_rank(), pc)
    return np.arange(r * n // pr, (r + 1) * n // pr), np.arange(c * n // pc, (c + 1) * n // pc)


def inputs(n, grid, **_):
    """This rank's blocks of A = cos(i + 2j) and B = sin(2i - j) (closed form, no messages)."""
    i, j = blocks(n, grid)
    return {"a": np.cos(i[:, None] + 2.0 * j), "b": np.sin(2.0 * i[:, None] - j)}


def summa(a, b, n, panel, grid, depth=1):
    """This rank's block of C = A B (SUMMA); a, b: its blocks of A and B."""
    comm, (pr, pc), width = MPI.COMM_WORLD, grid, panel * depth
    if pr * pc != comm.Get_size() or n % pr or n % pc or (n // pr) % panel or (n // pc) % panel or n % width:
        raise ValueError(f"panel {panel}, depth {depth}, grid {pr}x{pc} do not fit n = {n} on {comm.size} ranks")
    r, c = divmod(comm.Get_rank(), pc)
    row, col = comm.Split(r, c), comm.Split(c, r)
    mb, nb = n // pr, n // pc
    out, prod = np.zeros((mb, nb)), np.empty((mb, nb))
    at, bp = np.empty((width, mb)), np.empty((width, nb))     # depth panels (A's transposed)
    for k in range(0, n, panel):
        (owner_c, kc), (owner_r, kr), s = divmod(k, nb), divmod(k, mb), k % width
        if c == owner_c:
            at[s:s + panel] = a[:, kc:kc + panel].T
        if r == owner_r:
            bp[s:s + panel] = b[kr:kr + panel]
        row.Bcast(at[s:s + panel], root=owner_c)
        col.Bcast(bp[s:s + panel], root=owner_r)
        if s + panel == width:
            out += np.dot(at.T, bp, out=prod)
    row.Free()
    col.Free()
    return out


if __name__ == "__main__":
    from hpcsuite import tune
    world, n = MPI.COMM_WORLD, 512
    grids = [(p, world.size // p) for p in range(1, world.size + 1) if world.size % p == 0]

    def program(cfg, state):
        with tune.intercept_world(), tune.blas():       # the code itself is not changed
            return summa(n=n, **cfg, **state)

    tuner = tune.Autotuner(tune.Space({"panel": [32, 128], "depth": [1, 4], "grid": grids}), program, iterations=3,
                           prepare=lambda cfg: inputs(n, **cfg), tolerance=0.2, remeasure=1)
    res = tuner.tune()                                   # collective; the same on every rank
    best = res.best_config
    c = summa(n=n, **best, **inputs(n, **best))          # a plain run of the chosen configuration
    i, j = blocks(n, best["grid"])
    k = np.arange(n)
    ok = np.allclose(c, np.cos(i[:, None] + 2.0 * k) @ np.sin(2.0 * k[:, None] - j), rtol=0, atol=1e-9)
    with tune.Execution(tune.Model(), "profile"), tune.intercept_world(), tune.blas():
        same = np.array_equal(summa(n=n, **best, **inputs(n, **best)), c)
    names = {key[1] for key in tuner.model.kernels}
    ok = world.allreduce(ok and same and {"Bcast", "numpy.dot"} <= names, op=MPI.LAND)
    if world.rank == 0:
        print(res.table())
        print(f"best {best}, breakdown {res.best_breakdown}, kernels seen {sorted(names)}")
        print("VERIFIED" if ok and all(r.status == "ok" for r in res.results) else "FAILED")
