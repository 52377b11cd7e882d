"""PGAS distributed arrays modelled on DASH: patterns, a global and a local view, halos,
algorithms, redistribution, atomics and locks, SUMMA and parallel HDF5.

Layers inside the package: ``lifetime`` (deferred, agreed frees) <- ``dist`` (per-dimension specs)
<- ``pattern`` <- ``memory`` (windows) /
``access`` (planning one-sided transfers) <- ``array`` (DistArray) <- ``halo``, ``algorithms``,
``redistribute``, ``sort``, ``sync``, ``summa``, ``hdf5``, ``device_rma`` (one-sided access in
device memory) <- ``arith``, ``reductions``,
``manipulation``, ``namespace`` <- ``numpy_api`` (DistArray's NumPy protocols, installed here).
"""
from .algorithms import (all, any, dot, fill, find, for_each, for_each_with_index, generate,
                         max_element, min_element, norm, reduce, transform)
from .array import DistArray, arange, empty, from_numpy, full, ones, zeros
from .device_rma import DeviceWindow
from .dist import BLOCKCYCLIC, BLOCKED, CYCLIC, NONE, TILE, DistSpec
from .halo import Halo, HaloGroup, HaloSpec
from .hdf5 import load_hdf5, save_hdf5
from .lifetime import collect
from .memory import live_segments
from .numpy_api import install as _install_numpy_protocols
from .pattern import Pattern
from .redistribute import copy
from .sort import cumsum, scan, sort
from .summa import matmul
from .sync import Atomic, Mutex, accumulate, live_mutexes

__all__ = [
    "BLOCKED", "CYCLIC", "BLOCKCYCLIC", "TILE", "NONE", "DistSpec", "Pattern",
    "DistArray", "zeros", "ones", "full", "empty", "arange", "from_numpy",
    "Halo", "HaloGroup", "HaloSpec", "live_segments", "collect", "copy", "save_hdf5", "load_hdf5",
    "Atomic", "Mutex", "accumulate", "live_mutexes", "matmul", "DeviceWindow",
    "fill", "generate", "for_each", "for_each_with_index", "transform", "reduce", "min_element",
    "max_element", "find", "all", "any", "dot", "norm", "sort", "scan", "cumsum",
]

_install_numpy_protocols()     # operators, ufuncs, NumPy functions, __array_namespace__
