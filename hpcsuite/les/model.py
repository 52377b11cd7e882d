"""The model loop: one RK3 step = three substeps, each calling the terms in DALES order.

Per substep: zero the tendencies, call every term (surface -> thermodynamics -> advection ->
subgrid -> Coriolis/large-scale forcing -> pressure projection), update the fields from the state
at the start of the step, and exchange the halos of every field (all exchanges in flight at once).

Everything in a step stays on the device (NumPy or CuPy arrays); the only host traffic is the
three-number reduction that picks the step (and what the halo exchange stages through the host
on GPUs without CUDA-aware MPI). On one GPU the three stages can run as one CUDA graph from the
second step on (``les.graphs``; ``graphs=True`` or ``$HPCSUITE_LES_GRAPHS=1``; automatic once
confirmed on a GPU): the step's host traffic is then that reduction and one copy of the stage
steps to the device.
"""
from __future__ import annotations

import contextlib
import math

from ..runtime import Timers, optional
from . import fused, gpukernels, ops
from .graphs import StepGraph, choose_graphs, warn_fallback
from .state import zeros_in_one_buffer
from .timestep import RK3, RK3_TIMES, BlowUp, TimeStepper, local_values, locate_blowup, whole_max

__all__ = ["Model", "PARTS", "build"]

#: row length of the 2-D view of the start-of-step buffer that the blow-up check reduces
PROBE_ROW = 1024


#: Timer part of each term class (the rest are charged to their lower-cased class name).
PARTS = {"Advection": "advection", "PressureProjection": "pressure", "SubgridTKE": "subgrid",
         "Smagorinsky": "subgrid", "ConstantViscosity": "subgrid"}


def _part(term) -> str:
    return getattr(term, "part", None) or PARTS.get(type(term).__name__, type(term).__name__.lower())


