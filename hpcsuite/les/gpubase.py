"""What the LES's CUDA kernels share: when they apply, whether they compile, and launches over
several fields.

``gpukernels`` (the dynamics and thermodynamics) and ``gpusubgrid`` (the subgrid closure) each hold
their CUDA source and register its compiled module here; both build on this module, and neither
imports the other.

* :func:`usable` -- whether the CUDA kernels apply to some arrays (float64 CuPy arrays with the
  right layout, every registered module compiled); the ``"cuda"`` implementations registered in
  ``les.ops`` ask it in their eligibility checks;
* :func:`register_module` -- how a kernel module makes its CUDA module part of that compile check;
* :class:`AddressTables` and :func:`launch_over_fields` -- kernels over several fields at once, reading
  the fields' device addresses from small tables made once.

Whether the CUDA kernels run at all is the operator registry's choice (``les.ops.select``; the
CPU kernels' switch no longer turns them off). All functions here are local.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..runtime import optional

__all__ = ["usable", "register_module", "AddressTables", "launch_over_fields", "GRID_YZ_MAX"]

#: CUDA's largest grid along y and z
GRID_YZ_MAX = 65535

_CUPY_TYPES: dict = {}      # type -> whether it is a CuPy array type (the stand-in's included)
_COMPILED: list = []        # [True] once every registered module compiled (then not asked again)
_MODULES: dict[str, Callable[[], object]] = {}      # name -> build (compiles the module; cached there)


def register_module(name: str, build: Callable[[], object]) -> None:
    """Make the CUDA module that ``build()`` compiles part of :func:`usable`'s compile check. Local.

    Called once by each kernel module when it is imported. A module registered after the check was
    made is checked at the next :func:`usable` call.

    Parameters
    ----------
    name : str
        The kernel module's name (``"gpukernels"``): the warning if it does not compile names it.
    build : callable
        Compiles the module (raising NVRTC's error if it cannot); may be called more than once.
    """
    _MODULES[name] = build
    _COMPILED.clear()


def usable(*arrays, strided: bool = False) -> bool:
    """Whether the LES CUDA kernels (``gpukernels``, ``gpusubgrid``) apply to ``arrays``. Local.

    They apply when every array is a float64 CuPy array (the CuPy
    stand-in's arrays count: tests), C-contiguous, or with ``strided`` any view whose last axis is
    contiguous and whose strides are non-negative, and every registered CUDA module compiled (if
    NVRTC refuses one, the array-API source runs, after one warning).
    """
    # (about a hundred calls per step: kept cheap, as the launches it decides about)
    for a in arrays:
        t = type(a)
        on_cupy = _CUPY_TYPES.get(t)
        if on_cupy is None:
            on_cupy = _CUPY_TYPES[t] = t.__module__.split(".")[0] == "cupy"
        if not on_cupy or a.dtype.char != "d":
            return False
        if strided and a.ndim:
            if a.strides[-1] != 8 or any(s < 0 or s % 8 for s in a.strides):
                return False
        elif not a.flags.c_contiguous:
            return False
    return _COMPILED[0] if _COMPILED else _compiled()


def _compiled() -> bool:
    """Whether every registered CUDA module compiles: see ``runtime.optional.compiles``."""
    ok = all(optional.compiles(f"hpcsuite.les.{name}", build, "the GPU runs the array-API source")
             for name, build in list(_MODULES.items()))
    if ok:
        _COMPILED.append(True)
    return ok


class AddressTables:
    """Device tables (addresses, flags) made once per set of arrays: a kernel over several fields
    then costs one launch and no host-to-device copy per call. Keeps the arrays alive (few sets).

    ``get(arrays, flags)`` returns ``(int64 table of the arrays' device addresses, int32 table of
    flags)``, made on the first call with these arrays (the same objects) and flags. Local.
    """

    KEPT = 16

    def __init__(self):
        self._made: dict = {}

    def get(self, arrays, flags):
        import cupy
        key = (tuple(id(a) for a in arrays), tuple(flags))
        kept = self._made.get(key)
        if kept is None or any(k is not a for k, a in zip(kept[0], arrays)):      # (an id reused)
            tables = (cupy.asarray([a.data.ptr for a in arrays], dtype=cupy.int64),
                      cupy.asarray(list(flags), dtype=cupy.int32))
            kept = self._made[key] = (tuple(arrays), tables)
            while len(self._made) > self.KEPT:
                self._made.pop(next(iter(self._made)))
        return kept[1]


def launch_over_fields(kernel, grid_xy, block, layers: int, tables, rest, count: bool = True) -> None:
    """Launch a kernel over several fields: grid ``(*grid_xy, fields x layers)`` (block layer z is
    field z // layers), arguments the field tables (1-D device arrays, one entry per field), then the
    number of fields (with ``count``), then ``rest``. Where fields x layers exceeds CUDA's grid
    (:data:`GRID_YZ_MAX`), the fields go in chunks (views of the tables), one launch each. Local."""
    n = int(tables[0].shape[0])
    per = max(1, GRID_YZ_MAX // max(int(layers), 1))
    for a in range(0, n, per):
        b = min(a + per, n)
        part = tables if (a, b) == (0, n) else tuple(t[a:b] for t in tables)
        kernel((*grid_xy, (b - a) * int(layers)), block, (*part, *((np.int32(b - a),) if count else ()), *rest))
