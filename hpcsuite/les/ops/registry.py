"""The operator registry: one entry point per LES operator, its array-API reference, and the
accelerated implementations registered for it, chosen in one place.

An :class:`Operator` is called like a function. It checks its arguments once (``check``: shapes that
every implementation needs), then runs the first registered implementation whose backend is
selected and whose eligibility check accepts the arguments (NumPy arrays for ``"numba"``, C-contiguous
float64 CuPy arrays for ``"cuda"``, plus what the kernel supports), and the reference otherwise. A
reference may call other operators' entry points; with only the reference selected
(``select("reference")``) the whole computation is the array-API source.

Which backends run is one switch, :func:`select` (or the context manager :func:`using`), read by every
operator; ``HPCSUITE_LES_FUSED=0`` in the environment starts a process with the reference alone.
``"numba"`` needs numba installed (``les.fused.AVAILABLE``); ``"cuda"`` needs CuPy arrays and the CUDA
modules to compile (``les.gpubase.usable``).

Each operator also knows how to make an example of its arguments (``example(case, rng)``, from a
:class:`~hpcsuite.les.state.StepContext` that has taken a step): ``tests/les/test_ops.py`` runs
every registered implementation of every operator on such examples against the reference, so a
newly registered implementation is tested without a new test. All functions here are local.

Examples
--------
>>> from hpcsuite.les import ops
>>> with ops.using("reference"):
...     ops.selected()
()
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["BACKENDS", "Implementation", "Operator", "OPERATORS", "select", "selected", "using", "is_selected"]

#: the accelerated backends, in the order an operator tries them
BACKENDS = ("numba", "cuda")

#: every operator by name (filled as the operator modules are imported)
OPERATORS: dict[str, "Operator"] = {}

_SELECTED: list = [()]          # [tuple of selected backends]: one list cell, read on every call


def select(backends=None) -> tuple:
    """Choose the backends every operator may use; returns the previous choice. Local.

    Parameters
    ----------
    backends : None, "reference", str or sequence of str
        ``None``: all (:data:`BACKENDS`); ``"reference"`` or ``()``: none (the array-API source
        everywhere); otherwise the named ones (``"numba"``, ``"cuda"``).

    Raises
    ------
    ValueError
        An unknown backend name.
    """
    if backends is None:
        chosen = BACKENDS
    elif backends == "reference":
        chosen = ()
    else:
        names = (backends,) if isinstance(backends, str) else tuple(backends)
        bad = [b for b in names if b not in BACKENDS]
        if bad:
            raise ValueError(f"les.ops.select: unknown backend {bad[0]!r}; known: 'reference', "
                             f"{', '.join(map(repr, BACKENDS))} or None (all)")
        chosen = tuple(b for b in BACKENDS if b in names)
    previous = _SELECTED[0]
    _SELECTED[0] = chosen
    return previous


def selected() -> tuple:
    """The backends operators may use now (``()``: the reference alone). Local."""
    return _SELECTED[0]


def is_selected(backend: str) -> bool:
    """Whether ``backend`` is selected now. Local."""
    return backend in _SELECTED[0]


@contextlib.contextmanager
def using(backends=None):
    """``with using("reference"): ...`` -- :func:`select` for a block, restored after it. Local."""
    previous = select(backends)
    try:
        yield
    finally:
        _SELECTED[0] = previous


@dataclass
class Implementation:
    """One registered implementation of an operator.

    ``eligible(*args, **kwargs)`` says whether it applies to these arguments; ``tolerance`` is the
    largest difference from the reference relative to the reference's largest magnitude that the
    equivalence test accepts (0.0: bit-identical), ``tolerance_gpu`` the same on a real GPU (where
    CuPy's ``x ** 2`` and ``exp`` round differently from the kernels'); None: as ``tolerance``.
    """
    backend: str
    function: Callable
    eligible: Callable
    tolerance: float = 0.0
    tolerance_gpu: float | None = None


@dataclass
class Operator:
    """An LES operator: ``op(*args, **kwargs)`` runs the chosen implementation. Local.

    Parameters
    ----------
    name : str
        Unique name (the registry key).
    reference : callable
        The array-API source: the definition of the operator.
    check : callable, optional
        ``check(*args, **kwargs)`` raises ``ValueError`` naming what is wrong when the arguments
        cannot be right for any implementation (shape checks, made once here).
    example : callable, optional
        ``example(case, rng) -> (args, kwargs)``: arguments from a stepped model context ``case``
        (fresh arrays: implementations may write into them), for the equivalence test.
    rim : int
        Cells of every 3-D array's x-y rim that the equivalence test leaves out (an implementation
        may leave halo cells that the next halo exchange overwrites).
    """
    name: str
    reference: Callable
    check: Callable | None = None
    example: Callable | None = None
    rim: int = 0
    implementations: list = field(default_factory=list)

    def __post_init__(self):
        if self.name in OPERATORS:
            raise ValueError(f"les.ops: operator {self.name!r} is registered twice")
        OPERATORS[self.name] = self

    def register(self, backend: str, function: Callable, eligible: Callable, tolerance: float = 0.0,
                 tolerance_gpu: float | None = None) -> None:
        """Register ``function`` for ``backend`` (one per backend; tried in :data:`BACKENDS` order)."""
        if backend not in BACKENDS:
            raise ValueError(f"les.ops: unknown backend {backend!r} for {self.name!r}; known: {BACKENDS}")
        if any(i.backend == backend for i in self.implementations):
            raise ValueError(f"les.ops: {self.name!r} has a {backend!r} implementation already")
        self.implementations.append(Implementation(backend, function, eligible, tolerance, tolerance_gpu))
        self.implementations.sort(key=lambda i: BACKENDS.index(i.backend))

    def choose(self, *args, **kwargs) -> Implementation | None:
        """The implementation a call with these arguments runs (None: the reference)."""
        chosen = _SELECTED[0]
        for impl in self.implementations:
            if impl.backend in chosen and impl.eligible(*args, **kwargs):
                return impl
        return None

    def __call__(self, *args, **kwargs):
        if self.check is not None:
            self.check(*args, **kwargs)
        chosen = _SELECTED[0]
        if chosen:
            for impl in self.implementations:
                if impl.backend in chosen and impl.eligible(*args, **kwargs):
                    return impl.function(*args, **kwargs)
        return self.reference(*args, **kwargs)


def fused_disabled_by_environment() -> bool:
    """``HPCSUITE_LES_FUSED=0``: the process starts with the reference alone."""
    return os.environ.get("HPCSUITE_LES_FUSED", "1").strip() == "0"


select("reference" if fused_disabled_by_environment() else None)
