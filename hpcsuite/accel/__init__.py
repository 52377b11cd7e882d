"""One-source CPU/GPU layer: the solvers' view of runtime's Device (:mod:`.backend`: array-API
namespace, data placement and counted data regions, all the Device's), fused kernels for the hot
loops (:mod:`.kernels`) and temporally blocked stencils (:mod:`.temporal`: several steps per pass
through memory).

Solver code is written against ``backend.xp`` (the array API standard) and runs on NumPy, CuPy and,
for portability checks on CPU-only machines, ``array_api_strict``.
"""
from .backend import BACKENDS, Backend, DataRegion, get_backend
from .kernels import stencil7, stencil27
from .temporal import stencil7_steps, stencil27_steps

__all__ = ["Backend", "DataRegion", "get_backend", "BACKENDS", "stencil7", "stencil27",
           "stencil7_steps", "stencil27_steps"]
