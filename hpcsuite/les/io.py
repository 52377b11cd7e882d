"""LES output: 3-D fields (parallel HDF5), cross-sections, and checkpoint/restart.

* :func:`write_fields`: every field of a :class:`~hpcsuite.les.state.FieldStore` (plus optional
  diagnostics) into one HDF5 file, written in parallel by all ranks (``pgas.save_hdf5``), complete
  or absent (written under a hidden name, renamed when done).
* :class:`CrossSections`: horizontal (x-y at chosen levels) and vertical (x-z at one y) slices of
  chosen fields, gathered to rank 0 at each sample and written as time series.
* :func:`save_checkpoint` / :func:`load_checkpoint`: the prognostic fields and the scalars that
  decide the next step (time, step count, last step, the largest diffusivity), so that a restarted
  run continues bit-identically.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import numpy as np

from .. import pgas
from ..runtime import InputError
from ..runtime.device import to_host

__all__ = ["write_fields", "save_checkpoint", "load_checkpoint", "CrossSections", "checkpoint_exists"]


def _hidden(path: Path, team) -> str:
    """A temporary name beside ``path`` (the same on every rank). Collective."""
    name = None
    if team.rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        name = str(path.with_name(f".{path.name}.part-{os.getpid()}-{secrets.token_hex(4)}"))
    return team.bcast(name)


def _publish(tmp: str, path: Path, team) -> None:
    """Rename the finished temporary to ``path`` (atomic on one filesystem). Collective."""
    team.barrier()
    if team.rank == 0:
        os.replace(tmp, path)
    team.barrier()


def write_fields(path, store, attrs: dict | None = None, extra: dict | None = None) -> None:
    """Write every field (dataset ``name``) and the block-shaped arrays in ``extra`` (e.g.
    ``{'ql': diag['ql']}``) to ``path``. Collective; parallel HDF5; complete or absent."""
    path = Path(path)
    tmp = _hidden(path, store.team)
    first = True
    items = list(store.arrays.items())
    scratch = []
    for name, arr in (extra or {}).items():
        d = store._make(arr.shape[2] if arr.ndim == 3 else 1)     # a distributed copy to write
        d.local_with_halo[...] = arr.reshape(d.local_with_halo.shape)
        items.append((name, d))
        scratch.append(d)
    for name, arr in items:
        pgas.save_hdf5(arr, tmp, name, attrs=(attrs or {}) if first else {}, mode="w" if first else "a")
        first = False
    for d in scratch:
        d.free()
    _publish(tmp, Path(path), store.team)


def checkpoint_exists(path, team) -> bool:
    """Whether the checkpoint file exists (rank 0 looks). Collective."""
    return bool(team.bcast(Path(path).is_file() if team.rank == 0 else None))


def save_checkpoint(path, model, attrs: dict | None = None) -> None:
    """The model's fields and stepping state, written atomically. Collective."""
    state = {"t": model.t, "nstep": model.nstep, "dt_last": model.dt_last, "k_max": model.global_k_max(),
             "names": " ".join(model.store.names),
             "shape": np.array([model.ctx.grid.nx, model.ctx.grid.ny, model.ctx.grid.nz])}
    state.update(attrs or {})
    write_fields(path, model.store, attrs=state)


def load_checkpoint(path, model) -> dict:
    """Fill the model's fields and stepping state from the checkpoint ``path``; returns its
    attributes. Collective.

    Raises
    ------
    InputError
        On every rank: the checkpoint holds other fields or another grid than the model.
    """
    store, team, g = model.store, model.store.team, model.ctx.grid
    attrs = None
    if team.rank == 0:
        import h5py
        with h5py.File(path, "r") as f:
            first = next(iter(store.arrays))
            attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                     for k, v in f[first].attrs.items()} if first in f else {}
    attrs = team.bcast(attrs)
    names = str(attrs.get("names", ""))
    if names.split() != store.names or list(attrs.get("shape", [])) != [g.nx, g.ny, g.nz]:
        raise InputError(f"{path}: the checkpoint holds fields {names.split()} on a {attrs.get('shape')} grid, "
                         f"the deck asks for {store.names} on {[g.nx, g.ny, g.nz]}; remove it or fix the deck")
    kw = dict(dist=(pgas.BLOCKED, pgas.BLOCKED, pgas.NONE), team=team, grid=(*store.dims, 1))
    for name, arr in store.arrays.items():
        a = pgas.load_hdf5(path, name, **kw)
        arr.local[...] = arr.device.xp.asarray(a.local) if arr.device.is_gpu else a.local
        a.free()
    model.update_halos()
    model.t = model.ctx.t = float(attrs["t"])
    model.nstep = int(attrs["nstep"])
    model.dt_last = float(attrs["dt_last"])
    model.k_restart = float(attrs["k_max"])
    return attrs


