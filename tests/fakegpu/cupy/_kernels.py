"""``cupy.RawModule`` of the stand-in: the CUDA source compiled for the CPU with g++ (every block
and thread of a launch run in turn; tests/cuda_emulation.py). During a stream capture a launch is
recorded with its arguments as given (buffers by address, scalars by value), as CUDA records a
kernel node."""
import sys
from pathlib import Path

from ._core import _execute, _launched, unwrap

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # tests/, for cuda_emulation
from cuda_emulation import compile_for_cpu  # noqa: E402


class RawModule:
    def __init__(self, code: str, options=(), **kwargs):
        if "--fmad=false" not in options:
            raise ValueError("the suite's kernels are compiled without FMA (--fmad=false)")
        self._kernels = compile_for_cpu(code)

    def get_function(self, name: str):
        k = self._kernels[name]

        def launch(grid, block, args, **kwargs):
            _launched(f"raw:{name}")
            _execute(k, (tuple(grid), tuple(block), tuple(unwrap(a) for a in args)), {})
        return launch