class Model:
    """Fields, terms and time.

    Parameters
    ----------
    store : FieldStore
        The distributed prognostic fields.
    ctx : StepContext
        The context the terms see (its ``fields`` are ``store``'s local blocks).
    terms : list of callables
        ``term(ctx)`` in the order they run each substep; the pressure projection last.
    stepper : TimeStepper
        Picks ``dt``.
    k_const : float
        A constant diffusivity that limits the step (``ConstantViscosity``); eddy diffusivities in
        ``ctx.diag['ekm'/'ekh']`` are added automatically.
    timers : Timers, optional
        Time per part (advection, subgrid, pressure, halos, ...).
    floors : dict, optional
        ``{name: minimum}`` applied after every substep (DALES keeps ``e12 >= e12min`` so).
    graphs : bool, str or None, optional
        Run the stages of a step as one CUDA graph (:mod:`graphs`): True / ``"on"`` wherever
        they apply (one rank on a CuPy device), False / ``"off"``, ``"auto"``; None (default):
        ``$HPCSUITE_LES_GRAPHS``, else automatic. ``graphs_reason`` says what was chosen and why.
    """

    def __init__(self, store, ctx, terms, stepper: TimeStepper, k_const: float = 0.0, timers=None,
                 floors: dict | None = None, graphs=None):
        self.floors = {n: float(v) for n, v in (floors or {}).items() if n in ctx.fields}
        self.store, self.ctx, self.terms, self.stepper = store, ctx, list(terms), stepper
        self.k_const = float(k_const)
        self.timers = timers if timers is not None else Timers()
        self.t, self.nstep = float(ctx.t), 0
        self.dt_last = 0.0
        self.k_restart: float | None = None     # global max diffusivity saved with a checkpoint
        # the fields at the start of a step, as views of one buffer: the blow-up check sums that
        # buffer (two reductions) instead of every field (two each); padded for a 2-D reduction
        self._start_all, self.start = zeros_in_one_buffer(ctx.xp, ctx.fields, pad_to=PROBE_ROW)
        ctx.start = self.start
        self._halos = None                       # the fields' HaloGroup (made when first needed)
        # on a GPU, saving the start of a step and each stage's update are one launch for all fields
        self._table = None
        arrays = (*ctx.fields.values(), *self.start.values(), *ctx.tend.values())
        if self._start_all is not None and "w" in ctx.fields and ops.is_selected("cuda") \
                and gpukernels.usable(*arrays, self._start_all):
            self._table = gpukernels.FieldTable(ctx.fields, self.start, ctx.tend, self._start_all, self.floors)
        on, self.graphs_reason = choose_graphs(graphs, ctx.team, ctx.xp)
        #: the step's CUDA graph (None: steps launch every kernel from here)
        self.graph = StepGraph(ctx.xp) if on else None
        self._eager_steps = 0                    # steps run without the graph (the first one warms up)
        self._capturing = False
        self.update_halos()

    # ------------------------------------------------------------------ pieces of a step
    def update_halos(self) -> None:
        """Exchange the halos of every field, all in flight at once. Collective."""
        from ..pgas import HaloGroup
        with self._timer("halos"):
            arrays = list(self.store.arrays.values())
            if self._halos is None or len(arrays) != len(self._halos.members) \
                    or any(h.array is not a for h, a in zip(self._halos.halos, arrays)):
                self._halos = HaloGroup(arrays)
            self._halos.update()

    def k_max(self) -> float:
        """This rank's largest diffusivity (constant, eddy, or the one saved at a restart). Local."""
        floor, parts = self._k_max_parts()
        return max(floor, max(float(p) for p in parts)) if parts else floor

    def _k_max_parts(self, floor_only: bool = False):
        """``(floor, device scalars)``: the largest diffusivity is the largest of them (with
        ``floor_only`` the scalars are left out: an empty list). Local."""
        xp, d = self.ctx.xp, self.ctx.diag
        eddy = [d[n] for n in ("ekm", "ekh") if n in d]
        if eddy:
            I, J = self.ctx.grid.interior
            return self.k_const, [] if floor_only else [whole_max(xp, e[I, J, ...]) for e in eddy]
        if self.k_restart is not None:
            return max(self.k_const, self.k_restart), []
        return self.k_const, []

    def global_k_max(self) -> float:
        """The largest diffusivity over all ranks (saved in checkpoints). Collective."""
        from mpi4py import MPI
        return float(self.ctx.team.allreduce(self.k_max(), op=MPI.MAX))

    def next_dt(self, cap: float = math.inf, probe=None, values=None) -> float:
        """The step to take now (at most ``cap``), after checking for a blow-up. Collective.

        ``probe``: an array holding every field's current values (see :func:`timestep.local_rates`).
        ``values``: this rank's rates already reduced on the device (:func:`timestep.local_values`).

        Raises
        ------
        BlowUp
            On every rank: a non-finite value, or the last step's Courant number above the limit.
        """
        ctx, st = self.ctx, self.stepper
        with self.timers("dt"):
            k_parts = self._k_max_parts(floor_only=values is not None)
            cr, dr, bad = st.rates(ctx, k_parts, probe, values=values)   # (one transfer to the host)
        used = cr * self.dt_last
        if bad or used > st.blowup_courant:
            raise BlowUp(locate_blowup(ctx, self.t, self.dt_last, st.blowup_courant, bad))
        dt = st.choose(cr, dr)
        if st.dt_fixed and cr * dt > st.blowup_courant:
            raise BlowUp(locate_blowup(ctx, self.t, dt, st.blowup_courant, False))
        return min(dt, cap)

    def step(self, cap: float = math.inf) -> float:
        """Advance one RK3 step (at most ``cap``); returns the step taken. Collective."""
        ctx, fields = self.ctx, self.ctx.fields
        table = self._table if self._table is not None and self._table.matches(fields, ctx.tend) else None
        probe = None if self._start_all is None else ctx.xp.reshape(self._start_all, (-1, PROBE_ROW))
        graph = self.graph is not None and self._eager_steps > 0      # (the first step warms up)
        values = self._graph_prelude(table, probe) if graph else None
        if values is None:
            self._save_start(table)
        dt = self.next_dt(cap, probe, values=values)
        t0 = self.t
        ctx.dt_full = dt
        dts = [RK3[stage] * dt for stage in range(3)]
        if graph and self.graph is not None:
            self._graph_step(t0, dt, dts, table)
        else:
            self._stages(t0, dt, dts, table)
            self._eager_steps += 1
        self.t = t0 + dt
        ctx.t = self.t
        self.dt_last = dt
        self.nstep += 1
        self.k_restart = None
        return dt

    def _save_start(self, table) -> None:
        """The fields at the start of the step into :attr:`start`. Local."""
        if table is not None:
            table.save_start()
        else:
            for n, a in self.ctx.fields.items():
                self.start[n][...] = a

    def _graph_prelude(self, table, probe):
        """The start-of-step copy and the time step's reductions as the prelude graph: the device
        vector of :func:`timestep.local_values`, or None after a failed capture (then nothing was
        done and the model steps without graphs). Local."""
        ctx, g = self.ctx, self.graph
        key = (*ctx.fields.values(), *self.start.values(), table, self._start_all,
               *(ctx.diag.get(n) for n in ("ekm", "ekh")))

        def body():
            self._save_start(table)
            return local_values(ctx, self._k_max_parts()[1], probe)
        try:
            with self.timers("dt"):
                return g.prelude.run(key, body)
        except Exception as exc:  # noqa: BLE001 - a failed capture: step without graphs from now on
            if g.prelude.graph is not None:
                raise
            self._fall_back(exc)
            return None

    def _fall_back(self, exc: BaseException) -> None:
        warn_fallback(exc)
        self.graph, self.graphs_reason = None, f"the capture failed ({type(exc).__name__}: {exc})"

    def _stages(self, t0: float, dt: float, dts, table) -> None:
        """The three stages with stage steps ``dts`` (floats, or device scalars in a graph). Local,
        but the halo exchanges are collective."""
        ctx = self.ctx
        I, J = ctx.grid.interior
        for stage in range(3):
            ctx.rk_stage, ctx.dt, ctx.t = stage, dts[stage], t0 + RK3_TIMES[stage] * dt
            ctx.zero_tendencies()
            for term in self.terms:
                with self._timer(_part(term)):
                    term(ctx)
            with self._timer("update"):
                if table is not None:            # (CUDA: every field in one launch, w's ends set)
                    table.rk_update(ctx.dt, (I, J))
                else:
                    self._update_each()
            self.update_halos()

    def _graph_step(self, t0: float, dt: float, dts, table) -> None:
        """The stages as the graph (captured on the first call): see :mod:`graphs`. Local."""
        ctx, g = self.ctx, self.graph
        key = (*ctx.fields.values(), *ctx.tend.values(), *self.start.values(), *self.terms, table)

        def body():
            self._capturing = True
            try:
                self._stages(t0, dt, g.stage_dts, table)
            finally:
                self._capturing = False
        try:
            with self.timers("graph"):
                g.run(key, dts, body)
        except Exception as exc:  # noqa: BLE001 - a failed capture: step without graphs from now on
            if g.graph is not None:
                raise
            self._fall_back(exc)
            self._stages(t0, dt, dts, table)
            return
        ctx.rk_stage, ctx.dt, ctx.t = 2, dts[2], t0 + RK3_TIMES[2] * dt

    def _timer(self, name: str):
        """``self.timers(name)``, or nothing while a graph is captured (nothing runs then)."""
        return contextlib.nullcontext() if self._capturing else self.timers(name)

    def drop_graph(self) -> None:
        """Capture the step's graph again at the next step (after changing what a term reads on the
        host: parameters, profiles replaced by new arrays). Local."""
        if self.graph is not None:
            self.graph.drop()

    def _update_each(self) -> None:
        """The Runge-Kutta stage update, field by field (:data:`ops.dynamics.rk_update`; ``w`` set to
        zero at the surface and the lid). Local."""
        ctx, fields = self.ctx, self.ctx.fields
        I, J = ctx.grid.interior
        for n, a in fields.items():
            ops.dynamics.rk_update(ctx.xp, a, self.start[n], ctx.dt, ctx.tend[n], (I, J), self.floors.get(n),
                                   zero_ends=n == "w")

    def free(self) -> None:
        """Release the distributed arrays (fields, pressure solver). Collective."""
        if self.graph is not None:
            self.graph.drop(release=True)
        for term in self.terms:
            f = getattr(term, "free", None)
            if f is not None:
                f()
        self.store.free()


