"""Explicit stencil time stepping on distributed 3-D arrays, with deep (communication-avoiding) halos.

One step of an explicit scheme for the heat equation (forward Euler) or a Jacobi sweep is a 7- or
27-point stencil applied to the whole field. On a ``pgas.DistArray`` distributed ``BLOCKED`` along
all three dimensions over any process grid, each rank needs a one-cell halo from its neighbours
before each step.

Deep halo: with depth ``k`` the halo is ``k`` cells wide (radius 1 times ``k``) and is exchanged
once every ``k`` steps with a single ``halo.update()``. Between exchanges each step updates a region
that reaches into the halo and shrinks by one cell per step, so ghost cells are recomputed
redundantly instead of being communicated: ``k`` times fewer (larger) messages, some extra
arithmetic. Each cell's value is computed by the same expression from the same inputs as with
``k = 1``, so the results are identical. Cells outside the global domain along a Dirichlet
(fixed-value) boundary are never written. For ``k > 1`` (and always for the 27-point stencil) edge
and corner ghosts are exchanged too: the shrinking region passes through them.

Temporal blocking (backend ``"cpu"`` with numba): with ``block = T > 1`` the steps between two
exchanges are taken ``T`` at a time by :func:`hpcsuite.accel.temporal.stencil7_steps` (or
``stencil27_steps``): a wavefront over trapezoid tiles that keeps the intermediate steps in each
core's cache, so the field crosses the memory bus once per ``T`` steps instead of once per step.
One exchange of depth ``k`` feeds ``k`` steps, taken in cache-blocked passes of ``T <= k`` steps.
Every cell is still computed by the same expression from the same inputs: identical results.
Blocking pays when the local block is much larger than the caches and a single sweep waits on
memory; on small blocks (two copies in the caches) or when the sweep is compute-bound it costs the
redundant trapezoid cells (``(T - 1) / tile`` per side). ``block="auto"`` (the default) times
``T`` in {1, depth} and the tile widths in :data:`TILE_CANDIDATES` on the first :meth:`run` and
keeps the fastest; :attr:`StencilSolver.stats` reports the choice (``block``, ``tile``, ``tuning``).
On the GPU ``block = T`` runs the CUDA counterpart (2.5-D blocking in shared memory); ``"auto"``
keeps single sweeps there (not yet timed on a GPU). ``"strict"`` takes single sweeps.

Data stays where the backend puts it (the OpenACC ``data`` region model): backend ``"cpu"`` runs
numba kernels on the DistArray's NumPy storage, ``"gpu"`` creates the DistArray with ``device="gpu"``
and runs CUDA kernels on it, ``"strict"`` keeps a device copy of each block as ``array_api_strict``
arrays and runs the portable kernels there. The stepping code is the same for all three; only the
halo exchange of ``"strict"`` stages the border and ghost slabs through the (host) DistArray, as the
GPU DistArray does internally without CUDA-aware MPI. Inside the stepping loop no array crosses
between host and device (counted with :meth:`Backend.data_region`, see :class:`StencilStats`).

Examples
--------
With ``mpiexec -n 4``::

    >>> from hpcsuite.solvers import StencilSolver, heat_coeffs
    >>> s = StencilSolver((64, 64, 64), "7", heat_coeffs(1.0, 1e-5, (1/64,) * 3), depth="auto")
    >>> u = s.run(lambda sl: np.random.default_rng(0).random((64,) * 3)[sl], steps=100)
    >>> s.stats.depth, s.stats.exchanges          # e.g. (4, 25)
    >>> field = u.to_numpy(); u.free()
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Callable

import numpy as np
from mpi4py import MPI

from .. import pgas
from ..accel import Backend, get_backend, kernels, temporal
from ..pgas import BLOCKED, Pattern
from ..runtime import Team, Timers, gpu_status, optional

__all__ = ["StencilSolver", "StencilStats", "heat_coeffs", "KINDS", "DEPTH_CANDIDATES", "TILE_CANDIDATES"]

KINDS = ("7", "27")
#: Depths tried by ``depth="auto"`` (those up to the smallest local extent).
DEPTH_CANDIDATES = (1, 2, 4, 8)
#: Tile widths (cells along j) tried by ``block="auto"`` for the temporally blocked kernels.
TILE_CANDIDATES = (16, 32, 64)


def heat_coeffs(alpha: float, dt: float, spacing) -> tuple[float, float, float, float]:
    """``(c0, cx, cy, cz)`` of one forward-Euler step of ``du/dt = alpha * laplacian(u)`` with the
    7-point Laplacian on a grid of spacings ``(hx, hy, hz)``: ``c_d = alpha dt / h_d^2``,
    ``c0 = 1 - 2 (cx + cy + cz)``. Stable when ``c0 >= 0``. Local."""
    c = [alpha * dt / float(h) ** 2 for h in spacing]
    if len(c) != 3:
        raise ValueError(f"spacing must have 3 entries, got {spacing!r}")
    return (1.0 - 2.0 * sum(c), *c)


@dataclass
class StencilStats:
    """What the last :meth:`StencilSolver.run` did on this rank.

    Attributes
    ----------
    depth : int
        Halo depth ``k`` used (chosen by timing when ``depth="auto"``).
    block : int
        Steps per cache-blocked pass (temporal blocking; 1 = single sweeps), chosen by timing when
        ``block="auto"``.
    tile : int or None
        Tile width along j of the blocked kernel (``None`` when ``block`` is 1).
    steps, exchanges : int
        Time steps taken and halo exchanges made (``ceil(steps / depth)``).
    messages : int
        Point-to-point messages this rank sent in those exchanges (``halo.messages`` per update;
        a neighbour that is this rank itself is served by a copy, not a message).
    loop_transfers : int
        Host<->device transfers made through the backend inside the stepping loop, between the
        exchanges (0: the data stays on the device).
    halo_transfers, halo_transfer_bytes : int
        Transfers (and bytes) made through the backend by the halo exchanges (``"strict"`` stages
        only the border and ghost slabs; ``"cpu"`` none; ``"gpu"`` stages inside the DistArray).
    tuning : dict
        ``{(depth, block, tile): seconds per step}`` (slowest rank) measured by ``depth="auto"``
        or ``block="auto"``; empty when nothing was timed.
    """

    depth: int = 1
    block: int = 1
    tile: int | None = None
    steps: int = 0
    exchanges: int = 0
    messages: int = 0
    loop_transfers: int = 0
    halo_transfers: int = 0
    halo_transfer_bytes: int = 0
    tuning: dict = field(default_factory=dict)


class StencilSolver:
    """Explicit 7- or 27-point stencil time stepping with deep halos on a 3-D ``DistArray``.

    Creating a solver is local (it validates everything, so that bad arguments raise the same
    ``ValueError`` on every rank before any communication); :meth:`run` is collective.

    Parameters
    ----------
    shape : tuple of 3 int
        Global number of cells.
    kind : {"7", "27"}
        Stencil: ``out = c0 u + cx (u[i+1] + u[i-1]) + cy (...) + cz (...)`` or
        ``out = w0 u + wf sum(faces) + we sum(edges) + wc sum(corners)``
        (:func:`hpcsuite.accel.kernels.stencil7` / ``stencil27``).
    coeffs : 4 floats
        ``(c0, cx, cy, cz)`` for ``"7"`` (see :func:`heat_coeffs`), ``(w0, wf, we, wc)`` for ``"27"``.
    team : Team, optional
        The ranks sharing the field (default: the world).
    grid : 3 ints or ProcessGrid, optional
        Process-grid extents (0 = choose, as in ``MPI_Dims_create``); any grid works.
    boundary : "periodic", float, or 3 of them
        Per dimension: periodic, or a Dirichlet value held by the cells just outside the domain.
    depth : int >= 1 or "auto"
        Halo depth ``k`` (exchange every ``k`` steps). At most the smallest local extent (the halo
        must come from the next rank alone). ``"auto"`` times a few steps for each ``k`` in
        :data:`DEPTH_CANDIDATES` that fits, on the first :meth:`run`, and keeps the fastest.
    backend : {"cpu", "gpu", "strict"} or Backend
        Where the field lives and which kernels run (numba, CUDA, portable array API). Without
        numba (the ``fast`` extra) ``"cpu"`` runs the portable kernels on NumPy: same results.
    dtype : float32 or float64
    threads : int, optional
        numba threads per rank (backend ``"cpu"``); default: this rank's share of the node's cores
        (:func:`hpcsuite.accel.kernels.cpu_threads`).
    impl : {"numba", "portable", "cupy"}, optional
        Override the kernel implementation (e.g. ``"portable"`` on the CPU, for comparisons).
    block : int >= 1 or "auto"
        Temporal blocking: steps per cache-blocked pass (module docstring); at most ``depth``
        (an int larger than the chosen depth is cut to it). The numba and CUDA kernels block (CUDA:
        2.5-D blocking in shared memory, only when asked for with an int); the portable ones take
        single sweeps. ``"auto"``: 1 or the depth, chosen by timing (numba only; elsewhere 1).
    tile : int >= 1, optional
        Tile width along j for the blocked kernel; default: chosen by timing among
        :data:`TILE_CANDIDATES` when ``block`` is ``"auto"``, else
        :data:`hpcsuite.accel.temporal.DEFAULT_TILE`.
    tune_steps : int
        Steps timed per candidate by ``depth="auto"`` / ``block="auto"`` (after a warm-up cycle).

    Raises
    ------
    ValueError
        On every rank, before communicating: bad shape, kind, coefficients, boundary, depth (too
        large for the smallest local extent), process grid, dtype, backend or threads.
    """

    def __init__(self, shape, kind="7", coeffs=(0.4, 0.1, 0.1, 0.1), *, team: Team | None = None,
                 grid=None, boundary="periodic", depth: int | str = 1, backend: str | Backend = "cpu",
                 dtype=np.float64, threads: int | None = None, impl: str | None = None, tune_steps: int = 8,
                 block: int | str = "auto", tile: int | None = None):
        self.shape = _shape3(shape)
        self.kind = _kind(kind)
        self.coeffs = _four_reals(coeffs, self.kind)
        self.team = team if team is not None else Team.world()
        if not isinstance(self.team, Team):
            raise ValueError(f"team must be a Team, got {team!r}")
        self.boundary = _boundaries(boundary)
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"dtype must be float32 or float64, got {dtype!r}") from None
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype}")
        self._backend_name = _backend_name(backend)
        self._backend = backend if isinstance(backend, Backend) else None
        if impl is not None and impl not in kernels.IMPLS:
            raise ValueError(f"impl must be one of {', '.join(map(repr, kernels.IMPLS))}, got {impl!r}")
        if impl == "numba" and not kernels.HAVE_NUMBA:
            optional.require("numba", "StencilSolver(impl='numba')")        # InputError naming the extra
        self.impl = impl
        if threads is not None and (not isinstance(threads, Integral) or isinstance(threads, bool) or threads < 1):
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        self.threads = threads
        if not isinstance(tune_steps, Integral) or isinstance(tune_steps, bool) or tune_steps < 1:
            raise ValueError(f"tune_steps must be a positive integer, got {tune_steps!r}")
        self.tune_steps = int(tune_steps)
        # the layout every field of this solver uses (local: no communication)
        self.pattern = Pattern(self.shape, (BLOCKED,) * 3, team=self.team, grid=grid)
        self.grid = self.pattern.grid
        self.min_extent = min(m.size(m.p - 1) for m in self.pattern.maps)   # BLOCKED: last is smallest
        if self.min_extent < 1:
            raise ValueError(f"shape {self.shape} has fewer cells than the {'x'.join(map(str, self.grid))} "
                             f"process grid has ranks along some dimension")
        self.depth = _depth(depth, self.min_extent, self.grid)
        self.block = _positive_or_auto(block, "block")
        if tile is not None:
            _positive_or_auto(tile, "tile", auto=False)
        self.tile = tile
        self.stats = StencilStats()
        self._node = None            # (rank on node, ranks on node), found by the first run
        self._warm = False

    # ------------------------------------------------------------------ geometry (local)
    @property
    def local_slices(self) -> tuple[slice, slice, slice]:
        """Global slices of this rank's block. Local."""
        c = self.pattern.unit_coords(self.team.rank)
        return tuple(slice(m.start(ci), m.start(ci) + m.size(ci)) for m, ci in zip(self.pattern.maps, c))

    @property
    def backend(self) -> Backend:
        """The backend (made on the first :meth:`run`, where the rank on its node is known)."""
        if self._backend is None:
            # the shared Backend object (so callers see its data regions); GPUs are spread by rank on node
            local_rank = self._node[0] if self._node and self._backend_name == "gpu" else 0
            self._backend = get_backend(self._backend_name, local_rank)
        return self._backend

    # ------------------------------------------------------------------ the solver (collective)
    def run(self, u0, steps: int, progress=None, timers: Timers | None = None) -> "pgas.DistArray":
        """Advance ``u0`` by ``steps`` steps and return the final field. Collective.

        Parameters
        ----------
        u0 : DistArray, NumPy array or callable
            The initial field: a DistArray of shape ``shape`` (any distribution; it is not
            modified), the global array (the same on every rank; each takes its block), or
            ``f(slices) -> block`` giving this rank's block for its global slices.
        steps : int >= 0
        progress : object with ``update(n)``, optional
            Called after each exchange cycle with the number of steps it advanced (a
            :class:`~hpcsuite.runtime.Progress` works).
        timers : Timers, optional
            Receives ``"halo"``, ``"stencil"`` (and ``"tune"`` for ``depth="auto"``) times.

        Returns
        -------
        DistArray
            ``BLOCKED`` over this solver's grid with a ``depth``-wide halo, on the backend's
            device (``"gpu"``: CuPy local blocks; ``"strict"``: copied back to the host). The caller
            frees it. :attr:`stats` describes the run.
        """
        if not isinstance(steps, Integral) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
        _check_initial(u0, self.shape)
        self._prepare()
        be = self.backend
        timers = timers if timers is not None else Timers(sync=be.synchronize if be.is_gpu else None)
        tuning = {}
        if self.depth == "auto" or self.block == "auto":
            with timers("tune"):
                (self.depth, self.block, self.tile), tuning = self._tune(u0)
        k = self.depth
        blk, tile = self._blocking(k)
        self.stats = StencilStats(depth=k, block=blk, tile=tile, tuning=tuning)
        cur, nxt = self._setup(u0, k)
        cur, nxt = self._advance(cur, nxt, steps, k, self.stats, timers, progress, blk, tile)
        result = cur.finish()
        nxt.free()
        return result

    def _prepare(self) -> None:
        """First run: rank on node (GPU choice, CPU thread share). Collective once."""
        if self._node is None:
            node = self.team.node_team()         # split once per team, kept with it
            self._node = (node.rank, node.size)
        be = self.backend
        if be.is_gpu:
            # another get_device("gpu") may have made a different GPU current since
            be.runtime_device.xp.cuda.Device(be.runtime_device.device_id).use()
        if self._backend_name == "cpu" and not kernels.HAVE_NUMBA and self.impl is None:
            optional.note_missing("numba", "StencilSolver", "the portable NumPy kernels run: same results, "
                                  "slower", self.team.rank)
        if self._kernel_impl() == "numba":
            kernels.set_cpu_threads(self.threads or kernels.cpu_threads(self._node[1]))
            if not self._warm:
                # load the compiled kernel (from numba's disk cache, or compile it) now, not in the
                # first timed step
                tiny = np.zeros((3, 3, 3), dtype=self.dtype)
                self._kernel()(tiny, np.zeros_like(tiny), None)
                if self.block == "auto" or self.block > 1:
                    self._blocked_kernel(1)(tiny, np.zeros_like(tiny), [((1, 2),) * 3] * 2)
                self._warm = True

    def _kernel_impl(self) -> str:
        cpu = "numba" if kernels.HAVE_NUMBA else "portable"
        return self.impl or {"cpu": cpu, "gpu": "cupy", "strict": "portable"}[self._backend_name]

    def _setup(self, u0, k: int) -> tuple["_Field", "_Field"]:
        """Two fields with a ``k``-wide halo, the first holding ``u0``. Collective."""
        be = self.backend
        kw = dict(dtype=self.dtype, dist=(BLOCKED,) * 3, team=self.team, grid=self.grid, halo=k,
                  boundary=self.boundary, corners=(k > 1 or self.kind == "27"),
                  device=be.runtime_device if be.is_gpu else "cpu")
        a = pgas.zeros(self.shape, **kw)
        _fill(a, u0, be)
        b = pgas.zeros(self.shape, **kw)
        return _Field(a, be, upload=True), _Field(b, be, upload=False)

    def _blocking(self, k: int) -> tuple[int, int | None]:
        """``(block, tile)`` actually used at depth ``k`` (block 1 and no tile: single sweeps)."""
        blk = self.block if isinstance(self.block, int) else 1
        blk = min(blk, k) if self._kernel_impl() in ("numba", "cupy") else 1
        if blk == 1:
            return 1, None
        return blk, (None if self._kernel_impl() == "cupy" else self.tile or temporal.DEFAULT_TILE)

    def _advance(self, cur, nxt, steps: int, k: int, stats: StencilStats, timers=None, progress=None,
                 block: int = 1, tile: int | None = None):
        """``steps`` steps in cycles of one exchange and up to ``k`` steps, taken as single sweeps
        or in blocked passes of up to ``block`` steps. Collective. Returns the fields swapped so
        that the first holds the latest values."""
        be = self.backend
        kernel = self._kernel()
        blocked = self._blocked_kernel(tile) if block > 1 else None
        regions = _Regions(self, k)
        dirichlet = any(isinstance(b, float) for b in self.boundary)
        done, first = 0, True
        while done < steps:
            m = min(k, steps - done)
            with _timer(timers, "halo"), be.data_region() as moved:
                cur.exchange()
            stats.exchanges += 1
            stats.messages += cur.dist.halo.messages
            stats.halo_transfers += moved.transfers
            stats.halo_transfer_bytes += moved.bytes
            if first and dirichlet:
                # the second field must hold the fixed boundary values too: they are read, never written
                nxt.dev[...] = cur.dev
            first = False
            with _timer(timers, "stencil"), be.data_region() as moved:
                s = 0
                while s < m:
                    n = min(block, m - s)
                    if n == 1:
                        kernel(cur.dev, nxt.dev, regions.step(m, s))
                    else:
                        blocked(cur.dev, nxt.dev, [regions.step(m, s + t) for t in range(n)])
                    cur, nxt = nxt, cur
                    s += n
            stats.loop_transfers += moved.transfers
            done += m
            stats.steps += m
            if progress is not None:
                progress.update(m)
        return cur, nxt

    def _kernel(self) -> Callable:
        impl, be, c = self._kernel_impl(), self.backend, self.coeffs
        if self.kind == "7":
            return lambda u, out, reg: kernels.stencil7(u, out, *c, reg, backend=be, impl=impl)
        return lambda u, out, reg: kernels.stencil27(u, out, c, reg, backend=be, impl=impl)

    def _blocked_kernel(self, tile: int) -> Callable:
        c, impl, be = self.coeffs, self._kernel_impl(), self.backend
        if self.kind == "7":
            return lambda u, out, regs: temporal.stencil7_steps(u, out, *c, regs, tile=tile, backend=be, impl=impl)
        return lambda u, out, regs: temporal.stencil27_steps(u, out, c, regs, tile=tile, backend=be, impl=impl)

    def _candidates(self, widest: int) -> list[tuple[int, int, int | None]]:
        """``(depth, block, tile)`` triples that ``"auto"`` times (the same on every rank), tiles
        no wider than ``widest``."""
        depths = [k for k in DEPTH_CANDIDATES if k <= self.min_extent] if self.depth == "auto" else [self.depth]
        numba_ok = self._kernel_impl() == "numba"
        out = []
        for k in depths:
            if self.block == "auto":
                blocks = (1, k) if k > 1 and numba_ok else (1,)
            else:
                blocks = (min(self.block, k) if numba_ok or self._kernel_impl() == "cupy" else 1,)
            for b in blocks:
                if b == 1:
                    out.append((k, 1, None))
                    continue
                tiles = [self.tile] if self.tile else sorted({min(t, widest) for t in TILE_CANDIDATES})
                out.extend((k, b, t) for t in tiles)
        return out

    def _widest_tile(self) -> int:
        """The widest tile that still gives every thread one tile of the smallest block (the most
        threads of any rank: the same on every rank). Collective."""
        nj = self.pattern.maps[1].size(self.pattern.maps[1].p - 1)
        threads = self.threads or kernels.cpu_threads(self._node[1] if self._node else 1)
        threads = self.team.comm.allreduce(int(threads), op=MPI.MAX)
        return max(1, -(-nj // max(1, threads)))

    def _tune(self, u0) -> tuple[tuple[int, int, int | None], dict]:
        """The fastest ``(depth, block, tile)`` among the candidates, by the slowest rank's time.
        Collective."""
        cands = self._candidates(self._widest_tile())

        def chosen(k, b, t):
            return k, (b if self.block == "auto" else self.block), (t if self.tile is None else self.tile)
        if len(cands) == 1:
            return chosen(*cands[0]), {}
        seconds = np.zeros(len(cands))
        be = self.backend
        fields = {}
        for n, (k, b, t) in enumerate(cands):
            if k not in fields:
                for f in fields.values():
                    f[0].free()
                    f[1].free()
                fields = {k: self._setup(u0, k)}
            cur, nxt = fields[k]
            scratch = StencilStats()
            cur, nxt = self._advance(cur, nxt, k, k, scratch, block=b, tile=t)      # warm-up: JIT, first touch
            self.team.barrier()
            t0 = time.perf_counter()
            cur, nxt = self._advance(cur, nxt, self.tune_steps, k, scratch, block=b, tile=t)
            be.synchronize()
            seconds[n] = time.perf_counter() - t0
            fields[k] = (cur, nxt)
        for f in fields.values():
            f[0].free()
            f[1].free()
        # the same numbers on every rank, hence the same choice
        self.team.Allreduce(MPI.IN_PLACE, seconds, op=MPI.MAX)
        per_step = {c: float(t) / self.tune_steps for c, t in zip(cands, seconds)}
        return chosen(*cands[int(np.argmin(seconds))]), per_step


# ---------------------------------------------------------------------- fields and regions
class _Field:
    """One of the two ping-pong fields: a DistArray and the backend array the kernels run on.

    For ``"cpu"`` and ``"gpu"`` that array is the DistArray's padded local block itself. For
    ``"strict"`` it is a device copy; :meth:`exchange` moves only the border slabs to the host
    DistArray and the ghost slabs back.
    """

    def __init__(self, dist, be: Backend, upload: bool):
        self.dist, self.be = dist, be
        self.mirror = be.name == "strict"
        host = dist.local_with_halo
        if not self.mirror:
            self.dev = host
            return
        self.dev = be.zeros(host.shape, dtype=_xp_dtype(be, dist.dtype))
        if upload:
            self.dev[...] = be.asarray(host)
        self._border, self._ghost = _slabs(dist.local_shape, dist.halo_width[0])

    def exchange(self) -> None:
        """Fill the ghost cells (one ``halo.update()``). Collective."""
        if not self.mirror:
            self.dist.halo.update()
            return
        host = self.dist.local_with_halo
        for sl in self._border:
            host[sl] = self.be.to_host(self.dev[sl])
        self.dist.halo.update()
        for sl in self._ghost:
            self.dev[sl] = self.be.asarray(host[sl])

    def finish(self):
        """The DistArray holding this field's values (a device copy goes back to the host). Local."""
        if self.mirror:
            k = self.dist.halo_width[0]
            inner = tuple(slice(k, k + n) for n in self.dist.local_shape)
            self.dist.local[...] = self.be.to_host(self.dev[inner])
        return self.dist

    def free(self) -> None:
        self.dist.free()
        self.dev = None


def _slabs(n, k):
    """Border slabs (the outer ``k`` layers of the owned block, one per face) and ghost slabs (the
    halo shell, split into six disjoint pieces) of a block of extents ``n`` padded by ``k``."""
    inner = [slice(k, k + x) for x in n]
    full = [slice(0, x + 2 * k) for x in n]
    border, ghost = [], []
    for d in range(3):
        for lo, hi, glo, ghi in ((k, 2 * k, 0, k), (n[d], n[d] + k, n[d] + k, n[d] + 2 * k)):
            b = list(inner)
            b[d] = slice(lo, hi)
            border.append(tuple(b))
            # ghost piece d: owned range along the dimensions whose pieces came before, the full
            # padded range along the later ones, so the six pieces tile the shell without overlap
            g = [inner[e] if e < d else full[e] for e in range(3)]
            g[d] = slice(glo, ghi)
            ghost.append(tuple(g))
    return border, ghost


class _Regions:
    """The region each step of an exchange cycle updates, in padded local indices.

    With halo width ``k`` and ``m <= k`` steps until the next exchange, step ``s`` (0-based) must be
    valid up to ``k - (m - 1 - s)`` cells from the padded edge on each side (so the last step covers
    the owned block and each step reads only cells the previous one wrote), unless that side is a
    Dirichlet boundary of the global domain: there the region stops at the domain's edge, so the
    fixed values outside are never overwritten.
    """

    def __init__(self, solver: StencilSolver, k: int):
        p = solver.pattern
        coords = p.unit_coords(solver.team.rank)
        self.k = k
        self.n = p.local_shape(solver.team.rank)
        self.clip_lo = [isinstance(b, float) and c == 0 for b, c in zip(solver.boundary, coords)]
        self.clip_hi = [isinstance(b, float) and c == g - 1 for b, c, g in zip(solver.boundary, coords, p.grid)]
        self._cache = {}

    def step(self, m: int, s: int):
        reg = self._cache.get((m, s))
        if reg is None:
            k, margin = self.k, self.k - (m - 1 - s)
            reg = tuple((k if lo else margin, k + n if hi else n + 2 * k - margin)
                        for n, lo, hi in zip(self.n, self.clip_lo, self.clip_hi))
            self._cache[(m, s)] = reg
        return reg


# ---------------------------------------------------------------------- helpers
class _NoTimer:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _timer(timers, name):
    return timers(name) if timers is not None else _NoTimer()


def _xp_dtype(be: Backend, dtype: np.dtype):
    return getattr(be.xp, dtype.name)


def _fill(a, u0, be: Backend) -> None:
    """Put the initial field into DistArray ``a``. Collective when ``u0`` is a DistArray."""
    if isinstance(u0, pgas.DistArray):
        pgas.copy(u0, a)
        return
    block = u0(a.local_slices) if callable(u0) else u0[a.local_slices]
    if tuple(block.shape) != tuple(a.local_shape):
        raise ValueError(f"the initial block for slices {a.local_slices} has shape {tuple(block.shape)}, "
                         f"expected {a.local_shape}")
    a.local[...] = be.asarray(block, dtype=a.dtype) if be.is_gpu else np.asarray(block, dtype=a.dtype)


def _check_initial(u0, shape) -> None:
    if isinstance(u0, pgas.DistArray) or isinstance(u0, np.ndarray):
        if tuple(u0.shape) != shape:
            raise ValueError(f"the initial field has shape {tuple(u0.shape)}, the solver's shape is {shape}")
        return
    if not callable(u0):
        raise ValueError(f"u0 must be a DistArray, a NumPy array or a callable f(slices) -> block, "
                         f"got {type(u0).__name__}")


def _shape3(shape) -> tuple[int, int, int]:
    try:
        s = tuple(int(x) for x in shape)
        ok = len(s) == 3 and all(x >= 1 for x in s) and all(
            isinstance(x, Integral) and not isinstance(x, bool) for x in shape)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"shape must be 3 positive integers, got {shape!r}")
    return s


def _kind(kind) -> str:
    k = str(kind) if isinstance(kind, (str, int)) and not isinstance(kind, bool) else None
    if k not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    return k


def _four_reals(coeffs, kind: str) -> tuple[float, ...]:
    what = "(c0, cx, cy, cz)" if kind == "7" else "(w0, wface, wedge, wcorner)"
    try:
        c = tuple(coeffs)
        ok = len(c) == 4 and all(isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(x) for x in c)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"coeffs for the {kind}-point stencil must be 4 finite numbers {what}, got {coeffs!r}")
    return tuple(float(x) for x in c)


