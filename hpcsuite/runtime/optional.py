"""Optional GPU kernels: compiled once per process, and where the compiler refuses them the portable
code they speed up runs instead, after one warning. A faster path should cost speed when it is
missing, not the run. Local."""
from __future__ import annotations

import warnings
from typing import Callable

__all__ = ["compiles"]

_STATE: dict[str, str | None] = {}          # name -> None (compiled) or the compiler's complaint


def compiles(name: str, build: Callable[[], object], instead: str) -> bool:
    """Whether ``build()`` (compiling the kernels called ``name``) succeeds; tried on the first call
    only. On failure warns once: "``name``: the CUDA kernels do not compile here (...); ``instead``"."""
    if name not in _STATE:
        try:
            build()
            _STATE[name] = None
        except Exception as exc:  # noqa: BLE001 - NVRTC or driver errors
            _STATE[name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"{name}: the CUDA kernels do not compile here ({_STATE[name]}); {instead}",
                          RuntimeWarning, stacklevel=3)
    return _STATE[name] is None