def build(grid, team, names, advection, before=(), after=(), dims=(0, 0), device: str = "cpu",
          stepper: TimeStepper | None = None, k_const: float = 0.0, base=None, profiles=None,
          params=None, timers=None, t0: float = 0.0, graphs=None):
    """A :class:`Model` with fields ``names`` (must include u, v, w) on ``team``. Collective.

    Terms run as ``before`` (surface, thermodynamics) -> ``advection`` -> ``after`` (subgrid,
    forcings) -> pressure projection. Fields start at zero: fill ``model.ctx.fields`` (interiors)
    and call ``model.update_halos()``. ``graphs``: see :class:`Model`.
    """
    from .pressure import PressureProjection
    from .state import FieldStore, StepContext
    store = FieldStore(grid, team, names, dims=dims, device=device)    # no GPU: InputError here
    if device == "gpu":
        import cupy as xp
    else:
        import numpy as xp
        if ops.is_selected("numba") and not fused.AVAILABLE:
            optional.note_missing("numba", "LES", "the array-API source runs on the CPU: same results, "
                                  "2-3x slower", team.rank)
    ctx = StepContext(store.grid, xp, team, store.locals(), store=store, base=base, profiles=profiles,
                      params=params, t=t0)
    terms = list(before) + ([advection] if advection is not None else []) + list(after)
    terms.append(PressureProjection(store.grid, team, store.dims, device=device, xp=xp))
    floors = {}
    if "e12" in names:
        from .subgrid import E12MIN
        floors["e12"] = E12MIN
    return Model(store, ctx, terms, stepper or TimeStepper(), k_const=k_const, timers=timers, floors=floors,
                 graphs=graphs)