def _boundaries(boundary) -> tuple:
    one = lambda b: b == "periodic" if isinstance(b, str) else (  # noqa: E731
        isinstance(b, Real) and not isinstance(b, bool) and math.isfinite(b))
    items = (boundary,) * 3 if isinstance(boundary, (str, Real)) and not isinstance(boundary, bool) else boundary
    try:
        items = tuple(items)
    except TypeError:
        items = ()
    if len(items) != 3 or not all(one(b) for b in items):
        raise ValueError(f"boundary must be 'periodic' or a finite number (a Dirichlet value), or 3 of "
                         f"them, got {boundary!r}")
    return tuple(b if isinstance(b, str) else float(b) for b in items)


def _backend_name(backend) -> str:
    if isinstance(backend, Backend):
        return backend.name
    if backend not in ("cpu", "gpu", "strict"):
        raise ValueError(f"backend must be 'cpu', 'gpu' or 'strict', got {backend!r}")
    if backend == "gpu":
        ok, why = gpu_status()
        if not ok:
            raise ValueError(f"backend 'gpu' requested but no GPU is usable: {why}")
    return backend


def _positive_or_auto(value, name: str, auto: bool = True) -> int | str:
    if auto and value == "auto":
        return "auto"
    if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or ' + repr('auto') if auto else ''}, got {value!r}")
    return int(value)


def _depth(depth, min_extent: int, grid) -> int | str:
    if depth == "auto":
        return "auto"
    if not isinstance(depth, Integral) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"depth must be a positive integer or 'auto', got {depth!r}")
    if depth > min_extent:
        raise ValueError(f"depth {depth} is larger than the smallest local extent {min_extent} on the "
                         f"{'x'.join(map(str, grid))} process grid: the halo must come from the next "
                         f"rank alone; use depth <= {min_extent}, 'auto' or fewer ranks")
    return int(depth)
