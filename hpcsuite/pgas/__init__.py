"""PGAS distributed arrays modelled on DASH: patterns, a global and a local view, halos,
algorithms, redistribution, atomics and locks, SUMMA and parallel HDF5.

Layers inside the package: ``dist`` (per-dimension specs) <- ``pattern`` <- ``memory`` (windows) /
``access`` (planning one-sided transfers) <- ``array`` (DistArray) <- ``halo``, ``algorithms``,
``redistribute``, ``sort``, ``sync``, ``summa``, ``hdf5``.
"""
from .array import DistArray, arange, empty, from_numpy, full, ones, zeros
from .dist import BLOCKCYCLIC, BLOCKED, CYCLIC, NONE, TILE, DistSpec
from .halo import Halo, HaloSpec
from .memory import live_segments
from .pattern import Pattern
from .redistribute import copy

__all__ = [
    "BLOCKED", "CYCLIC", "BLOCKCYCLIC", "TILE", "NONE", "DistSpec", "Pattern",
    "DistArray", "zeros", "ones", "full", "empty", "arange", "from_numpy",
    "Halo", "HaloSpec", "live_segments", "copy",
]
