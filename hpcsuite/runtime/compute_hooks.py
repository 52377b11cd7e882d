"""The one place where computation kernels can be observed (the counterpart of ``comm_hooks``).

Numerical code (``hpcsuite.linalg``, the solvers, user code via :func:`kernel`) runs its
BLAS/LAPACK-level operations through :func:`compute`. With no interceptor installed that is a plain
call. ``hpcsuite.tune`` installs an interceptor to time, count or skip kernels; nothing below it
imports ``tune``.

A kernel is identified by its routine name and a key of integers (matrix dimensions, flags), as in
the reference autotuner: the same key means the same expected cost. ``reset`` is an optional
callable that makes the kernel's inputs well-conditioned; an interceptor that skipped earlier
kernels (leaving stale buffers) calls it before running this one, so a factorisation never fails on
garbage data.

Examples
--------
>>> import numpy as np
>>> a = np.eye(3)
>>> compute("potrf", (3,), np.linalg.cholesky, a).shape
(3, 3)
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

__all__ = ["compute", "kernel", "intercept_compute", "current_compute_interceptor"]

_interceptor: Callable | None = None


def compute(name: str, key: tuple, fn: Callable, *args, flops: float = 0.0,
            reset: Callable[[], None] | None = None, **kwargs) -> Any:
    """Run the computation kernel ``fn(*args, **kwargs)`` named ``name`` with cost key ``key``.
    Local (the kernel runs on this rank; an interceptor may time or skip it)."""
    if _interceptor is None:
        return fn(*args, **kwargs)
    return _interceptor(name, tuple(key), flops, reset, fn, args, kwargs)


def current_compute_interceptor() -> Callable | None:
    return _interceptor


@contextlib.contextmanager
def intercept_compute(interceptor: Callable):
    """Install ``interceptor(name, key, flops, reset, fn, args, kwargs)`` for a ``with`` block.
    Local."""
    global _interceptor
    previous, _interceptor = _interceptor, interceptor
    try:
        yield interceptor
    finally:
        _interceptor = previous


def kernel(name: str, key: Callable[..., tuple] | None = None):
    """Decorator registering a user function as a computation kernel. Local.

    ``key(*args, **kwargs)`` gives the cost key (default: the shapes of array arguments and the
    values of integer arguments), e.g. ``@kernel("smooth", key=lambda u, n: (u.shape[0], n))``.
    """
    def default_key(*args, **kwargs):
        out = []
        for a in list(args) + list(kwargs.values()):
            if hasattr(a, "shape"):
                out.extend(int(s) for s in a.shape)
            elif isinstance(a, int) and not isinstance(a, bool):
                out.append(a)
        return tuple(out)

    keyfn = key or default_key

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if _interceptor is None:
                return fn(*args, **kwargs)
            return compute(name, keyfn(*args, **kwargs), fn, *args, **kwargs)
        return inner
    return wrap
