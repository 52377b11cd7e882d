"""The one place where communication made through a :class:`~hpcsuite.runtime.Team` can be observed.

Every communication method of ``Team`` calls :func:`observed`. With no interceptor installed it is a
plain function call (one branch of overhead). ``hpcsuite.tune`` installs an interceptor to time,
count or skip communication kernels; nothing in the runtime layer imports ``tune``.

An interceptor is a callable ``interceptor(team, name, nbytes, fn, args, kwargs)`` that must either
call ``fn(*args, **kwargs)`` and return its result, or decide not to (and return what the caller
should see).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

__all__ = ["observed", "intercept", "current_interceptor"]

_interceptor: Callable | None = None


def observed(team, name: str, nbytes: int, fn: Callable, *args, **kwargs) -> Any:
    """Run the communication call ``fn`` named ``name`` moving ``nbytes``, through the interceptor."""
    if _interceptor is None:
        return fn(*args, **kwargs)
    return _interceptor(team, name, nbytes, fn, args, kwargs)


def current_interceptor() -> Callable | None:
    """The installed interceptor, or ``None``."""
    return _interceptor


@contextlib.contextmanager
def intercept(interceptor: Callable):
    """Install ``interceptor`` for the duration of a ``with`` block (restores the previous one). Local."""
    global _interceptor
    previous, _interceptor = _interceptor, interceptor
    try:
        yield interceptor
    finally:
        _interceptor = previous
