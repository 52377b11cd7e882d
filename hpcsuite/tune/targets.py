"""Tuning targets: the distributed factorizations of ``hpcsuite.linalg`` as tunable programs.

A target knows its tunable parameters (with the values a user may list), how to build its input
once per configuration (:meth:`Target.prepare`, outside the timed program) and how to run one
configuration (:meth:`Target.run`). The input matrices are generated from closed-form formulas on
every rank's own blocks (no communication, no file), so every run of a configuration sees the same
data.

:class:`ProgramTarget` is a user's own program, a function in a Python file written with plain
mpi4py and NumPy: its parameters are whatever the user names, and when it runs under the tuner
(inside an :class:`~hpcsuite.tune.Execution`) it runs inside :func:`~hpcsuite.tune.intercept_world`
and :func:`~hpcsuite.tune.blas`, so its body needs no change; a full run is the plain program.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from .. import pgas
from ..runtime import Team
from ..runtime.comm_hooks import current_interceptor
from ..runtime.compute_hooks import current_compute_interceptor
from .blas import blas
from .intercept import intercept_world

__all__ = ["TARGETS", "Target", "CholeskyTarget", "CholQRTarget", "ProgramTarget", "load_program", "spd_matrix",
           "tall_matrix"]


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
        out.local[...] = 0.0      # its pages mapped now, not in the first (timed) run
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


def load_program(file, function: str, prepare: str = ""):
    """``(function, prepare or None)`` from the Python file ``file`` (imported under a name of its
    own; code under ``if __name__ == "__main__":`` does not run). Local.

    Raises ``FileNotFoundError`` / ``ValueError`` naming the file or the missing function."""
    path = Path(file)
    if not path.is_file():
        raise FileNotFoundError(f"program file {file} does not exist")
    name = f"hpcsuite_program_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    out = []
    for what in (function, prepare):
        if not what:
            out.append(None)
            continue
        fn = getattr(module, what, None)
        if not callable(fn):
            raise ValueError(f"program file {file} has no function {what!r}")
        out.append(fn)
    return out[0], out[1]


class ProgramTarget(Target):
    """A plain mpi4py program: ``function(**args, **config, **prepared)`` from a Python file, where
    ``prepared`` is what ``prepare(**args, **config)`` returns (a dict, built once per
    configuration outside the timed program; no ``prepare``: nothing). Its parameters are the
    configuration's names; it reads ``MPI.COMM_WORLD`` (or communicators split from it) itself."""

    name = "program"
    params: dict = {}
    problem_keys = ()

    def __init__(self, team: Team, file, function: str = "run", prepare: str = "", args: dict | None = None):
        super().__init__(team)
        self.fn, self.prep = load_program(file, function, prepare)
        self.args = dict(args or {})

    def prepare(self, cfg: dict):
        if self.prep is None:
            return {}
        state = self.prep(**self.args, **cfg)
        if not isinstance(state, dict):
            raise ValueError(f"prepare must return a dict of keyword arguments, got {type(state).__name__}")
        return state

    def run(self, cfg: dict, state) -> None:
        kwargs = {**self.args, **cfg, **(state or {})}
        if current_interceptor() is None and current_compute_interceptor() is None:
            self.fn(**kwargs)                 # a full run: the program as it is
            return
        with intercept_world(), blas():
            self.fn(**kwargs)


TARGETS = {t.name: t for t in (CholeskyTarget, CholQRTarget, ProgramTarget)}