def bomex_like(shape, team, device: str = "cpu", scheme: str = "2nd", dims=(0, 0), timers=None,
               seed: int = 1, graphs=None):
    """A BOMEX set-up on any grid (dx = dy = 100 m, 3200 m deep) with every physics term: for
    benchmarks and GPU checks (``graphs``: see :class:`Model`). Collective. Returns the model with
    its initial state set."""
    import numpy as np

    from . import cases, forcings, subgrid, surface, thermo
    from .advection import Advection
    from .grid import Grid
    nx, ny, nz = (int(n) for n in shape)
    g = Grid.uniform(nx, ny, nz, 100.0 * nx, 100.0 * ny, 3200.0)
    b = cases.BOMEX
    params = {"lat": b["lat"], "wthl": b["wthl"], "wqt": b["wqt"], "ustar": b["ustar"]}
    names = ["u", "v", "w", "thl", "qt", "e12"]
    m = build(g, team, names, Advection(default=scheme),
              before=[surface.PrescribedSurface(params), thermo.Thermo(params)],
              after=[subgrid.SubgridTKE(params), forcings.Coriolis(params), forcings.Subsidence(),
                     forcings.PrescribedTendencies()],
              dims=dims, device=device, stepper=TimeStepper(courant=0.7, dt_max=60.0), timers=timers,
              graphs=graphs)
    ctx, lg, xp = m.ctx, m.ctx.grid, m.ctx.xp
    prof = cases.bomex_profiles(g.zf)
    cu = 0.5 * (float(prof["u"].max()) + float(prof["u"].min()))
    ctx.galilean = (cu, 0.0)
    ctx.base = thermo.base_state(g, b["ps"], b["th0"], prof["thl"], prof["qt"], xp)
    ctx.profiles = cases.profiles_for_model(prof, xp)
    rng = np.random.default_rng(seed)
    low = (g.zf < b["perturb_below"]).astype(float)
    ix = np.arange(lg.i0 - lg.h, lg.i0 + lg.nxl + lg.h) % nx
    iy = np.arange(lg.j0 - lg.h, lg.j0 + lg.nyl + lg.h) % ny
    pert = rng.uniform(-1, 1, (nx, ny, nz))[np.ix_(ix, iy)]
    qpert = rng.uniform(-1, 1, (nx, ny, nz))[np.ix_(ix, iy)]
    f = ctx.fields

    def put(n, a):
        f[n][...] = xp.asarray(np.ascontiguousarray(np.broadcast_to(a, f[n].shape)))
    put("u", prof["u"] - cu)
    put("v", prof["v"])
    put("thl", prof["thl"] + b["perturb_thl"] * pert * low)
    put("qt", prof["qt"] + b["perturb_qt"] * qpert * low)
    put("e12", np.maximum(prof["tke"], 0.1))
    m.update_halos()
    return m


def time_steps(m: "Model", team, steps: int, after_warmup=None) -> list[float]:
    """Wall seconds of ``steps`` RK3 steps of ``m``, each the slowest rank's, started together after
    one warm-up step (plans, FFT caches, kernels) and with the device synchronised. ``after_warmup()``
    runs once after the warm-up (e.g. to clear timers). Collective."""
    import time

    from mpi4py import MPI
    sync = m.store.arrays["u"].device.synchronize
    m.step()
    if after_warmup is not None:
        after_warmup()
    times = []
    for _ in range(steps):
        sync()
        team.barrier()
        t0 = time.perf_counter()
        m.step()
        sync()
        times.append(team.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return times


def bench_step(shape, steps: int = 5, device: str = "cpu", scheme: str = "2nd", team=None) -> float:
    """Median wall seconds per RK3 step of :func:`bomex_like` on ``shape``. Collective (all ranks
    of ``team``, default the world)."""
    import statistics

    from ..runtime import Team
    team = team or Team.world()
    m = bomex_like(shape, team, device=device, scheme=scheme)
    times = time_steps(m, team, steps)
    m.free()
    return statistics.median(times)
