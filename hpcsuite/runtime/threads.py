"""Keeping threaded libraries from oversubscribing a node's cores.

OpenBLAS (behind NumPy/SciPy) and numba start one thread per core in every process. With several
MPI ranks per node that multiplies: 2 ranks x 2 BLAS threads on 2 cores made a 1000 x 1000
Cholesky 100x slower here, because busy-waiting threads fight for the cores. :func:`fit_threads`
gives every rank ``cores // ranks_on_node`` threads (at least 1) through threadpoolctl (BLAS/OpenMP)
and numba, unless the user set ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS`` or
``HPCSUITE_THREADS`` explicitly.
"""
from __future__ import annotations

import os

__all__ = ["fit_threads", "threads_per_rank"]

_limiter = None


def threads_per_rank(team) -> int:
    """Cores (or the CPUs SLURM gave each task) divided among the ranks on this node. Collective
    once per team (node split)."""
    explicit = os.environ.get("HPCSUITE_THREADS")
    if explicit and explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    cpt = os.environ.get("SLURM_CPUS_PER_TASK")
    if cpt and cpt.isdigit():
        return max(1, int(cpt))
    on_node = team.node_team().size          # split once per team, kept with it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // on_node)


def fit_threads(team) -> int:
    """Limit BLAS/OpenMP and numba threads to :func:`threads_per_rank`; returns the number.
    Collective. Respects thread counts the user set in the environment."""
    global _limiter
    if any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")) \
            and not os.environ.get("HPCSUITE_THREADS"):
        return int(os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or 1)
    n = threads_per_rank(team)
    # threadpoolctl limits only the libraries loaded so far, and SciPy brings its own OpenBLAS,
    # loaded on first import: without this, 2 ranks ran SciPy's LAPACK with 2 threads each and a
    # 256 x 256 potrf took 160 ms instead of 0.3 ms
    import scipy.linalg  # noqa: F401
    import scipy.linalg.cython_lapack  # noqa: F401
    from threadpoolctl import threadpool_limits
    _limiter = threadpool_limits(limits=n)          # kept alive: the limit holds for the process
    try:
        import numba
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except Exception:      # noqa: BLE001 - numba missing or its threading layer unavailable
        pass
    return n
