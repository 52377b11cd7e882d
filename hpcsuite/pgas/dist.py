"""Per-dimension distribution specs and their index maps.

A distribution spec says how one dimension of extent ``n`` is dealt out to the ``p`` process-grid
coordinates along that dimension:

* ``BLOCKED``: one contiguous block per coordinate, sizes differing by at most one (the first
  ``n % p`` blocks are one longer, as ``numpy.array_split``).
* ``CYCLIC``: element ``i`` to coordinate ``i % p`` (``BLOCKCYCLIC(1)``).
* ``BLOCKCYCLIC(b)``: blocks of ``b`` elements dealt round-robin (ScaLAPACK's layout); the last
  block may be partial.
* ``TILE(b)``: the ownership of ``BLOCKCYCLIC(b)``, but each tile is stored contiguously on its
  owner (tile-major local storage, as DASH's ``TilePattern``); needs ``n % b == 0``.
* ``NONE``: not distributed (the process grid has extent 1 along this dimension).

Every map is closed-form arithmetic: O(1) per index whatever ``p`` is, and vectorised over NumPy
index arrays. Local indices along a dimension increase with the global index, for every spec.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DistSpec", "BLOCKED", "CYCLIC", "NONE", "BLOCKCYCLIC", "TILE", "DimMap", "as_spec"]


@dataclass(frozen=True)
class DistSpec:
    """A distribution spec for one dimension (use the module constants and constructors). Local."""

    kind: str              # "blocked" | "blockcyclic" | "tile" | "none"
    block: int = 0         # block (tile) size for blockcyclic / tile

    def __repr__(self) -> str:
        if self.kind == "blockcyclic":
            return "CYCLIC" if self.block == 1 else f"BLOCKCYCLIC({self.block})"
        if self.kind == "tile":
            return f"TILE({self.block})"
        return self.kind.upper()


def _block_size(b, what: str) -> int:
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b <= 0:
        raise ValueError(f"{what}: block size must be a positive integer, got {b!r}")
    return int(b)


def BLOCKCYCLIC(b: int) -> DistSpec:
    """Blocks of ``b`` elements dealt round-robin over the grid coordinates. Local."""
    return DistSpec("blockcyclic", _block_size(b, "BLOCKCYCLIC"))


def TILE(b: int) -> DistSpec:
    """Tiles of ``b`` elements dealt round-robin, each stored contiguously on its owner. Local."""
    return DistSpec("tile", _block_size(b, "TILE"))


BLOCKED = DistSpec("blocked")
CYCLIC = DistSpec("blockcyclic", 1)
NONE = DistSpec("none")


def as_spec(s) -> DistSpec:
    """Accept a spec or its name (``"blocked"``, ``"cyclic"``, ``"none"``)."""
    if isinstance(s, DistSpec):
        return s
    if isinstance(s, str):
        named = {"blocked": BLOCKED, "cyclic": CYCLIC, "none": NONE}
        if s.lower() in named:
            return named[s.lower()]
    raise ValueError(f"distribution must be BLOCKED, CYCLIC, BLOCKCYCLIC(b), TILE(b) or NONE, got {s!r}")


class DimMap:
    """The index map of one dimension: extent ``n`` over ``p`` grid coordinates under ``spec``.

    Methods accept Python ints or NumPy integer arrays (vectorised) and never loop over ``p``.
    """

    __slots__ = ("spec", "n", "p", "b", "_q", "_r")

    def __init__(self, spec: DistSpec, n: int, p: int):
        self.spec, self.n, self.p = spec, int(n), int(p)
        if spec.kind == "none" and p != 1:
            raise ValueError(f"a NONE dimension needs process-grid extent 1, got {p}")
        if spec.kind == "tile" and n % spec.block:
            raise ValueError(f"TILE({spec.block}) needs the extent {n} to be a multiple of {spec.block} "
                             f"(partial tiles are not stored; use BLOCKCYCLIC({spec.block}))")
        self.b = spec.block if spec.kind in ("blockcyclic", "tile") else 0
        self._q, self._r = divmod(self.n, self.p)

    def __repr__(self) -> str:
        return f"DimMap({self.spec!r}, n={self.n}, p={self.p})"

    @property
    def cyclic(self) -> bool:
        return self.b > 0

    # ------------------------------------------------------------------ global -> (owner, local)
    def owner(self, g):
        """Grid coordinate owning global index ``g``."""
        if self.cyclic:
            return (g // self.b) % self.p
        if self.p == 1:
            return g * 0
        q, r = self._q, self._r
        big = r * (q + 1)
        if isinstance(g, np.ndarray):
            return np.where(g < big, g // (q + 1), r + (g - big) // max(q, 1))
        return g // (q + 1) if g < big else r + (g - big) // q

    def local(self, g):
        """Local index of global index ``g`` on its owner."""
        if self.cyclic:
            return (g // (self.b * self.p)) * self.b + g % self.b
        if self.p == 1:
            return g
        return g - self.start(self.owner(g))

    # ------------------------------------------------------------------ (owner, local) -> global
    def glob(self, c, l):
        """Global index of local index ``l`` on grid coordinate ``c``."""
        if self.cyclic:
            return ((l // self.b) * self.p + c) * self.b + l % self.b
        return self.start(c) + l

    def start(self, c):
        """First global index of coordinate ``c``'s block (BLOCKED / NONE only)."""
        q, r = self._q, self._r
        if isinstance(c, np.ndarray):
            return c * q + np.minimum(c, r)
        return c * q + min(c, r)

    def size(self, c: int) -> int:
        """Number of indices owned by coordinate ``c``."""
        if not self.cyclic:
            return self._q + (1 if c < self._r else 0)
        b, p, n = self.b, self.p, self.n
        nblocks = -(-n // b)
        mine = nblocks // p + (1 if c < nblocks % p else 0)
        if mine and (nblocks - 1) % p == c:          # c holds the (possibly partial) last block
            return (mine - 1) * b + (n - (nblocks - 1) * b)
        return mine * b

    def owned(self, c: int) -> np.ndarray:
        """Sorted global indices owned by coordinate ``c`` (O(owned) memory)."""
        return self.glob(c, np.arange(self.size(c)))

    def owned_runs(self, c: int) -> list[tuple[int, int]]:
        """Owned global indices of ``c`` as ``(start, length)`` runs of consecutive indices."""
        if not self.cyclic:
            s = self.start(c)
            return [(s, self.size(c))] if self.size(c) else []
        runs, b, step = [], self.b, self.b * self.p
        for s in range(c * b, self.n, step):
            runs.append((s, min(b, self.n - s)))
        return runs

    def max_size(self) -> int:
        """The largest local extent over all coordinates."""
        return max(self.size(0), self.size(self.p - 1))

    def same_as(self, other: "DimMap") -> bool:
        """True when both maps put every index on the same coordinate at the same local index."""
        if (self.n, self.p) != (other.n, other.p):
            return False
        if self.p == 1:
            return True
        if self.cyclic and other.cyclic:
            return self.b == other.b or self.n <= min(self.b, other.b)
        if not self.cyclic and not other.cyclic:
            return True
        return False  # blocked vs block-cyclic: treated as different (a copy is always correct)
