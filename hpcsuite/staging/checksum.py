"""Checksums of stored objects: which algorithms exist here, and a streaming hasher for each.

``xxh3-128`` (xxHash's XXH3, 128 bits, from the ``xxhash`` package: ~25 GB/s on one core) is the
default; ``sha256`` (hashlib, ~0.6-2 GB/s) stays available for those who want a cryptographic digest;
``crc32`` (zlib, ~5 GB/s) is the default only when ``xxhash`` is missing. Every commit record names
its algorithm, so objects written with any of them (and the older records that hold only a
``sha256``) stay readable and verifiable.

Examples
--------
>>> h = hasher("xxh3-128"); h.update(b"abc"); len(h.hexdigest())
32
"""
from __future__ import annotations

import hashlib
import zlib

from hpcsuite.runtime import InputError

__all__ = ["ALGORITHMS", "default_algorithm", "check_algorithm", "hasher", "describe", "available"]

#: every algorithm a record may name (the first available one in this order is not the default:
#: see :func:`default_algorithm`)
ALGORITHMS = ("xxh3-128", "sha256", "crc32")

try:                                    # the fast path; its absence costs speed, not correctness
    import xxhash as _xxhash
except ImportError:                     # pragma: no cover - exercised by the fallback test
    _xxhash = None


class _Crc32:
    """zlib's CRC-32 behind hashlib's ``update``/``hexdigest`` interface (the fallback)."""

    __slots__ = ("_crc",)

    def __init__(self):
        self._crc = 0

    def update(self, data) -> None:
        self._crc = zlib.crc32(data, self._crc)

    def hexdigest(self) -> str:
        return f"{self._crc:08x}"


def available(algorithm: str) -> bool:
    """Whether ``algorithm`` can be computed in this installation. Local."""
    return algorithm in ("sha256", "crc32") or (algorithm == "xxh3-128" and _xxhash is not None)


def default_algorithm() -> str:
    """``"xxh3-128"`` when the ``xxhash`` package is installed, else ``"crc32"`` (zlib). Local."""
    return "xxh3-128" if _xxhash is not None else "crc32"


def check_algorithm(algorithm: str | None) -> str:
    """Validate a checksum name for new objects (``None``: the default); return it. Local.

    Raises :class:`~hpcsuite.runtime.InputError` naming the allowed values, or saying how to get
    ``xxhash`` when ``xxh3-128`` is asked for without it."""
    if algorithm is None:
        return default_algorithm()
    if algorithm not in ALGORITHMS:
        raise InputError(f"checksum must be one of {', '.join(ALGORITHMS)}; got {algorithm!r}")
    if not available(algorithm):
        raise InputError(f"checksum {algorithm!r} needs the xxhash package, which is not installed: "
                         "pip install xxhash (or choose sha256 or crc32)")
    return algorithm


def hasher(algorithm: str):
    """A fresh streaming hasher (``update(bytes-like)``, ``hexdigest()``) for ``algorithm``. Local.

    Raises :class:`~hpcsuite.runtime.InputError` for an unknown or unavailable algorithm."""
    if algorithm == "xxh3-128" and _xxhash is not None:
        return _xxhash.xxh3_128()
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm == "crc32":
        return _Crc32()
    check_algorithm(algorithm)                      # raises the message that fits
    raise InputError(f"checksum {algorithm!r} is not available")   # (not reached)


def describe() -> str:
    """One line for ``hpcsuite info``: the default algorithm and where it comes from. Local."""
    if _xxhash is not None:
        return f"xxh3-128 (xxhash {_xxhash.VERSION}); sha256 and crc32 on request"
    return "crc32 (zlib fallback: pip install xxhash for XXH3); sha256 on request"
