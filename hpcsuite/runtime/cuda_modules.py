"""One compiler for the suite's CUDA sources: CuPy's ``RawModule`` without fused multiply-add, cached.

Every CUDA kernel of the package (the stencils of ``accel``, the LES kernels, the tridiagonal solve
of ``solvers``, the index copies of ``runtime``) is compiled through a :class:`CudaSource`:

* always with ``--fmad=false`` (:data:`OPTIONS`): NVRTC then rounds every product and every sum
  as the CPU does, so the kernels give the NumPy/numba paths' results bit for bit (only library
  functions whose own code is made of fused operations, such as ``exp``, differ in the last bits);
* once per process, source and real type: the compiled module and every kernel looked up in it
  are cached (CuPy also keeps the binary in its disk cache, so a new process does not run NVRTC
  again);
* sources written for a floating-point type say ``real_t``, replaced by the C type of the arrays'
  dtype (``double``, ``float``) before compiling;
* every source is registered in :data:`SOURCES` under its module's name, so that a test compiles
  all of them with NVRTC on a machine without a GPU (``tests/test_cuda_sources_nvrtc.py``) and a
  new kernel module is covered by using this class.

CuPy is imported only when a module is compiled: nothing here needs a GPU until then. Whether a
failed compile falls back to other code is the caller's choice (see
``runtime.optional.compiles``). All functions here are local.

Examples
--------
>>> src = CudaSource("example", 'extern "C" __global__ void twice(real_t* a) { a[0] *= 2; }',
...                  real_types=("double", "float"), register=False)
>>> src.text("float32")
'extern "C" __global__ void twice(float* a) { a[0] *= 2; }'

On a GPU, ``src.function("twice", "float32")(grid, block, (a,))`` launches it on a float32 CuPy
array ``a``.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

__all__ = ["CudaSource", "OPTIONS", "SOURCES", "C_TYPES"]

#: NVRTC options of every module: no fused multiply-add (results rounded as on the CPU)
OPTIONS = ("--fmad=false",)

#: NumPy dtype name -> the C type that replaces ``real_t``
C_TYPES = {"float64": "double", "float32": "float"}

#: module name (``"hpcsuite.les.gpukernels"``) -> its :class:`CudaSource`
SOURCES: dict[str, "CudaSource"] = {}


class CudaSource:
    """A CUDA source of one module, compiled on first use (once per real type). Local.

    Parameters
    ----------
    name : str
        The module that holds the source (its ``__name__``): the key in :data:`SOURCES`.
    source : str
        CUDA C++ whose kernels are ``extern "C" __global__`` (looked up by their plain names).
    real_types : sequence of str, optional
        The C types (``"double"``, ``"float"``) that ``real_t`` in ``source`` stands for, one
        compiled module each; empty (the default) when the source uses no ``real_t``.
    register : bool, optional
        Whether to enter the source into :data:`SOURCES` (default True; a module imported again
        replaces its entry).

    Examples
    --------
    >>> CudaSource("example", 'extern "C" __global__ void k(double* a) { a[0] = 1.0; }',
    ...            register=False).texts()
    {None: 'extern "C" __global__ void k(double* a) { a[0] = 1.0; }'}
    """

    def __init__(self, name: str, source: str, real_types: Sequence[str] = (), register: bool = True):
        bad = [t for t in real_types if t not in C_TYPES.values()]
        if bad:
            raise ValueError(f"real_types must be among {sorted(C_TYPES.values())}, got {bad}")
        self.name = name
        self.source = source
        self.real_types = tuple(real_types)
        if register:
            SOURCES[name] = self

    def __repr__(self) -> str:
        return f"CudaSource({self.name!r}, real_types={self.real_types})"

    def _ctype(self, dtype) -> str | None:
        """The C type for ``real_t`` with arrays of ``dtype`` (None for a source without it)."""
        if dtype is None and not self.real_types:
            return None
        name = np.dtype(dtype).name if dtype is not None else None
        if not self.real_types:
            raise ValueError(f"{self.name}: its CUDA source has no real_t, got dtype {name}")
        ctype = C_TYPES.get(name)
        if ctype not in self.real_types:
            raise ValueError(f"{self.name}: its CUDA kernels take {', '.join(self.real_types)} arrays, "
                             f"got dtype {name}")
        return ctype

    def text(self, dtype=None) -> str:
        """The source as compiled for arrays of ``dtype`` (``real_t`` replaced; None: as it is)."""
        ctype = self._ctype(dtype)
        return self.source if ctype is None else self.source.replace("real_t", ctype)

    def texts(self) -> dict:
        """``{C type or None: the source as compiled}`` for every real type (what a test compiles)."""
        if not self.real_types:
            return {None: self.source}
        return {t: self.source.replace("real_t", t) for t in self.real_types}

    def module(self, dtype=None):
        """The compiled ``cupy.RawModule`` for arrays of ``dtype`` (None: a source without
        ``real_t``); compiled on the first call, then cached. Raises what CuPy/NVRTC raise when the
        source does not compile."""
        return _compile(self, self._ctype(dtype))

    def function(self, kernel: str, dtype=None):
        """The kernel ``kernel`` of :meth:`module` (a ``cupy.RawKernel``), looked up once: on small
        grids the launches are what a step costs, so the lookup is not repeated per launch."""
        return _function(self, kernel, self._ctype(dtype))


@functools.lru_cache(maxsize=None)
def _compile(src: CudaSource, ctype: str | None):
    import cupy
    code = src.source if ctype is None else src.source.replace("real_t", ctype)
    return cupy.RawModule(code=code, options=OPTIONS)


@functools.lru_cache(maxsize=None)
def _function(src: CudaSource, kernel: str, ctype: str | None):
    return _compile(src, ctype).get_function(kernel)