class CrossSections:
    """Horizontal and vertical slices of some fields, gathered to rank 0 at each sample.

    Parameters
    ----------
    store : FieldStore
        Where the fields live (for the grid and team).
    names : sequence of str
        Fields (or diagnostics: looked up in ``ctx.diag`` when not a field) to slice.
    levels : sequence of int
        ``k`` of the x-y sections.
    j : int or "cloudiest"
        The global ``y`` index of the x-z section, or ``"cloudiest"``: at each sample the row with
        the most liquid water (``diag['ql']``; row ``ny // 2`` while there is none), so the
        section cuts through clouds.
    """

    def __init__(self, store, names, levels, j="cloudiest"):
        self.team, self.grid = store.team, store.grid
        self.names, self.levels = list(names), [int(k) for k in levels]
        self.cloudiest = j == "cloudiest"
        self.j = self.grid.ny // 2 if self.cloudiest else int(j)
        self.rows: list[int] = []
        self.times: list[float] = []
        self.xy: dict = {n: [] for n in self.names}
        self.xz: dict = {n: [] for n in self.names}

    def sample(self, ctx, t: float) -> None:
        """Take the slices now. Collective (a gather; an allreduce for the cloudiest row)."""
        g, h = ctx.grid, ctx.h
        I, J = g.interior
        if self.cloudiest and ctx.diag.get("ql") is not None:
            from mpi4py import MPI
            rows = np.zeros(g.ny)
            rows[g.j0:g.j0 + g.nyl] = to_host(ctx.xp.sum(ctx.diag["ql"][I, J, ...], axis=(0, 2)))
            self.team.Allreduce(MPI.IN_PLACE, rows, op=MPI.SUM)
            self.j = int(np.argmax(rows)) if rows.max() > 0 else g.ny // 2
        mine_xy, mine_xz = {}, {}
        for n in self.names:
            a = ctx.fields.get(n)
            if a is None:
                a = ctx.diag.get(n)
            if a is None:
                continue
            host = to_host(a)
            mine_xy[n] = host[I, J][:, :, [min(k, host.shape[2] - 1) for k in self.levels]]
            if g.j0 <= self.j < g.j0 + g.nyl:
                mine_xz[n] = host[I, h + self.j - g.j0, :]
        got = self.team.gather((g.i0, g.j0, mine_xy, mine_xz))
        if self.team.rank != 0:
            return
        self.times.append(float(t))
        self.rows.append(self.j)
        for n in self.names:
            parts = [(i0, j0, xy[n], xz.get(n)) for i0, j0, xy, xz in got if n in xy]
            if not parts:
                continue
            nk = parts[0][2].shape[2]
            full = np.zeros((g.nx, g.ny, nk))
            levels = max(p[3].shape[1] for p in parts if p[3] is not None)
            xzf = np.zeros((g.nx, levels))
            for i0, j0, xy, xz in parts:
                full[i0:i0 + xy.shape[0], j0:j0 + xy.shape[1]] = xy
                if xz is not None:
                    xzf[i0:i0 + xz.shape[0], :xz.shape[1]] = xz
            self.xy[n].append(full)
            self.xz[n].append(xzf)

    def write(self, path) -> None:
        """Write the sampled sections on rank 0, atomically: ``crosssection/xy/<name>`` (time, x, y,
        level) and ``crosssection/xz/<name>`` (time, x, z at the cell centres; ``w`` interpolated
        is not attempted: its lowest ``nz`` faces), with ``time``, ``x``, ``y``/``z`` and ``levels``
        beside them. Collective (a barrier)."""
        if self.team.rank == 0 and self.times:
            import h5py
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.part-{os.getpid()}")
            g = self.grid
            with h5py.File(tmp, "w") as f:
                for plane in ("xy", "xz"):
                    f[f"crosssection/{plane}/time"] = np.array(self.times)
                    f[f"crosssection/{plane}/x"] = (np.arange(g.nx) + 0.5) * g.dx
                f["crosssection/xy/y"] = (np.arange(g.ny) + 0.5) * g.dy
                f["crosssection/xy/levels"] = np.array(self.levels)
                f["crosssection/xy/z"] = np.asarray(g.zf)[[min(k, g.nz - 1) for k in self.levels]]
                f["crosssection/xz/z"] = np.asarray(g.zf)
                f["crosssection/xz/y"] = (np.array(self.rows) + 0.5) * g.dy     # per sample
                for n in self.names:
                    if self.xy[n]:
                        f[f"crosssection/xy/{n}"] = np.stack(self.xy[n])
                        f[f"crosssection/xz/{n}"] = np.stack(self.xz[n])[:, :, :g.nz]
            os.replace(tmp, path)
        self.team.barrier()
