"""CUDA kernels compiled for the CPU with g++ and launched like ``cupy.RawKernel`` (every block and
thread of the grid in turn). Used by tests/accel/test_kernels.py and by the CuPy stand-in's
``RawModule`` (tests/fakegpu)."""
import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

KERNEL_SIG = re.compile(r'extern "C" __global__ void (\w+)\((.*?)\)\s*\{', re.S)

HARNESS = """
#include <cmath>
using std::exp; using std::fmax;
struct Dim3 { unsigned x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim;
#define __global__
#define __device__ static inline
%(source)s
template <typename F> static void grid_loop(unsigned gx, unsigned gy, unsigned gz,
                                            unsigned bx, unsigned by, unsigned bz, F body) {
    blockDim = Dim3{bx, by, bz};
    for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x)
        for (unsigned tz = 0; tz < bz; ++tz) for (unsigned ty = 0; ty < by; ++ty) for (unsigned tx = 0; tx < bx; ++tx) {
            blockIdx = Dim3{x, y, z}; threadIdx = Dim3{tx, ty, tz}; body(); }
}
%(wrappers)s
"""


def parse_kernels(src: str) -> dict:
    """``{name: [(type, param), ...]}`` of the ``extern "C" __global__`` kernels in ``src``."""
    return {name: [tuple(p.strip().rsplit(None, 1)) for p in params.split(",")]
            for name, params in KERNEL_SIG.findall(src)}


class EmulatedKernel:
    """A CUDA kernel compiled for the CPU, launched like ``cupy.RawKernel``: ``k(grid, block, args)``.

    Every block and thread of the grid runs in turn; each argument is checked against the kernel's
    parameter type the way CUDA would read it (array dtype, exact scalar width).
    """

    SCALARS = {"double": np.float64, "float": np.float32, "long long": np.int64, "int": np.int32}

    def __init__(self, lib, name, params):
        self.fn, self.params = getattr(lib, f"launch_{name}"), params

    def __call__(self, grid, block, args):
        assert len(args) == len(self.params)
        pad = lambda t: tuple(t) + (1,) * (3 - len(t))      # noqa: E731 - CuPy takes 1 to 3 dims
        cargs = [ctypes.c_uint(int(x)) for x in (*pad(grid), *pad(block))]
        for (ptype, pname), a in zip(self.params, args):
            base = ptype.replace("const", "").replace("__restrict__", "").strip()
            if base.endswith("*"):
                # C-contiguous, or a view with a contiguous last axis (the kernel gets its strides)
                assert isinstance(a, np.ndarray) and (a.flags.c_contiguous or (
                    a.strides[-1] == a.itemsize and all(s >= 0 for s in a.strides))), pname
                assert a.dtype == self.SCALARS[base.rstrip("*").strip()], (pname, a.dtype)
                cargs.append(ctypes.c_void_p(a.ctypes.data))
            else:
                want = self.SCALARS[base]
                assert type(a) is want, (pname, type(a), want)
                cargs.append(np.ctypeslib.as_ctypes_type(want)(a))
        self.fn(*cargs)


_compiled: dict = {}


def compile_for_cpu(src: str, workdir=None) -> dict:
    """``{name: EmulatedKernel}`` for every kernel of the CUDA source ``src`` (g++, no FMA
    contraction, as the GPU build's ``--fmad=false``). Cached per source in this process."""
    key = hashlib.sha256(src.encode()).hexdigest()
    if key in _compiled:
        return _compiled[key]
    if shutil.which("g++") is None:
        raise RuntimeError("g++ is needed to run CUDA kernels on the CPU")
    ks = parse_kernels(src)
    wrappers = []
    for name, params in ks.items():
        decl = ", ".join(f"{t} {p}" for t, p in params)
        call = ", ".join(p for _, p in params)
        wrappers.append(f'extern "C" void launch_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
                        f'unsigned by, unsigned bz, {decl}) {{ grid_loop(gx, gy, gz, bx, by, bz, [&] {{ '
                        f'{name}({call}); }}); }}')
    d = Path(workdir or tempfile.mkdtemp(prefix="cuda_emulation_"))
    try:
        (d / "k.cpp").write_text(HARNESS % {"source": src, "wrappers": "\n".join(wrappers)})
        p = subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o",
                            str(d / "k.so"), str(d / "k.cpp")], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"g++ could not compile the CUDA source for the CPU:\n{p.stderr}")
        lib = ctypes.CDLL(str(d / "k.so"))      # (stays mapped once loaded: the files can go)
    finally:
        if workdir is None:
            shutil.rmtree(d, ignore_errors=True)
    _compiled[key] = {name: EmulatedKernel(lib, name, params) for name, params in ks.items()}
    return _compiled[key]
