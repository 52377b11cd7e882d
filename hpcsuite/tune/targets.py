"""Tuning targets: the distributed factorizations of ``hpcsuite.linalg`` as tunable programs.

A target knows its tunable parameters (with the values a user may list), how to build its input
once per configuration (:meth:`Target.prepare`, outside the timed program) and how to run one
configuration (:meth:`Target.run`). The input matrices are generated from closed-form formulas on
every rank's own blocks (no communication, no file), so every run of a configuration sees the same
data.
"""
from __future__ import annotations

import numpy as np

from .. import pgas
from ..runtime import Team

__all__ = ["TARGETS", "Target", "CholeskyTarget", "CholQRTarget", "spd_matrix", "tall_matrix"]


def _grid(value):
    return (0, 0) if value in (None, "auto") else tuple(value)


def spd_matrix(n: int, block: int, grid, team: Team) -> pgas.DistArray:
    """A well-conditioned SPD ``n x n`` matrix, ``(BLOCKCYCLIC(block),) * 2`` on ``grid``:
    ``A = n I + 0.5 cos(i + j)`` (a rank-2 perturbation, eigenvalues in ``[n - n/2, n + n/2]``).
    Collective (allocation)."""
    a = pgas.zeros((n, n), dist=(pgas.BLOCKCYCLIC(block),) * 2, team=team, grid=_grid(grid))
    i, j = a.local_global_indices()
    a.local[...] = 0.5 * np.cos(i + j) + n * (i == j)
    return a


def tall_matrix(m: int, n: int, panel: int, grid, team: Team, cond: float = 1e3) -> pgas.DistArray:
    """A tall ``m x n`` matrix with singular values spread over ``[1, cond]`` (closed form:
    scaled Chebyshev-like columns), ``(BLOCKED, BLOCKCYCLIC(panel))`` on ``grid``. Collective."""
    a = pgas.zeros((m, n), dist=(pgas.BLOCKED, pgas.BLOCKCYCLIC(panel)), team=team, grid=_grid(grid))
    i, j = a.local_global_indices()
    t = (i + 0.5) / m
    scale = cond ** (-j / max(n - 1, 1))
    a.local[...] = np.cos(np.pi * (j + 1) * t) * scale + 1e-3 * np.sin(i * 0.37 + j * 1.3)
    return a


class Target:
    """A tunable program. ``params`` maps parameter names to a validator of one value."""

    name = ""
    params: dict = {}
    problem_keys: tuple = ()

    def __init__(self, team: Team, **problem):
        self.team, self.problem = team, problem

    def prepare(self, cfg: dict):
        raise NotImplementedError

    def run(self, cfg: dict, state) -> None:
        raise NotImplementedError


class _State:
    def __init__(self, *arrays):
        self.arrays = arrays

    def free(self) -> None:
        for a in self.arrays:
            a.free()


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _grid_value(v) -> bool:
    return v == "auto" or (isinstance(v, (list, tuple)) and len(v) == 2 and all(_positive_int(x) for x in v))


class CholeskyTarget(Target):
    """2-D block-cyclic Cholesky of an ``n x n`` SPD matrix: block size, grid, broadcast variant,
    lookahead."""

    name = "cholesky"
    params = {"block": _positive_int, "grid": _grid_value, "variant": lambda v: v in ("bcast", "ring"),
              "lookahead": lambda v: v in (0, 1)}
    problem_keys = ("n",)

    def prepare(self, cfg: dict):
        n = self.problem["n"]
        if cfg["block"] > n:
            raise ValueError(f"block size {cfg['block']} is larger than the matrix ({n})")
        a = spd_matrix(n, cfg["block"], cfg.get("grid", "auto"), self.team)
        out = pgas.empty(a.shape, dist=a.dist, team=self.team, grid=a.grid)
        return _State(a, out)

    def run(self, cfg: dict, state) -> None:
        from .. import linalg
        a, out = state.arrays
        linalg.cholesky(a, variant=cfg.get("variant", "bcast"), lookahead=cfg.get("lookahead", 0), out=out)


class CholQRTarget(Target):
    """CholeskyQR2 of a tall ``m x n`` matrix: panel width and process grid."""

    name = "cholqr"
    params = {"panel": _positive_int, "grid": _grid_value}
    problem_keys = ("m", "n")

    def prepare(self, cfg: dict):
        m, n = self.problem["m"], self.problem["n"]
        if cfg["panel"] > n:
            raise ValueError(f"panel width {cfg['panel']} is larger than the number of columns ({n})")
        return _State(tall_matrix(m, n, cfg["panel"], cfg.get("grid", "auto"), self.team))

    def run(self, cfg: dict, state) -> None:
        from .. import linalg
        (a,) = state.arrays
        q, _ = linalg.cholqr2(a, panel=cfg["panel"])
        q.free()


TARGETS = {t.name: t for t in (CholeskyTarget, CholQRTarget)}
