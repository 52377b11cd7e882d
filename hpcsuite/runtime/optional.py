"""Optional parts: GPU kernels that may not compile, and Python packages that belong to an extra.

A faster path should cost speed when it is missing, not the run; a part that cannot work without
its package says which extra to install, in one line, before the run starts. Local.

* :func:`compiles` -- whether a set of CUDA kernels compiles here (else the portable code runs,
  after one warning).
* :func:`require` -- import a package of an extra, or raise :class:`~hpcsuite.runtime.InputError`
  naming the extra (``pip install 'hpcsuite[tomo]'``).
* :func:`numba_module` -- numba, or a stand-in that leaves the kernels' Python source as it is
  (callers check the flag and take their pure-NumPy path instead).
* :data:`EXTRAS` -- which extra brings which importable package.
"""
from __future__ import annotations

import importlib
import warnings
from types import ModuleType, SimpleNamespace
from typing import Callable

from .errors import InputError

__all__ = ["compiles", "require", "available", "numba_module", "missing_note", "note_missing", "EXTRAS"]

_STATE: dict[str, str | None] = {}          # name -> None (compiled) or the compiler's complaint

#: importable module -> (extra of ``pyproject.toml`` that installs it, its distribution name)
EXTRAS: dict[str, tuple[str, str]] = {
    "boto3": ("s3", "boto3"),
    "skimage": ("tomo", "scikit-image"),
    "matplotlib": ("plot", "matplotlib"),
    "numba": ("fast", "numba"),
    "cupy": ("gpu", "cupy"),
}


def compiles(name: str, build: Callable[[], object], instead: str) -> bool:
    """Whether ``build()`` (compiling the kernels called ``name``) succeeds; tried on the first call
    only. On failure warns once: "``name``: the CUDA kernels do not compile here (...); ``instead``".
    Local."""
    if name not in _STATE:
        try:
            build()
            _STATE[name] = None
        except Exception as exc:  # noqa: BLE001 - NVRTC or driver errors
            _STATE[name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"{name}: the CUDA kernels do not compile here ({_STATE[name]}); {instead}",
                          RuntimeWarning, stacklevel=3)
    return _STATE[name] is None


def _install_hint(module: str) -> str:
    extra, dist = EXTRAS.get(module.split(".")[0], (None, module.split(".")[0]))
    return f"pip install 'hpcsuite[{extra}]'" if extra else f"pip install {dist}"


def require(module: str, what: str, hint: str | None = None) -> ModuleType:
    """Import ``module`` (e.g. ``"skimage.transform"``), or raise :class:`InputError` with one line:
    ``"{what} needs scikit-image, which is not installed: pip install 'hpcsuite[tomo]'"``. Local.

    Call it where the part is chosen (a deck's check, a command's argument check), so that the
    message comes before the run starts, the same on every rank. ``hint`` replaces the ``pip
    install`` advice (for a module that is no package on PyPI, e.g. Ceph's ``rados``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        dist = EXTRAS.get(top, (None, top))[1]
        name = getattr(exc, "name", None)
        if name is None or name.split(".")[0] == top:
            why = "which is not installed"
        else:                                               # installed, but one of its own is missing
            why = f"which does not import here ({exc})"
        raise InputError(f"{what} needs {dist}, {why}: {hint or _install_hint(module)}") from None


def available(module: str) -> bool:
    """Whether ``module`` imports here (imported once, then cached by Python). Local."""
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def missing_note(module: str, what: str, instead: str = "") -> str:
    """The one-line note for a faster path that is missing: ``"{what}: numba is not installed
    ({instead}): pip install 'hpcsuite[fast]'"``. Local."""
    why = f" ({instead})" if instead else ""
    return f"{what}: {EXTRAS.get(module, (None, module))[1]} is not installed{why}: {_install_hint(module)}"


_NOTED: set[tuple[str, str]] = set()


def note_missing(module: str, what: str, instead: str, rank: int = 0) -> None:
    """Warn once per process, on rank 0 only, that a faster path is missing (:func:`missing_note`);
    the run goes on with ``instead``. Local."""
    if rank == 0 and (module, what) not in _NOTED:
        _NOTED.add((module, what))
        # one line on stderr ("hpcsuite:0: RuntimeWarning: ..."): no source line under it
        warnings.warn_explicit(missing_note(module, what, instead), RuntimeWarning, "hpcsuite", 0)


class _NoNumba(SimpleNamespace):
    """What the modules that define numba kernels use of numba, without numba: ``njit`` leaves a
    function as plain Python, ``prange`` is ``range``, one thread. The kernels are then never
    called by the suite (their callers check the flag that :func:`numba_module` returns)."""

    def __init__(self):
        super().__init__(prange=range, config=SimpleNamespace(NUMBA_NUM_THREADS=1), __version__="")

    @staticmethod
    def njit(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:      # bare @njit
            return args[0]
        return lambda fn: fn

    @staticmethod
    def get_num_threads() -> int:
        return 1

    @staticmethod
    def set_num_threads(n: int) -> None:
        return None


def numba_module() -> tuple[ModuleType | _NoNumba, bool]:
    """``(numba, True)``, or ``(stand-in, False)`` when numba is not installed (the ``fast``
    extra). Local. A module whose kernels are decorated at import time uses it as::

        numba, HAVE_NUMBA = optional.numba_module()

        @numba.njit(parallel=True, cache=True)
        def _kernel(...): ...
    """
    try:
        import numba
        return numba, True
    except ImportError:
        return _NoNumba(), False
