"""Model assembly for a configured run: which fields and terms a case needs, the grid, the model, its
initial state, the verification errors and the statistics.

The configuration ``cfg`` is the les application's parsed input deck (``hpcsuite.apps.les``, whose
schema documents every key) or any object with the same tables and keys read as attributes:
``cfg.case`` (``kind``, ``amplitude``, ``velocity``, ``wavenumber``, ``folder``, ``expnr``, ``thl0``,
``zi0``, ``gamma``, ``perturbation``, ``seed``), ``cfg.grid`` (``nx``, ``ny``, ``nz``, ``xsize``,
``ysize``, ``zsize``, ``stretch``), ``cfg.advection`` (``momentum``, ``scalars`` and one key per field,
``""`` for the group's scheme; also read with ``[]``), ``cfg.subgrid`` (``scheme``, ``nu``, ``kappa``,
``cs``, ``prandtl``), ``cfg.physics`` (``th0``, ``ps``, ``lat``, ``wthl``, ``wqt``, ``ustar``,
``galilean``, ``sponge_base``, ``sponge_rate``, ``sponge_wind``), ``cfg.time`` (``courant``, ``peclet``,
``dt_max``, ``dt``, ``blowup_courant``),
``cfg.decomposition.dims``, ``cfg.app.device``, ``cfg.output.stats_every`` and ``cfg.path`` (the deck
file: a relative ``case.folder`` is relative to its folder). Nothing here validates: the application
checks the deck before any of this runs.

A run is ``m = make_model(cfg, team)``, ``initialise(cfg, m)``, then ``m.step()`` until the end
(``hpcsuite.apps.les.run`` adds outputs and checkpoints). This module imports only NumPy at import
time; the model's modules are imported when a model is made.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

__all__ = ["MOIST", "ATMOSPHERIC", "field_names", "scheme_of", "make_grid", "diffusivities", "velocity_scale",
           "galilean_shift", "case_profiles", "case_folder", "make_model", "physics_terms", "initialise",
           "init_atmosphere", "exact_error", "make_statistics"]

#: the moist cases (thl and qt, the moist thermodynamics, Coriolis and large-scale forcings)
MOIST = ("bomex", "dales")
#: the atmospheric cases (surface fluxes, thermodynamics, statistics); the others verify the dynamics
ATMOSPHERIC = ("cbl",) + MOIST
TWO_PI = 2.0 * math.pi


# ---------------------------------------------------------------------- what the case needs
def field_names(cfg) -> list[str]:
    """The prognostic fields of the case: ``u, v, w``, then ``thl`` (all but Taylor-Green), ``qt``
    (moist cases) and ``e12`` (TKE closure). Local."""
    kind = cfg.case.kind
    names = ["u", "v", "w"]
    if kind in ("advect_sine", "cbl") or kind in MOIST:
        names.append("thl")
    if kind in MOIST:
        names.append("qt")
    if cfg.subgrid.scheme == "tke":
        names.append("e12")
    return names


def scheme_of(cfg, var: str) -> str:
    """The advection scheme of the field ``var``: its own key, else its group's (``momentum`` for
    u, v, w; ``scalars`` for the others). Local."""
    a = cfg.advection
    return a[var] or (a.momentum if var in ("u", "v", "w") else a.scalars)


def make_grid(cfg):
    """The global :class:`~hpcsuite.les.grid.Grid` of ``cfg.grid``: uniform, or with layer thicknesses
    growing by ``stretch`` from the ground and scaled to ``zsize``. Local."""
    from .grid import Grid
    g = cfg.grid
    if g.stretch == 1.0:
        return Grid.uniform(g.nx, g.ny, g.nz, g.xsize, g.ysize, g.zsize)
    d = g.stretch ** np.arange(g.nz)
    return Grid.stretched(g.nx, g.ny, g.xsize, g.ysize, np.concatenate(([0.0], np.cumsum(d))) * g.zsize / d.sum())


def diffusivities(cfg) -> tuple[float, float]:
    """``(nu, kappa)``: the constant viscosity and scalar diffusivity (``kappa < 0`` means ``nu``);
    zeros for the other closures. Local."""
    s = cfg.subgrid
    if s.scheme != "constant":
        return 0.0, 0.0
    return s.nu, (s.nu if s.kappa < 0 else s.kappa)


def velocity_scale(cfg, grid) -> tuple[float, float]:
    """Largest ``|u|`` and ``|v|`` of the initial state, for checking a fixed step before the run:
    exact for the verification cases, the initial wind in the moving frame plus 2 m/s of convection
    to come for the atmospheric ones. Local (reads the case's profiles)."""
    kind, c = cfg.case.kind, cfg.case
    if kind == "taylor_green":
        return abs(c.amplitude), abs(c.amplitude) * grid.ysize / grid.xsize
    if kind == "advect_sine":
        return abs(c.velocity), 0.0
    prof = case_profiles(cfg, grid)
    cu, cv = galilean_shift(cfg, prof)
    # the initial wind in the moving frame plus ~2 m/s of convective motion to come
    return (float(np.max(np.abs(prof["u"] - cu))) + 2.0, float(np.max(np.abs(prof["v"] - cv))) + 2.0)


def galilean_shift(cfg, prof) -> tuple[float, float]:
    """``(cu, cv)``: the velocity of the moving frame, the middle of the initial wind's range (as
    DALES) when ``physics.galilean``, else zero. Local."""
    if not cfg.physics.galilean:
        return 0.0, 0.0
    return (0.5 * (float(np.max(prof["u"])) + float(np.min(prof["u"]))),
            0.5 * (float(np.max(prof["v"])) + float(np.min(prof["v"]))))


def case_profiles(cfg, grid) -> dict:
    """Initial and forcing profiles of an atmospheric case at the grid's ``zf`` (host arrays, the keys
    of :mod:`hpcsuite.les.cases`). Local.

    Raises
    ------
    InputError
        A DALES case file that cannot be read or does not reach the domain top.
    """
    from . import cases
    c = cfg.case
    if c.kind == "bomex":
        return dict(cases.bomex_profiles(grid.zf))
    if c.kind == "cbl":
        return dict(cases.cbl_profiles(grid.zf, theta0=c.thl0, h0=c.zi0, gamma=c.gamma))
    return dict(cases.read_dales_case(case_folder(cfg), c.expnr, grid.zf))


def case_folder(cfg) -> Path:
    """``case.folder``; a relative one is relative to the deck's folder (like eigen's ``[problem]
    file``), so a deck and its DALES case files can be copied or installed together. Local."""
    p = Path(cfg.case.folder)
    return p if p.is_absolute() else Path(cfg.path).resolve().parent / p


# ---------------------------------------------------------------------- the model
def make_model(cfg, team, timers=None):
    """The model of the configuration, its fields at zero and its terms wired. Collective.

    Parameters
    ----------
    cfg : deck
        The configuration (see the module's notes).
    team : Team
        The ranks that share the fields (a 2-D process grid in x and y).
    timers : Timers, optional
        Time per part of a step.

    Returns
    -------
    Model
        Fill its fields with :func:`initialise`.
    """
    from .advection import Advection
    from .model import build
    from .timestep import TimeStepper
    grid = make_grid(cfg)
    names = field_names(cfg)
    adv = Advection({v: scheme_of(cfg, v) for v in names})
    t = cfg.time
    stepper = TimeStepper(courant=t.courant, peclet=t.peclet, dt_max=t.dt_max, dt_fixed=t.dt or None,
                          blowup_courant=t.blowup_courant)
    before, after, extra = physics_terms(cfg, grid)
    nu, kappa = diffusivities(cfg)
    m = build(grid, team, names, adv, before=before, after=after, dims=cfg.decomposition.dims,
              device=cfg.app.device, stepper=stepper, k_const=max(nu, kappa), timers=timers,
              params=extra.get("params"))
    return m


def physics_terms(cfg, grid):
    """The physics terms of the case around the advection. Local (makes the term objects).

    Returns
    -------
    before : list
        Surface fluxes and thermodynamics (atmospheric cases), run before the advection.
    after : list
        The subgrid closure, then Coriolis, subsidence and the prescribed tendencies (moist cases),
        then the sponge layer (any case, when ``physics.sponge_base > 0``).
    extra : dict
        ``{"params": ...}``: the physical constants the terms read, for ``model.build``.
    """
    from . import subgrid
    s, p, kind = cfg.subgrid, cfg.physics, cfg.case.kind
    before, after = [], []
    params = {"th0": p.th0, "ps": p.ps, "lat": p.lat, "wthl": p.wthl, "wqt": p.wqt, "ustar": p.ustar,
              "cs": s.cs, "prandtl": s.prandtl}
    if kind in ATMOSPHERIC:
        from . import surface, thermo
        before.append(surface.PrescribedSurface(params))
        before.append(thermo.Thermo(params) if kind in MOIST else thermo.DryThermo(params))
    nu, kappa = diffusivities(cfg)
    if s.scheme == "constant" and (nu or kappa):
        after.append(subgrid.ConstantViscosity(nu, kappa))
    elif s.scheme == "smagorinsky":
        after.append(subgrid.Smagorinsky(params))
    elif s.scheme == "tke":
        after.append(subgrid.SubgridTKE(params))
    if kind in MOIST:
        from . import forcings
        if p.lat:
            after.append(forcings.Coriolis(params))
        after.append(forcings.Subsidence())
        after.append(forcings.PrescribedTendencies())
    if getattr(p, "sponge_base", 0.0) > 0.0:            # (0: no sponge, every deck before it)
        from . import forcings
        after.append(forcings.Sponge(p.sponge_base, p.sponge_rate, grid, p.sponge_wind))
    return before, after, {"params": params}


def initialise(cfg, model) -> None:
    """Set the initial fields (interiors, then the halos) and, for the atmospheric cases, the
    profiles and base state. Collective (the halo exchange).

    A restarted run calls this too before it loads its checkpoint: the profiles and base state are
    not in the checkpoint.
    """
    ctx, g, xp = model.ctx, model.ctx.grid, model.ctx.xp
    f = ctx.fields
    c, kind = cfg.case, cfg.case.kind
    xc, xf = g.x_cells()[:, None, None], g.x_faces()[:, None, None]
    yc, yf = g.y_cells()[None, :, None], g.y_faces()[None, :, None]
    put = (lambda name, a: f[name].__setitem__(Ellipsis, xp.asarray(np.broadcast_to(a, f[name].shape).copy())))
    if kind == "taylor_green":
        kx, ky = TWO_PI / g.xsize, TWO_PI / g.ysize
        put("u", c.amplitude * np.cos(kx * xf) * np.sin(ky * yc))
        put("v", -c.amplitude * (kx / ky) * np.sin(kx * xc) * np.cos(ky * yf))
    elif kind == "advect_sine":
        put("u", np.full((1, 1, 1), c.velocity))
        put("thl", c.amplitude * np.sin(c.wavenumber * TWO_PI / g.xsize * xc))
    else:
        init_atmosphere(cfg, model)
    model.update_halos()


def init_atmosphere(cfg, model) -> None:
    """Profiles, base state and perturbed initial fields of the atmospheric cases (halos included,
    from the global random field). Local.

    The random perturbations are drawn for the whole domain from ``case.seed`` and each rank takes
    its block, so the initial state is the same whatever the decomposition.
    """
    from . import cases, thermo
    from .subgrid import E12MIN
    ctx, g, xp = model.ctx, model.ctx.grid, model.ctx.xp
    f, c, p = ctx.fields, cfg.case, cfg.physics
    prof = case_profiles(cfg, g)
    ctx.galilean = galilean_shift(cfg, prof)
    cu, cv = ctx.galilean
    ctx.base = thermo.base_state(g, p.ps, p.th0, prof["thl"], prof["qt"], xp)
    ctx.profiles = cases.profiles_for_model(prof, xp)
    # the same random numbers whatever the decomposition: draw the global field, take the block
    rng = np.random.default_rng(c.seed)
    shape = (g.nx, g.ny, g.nz)
    pert, qpert = rng.uniform(-1.0, 1.0, shape), rng.uniform(-1.0, 1.0, shape)
    below = cases.BOMEX["perturb_below"] if c.kind in MOIST else max(0.5 * c.zi0, 2.5 * float(g.dzf[0]))
    low = (g.zf < below).astype(float)
    ix = np.arange(g.i0 - g.h, g.i0 + g.nxl + g.h) % g.nx
    iy = np.arange(g.j0 - g.h, g.j0 + g.nyl + g.h) % g.ny
    block = (lambda a: a[np.ix_(ix, iy)])                             # noqa: E731

    def put(name, a):
        f[name][...] = xp.asarray(np.ascontiguousarray(np.broadcast_to(a, f[name].shape)))
    put("u", prof["u"] - cu)
    put("v", prof["v"] - cv)
    put("thl", prof["thl"] + c.perturbation * block(pert) * low)
    if "qt" in f:
        put("qt", prof["qt"] + cases.BOMEX["perturb_qt"] * block(qpert) * low)
    if "e12" in f:
        put("e12", np.maximum(prof.get("tke", np.zeros(g.nz)), E12MIN))     # DALES: the tke column is e12


# ---------------------------------------------------------------------- results
def exact_error(cfg, model) -> dict | None:
    """Largest errors of the fields against the exact solution at the model's time, over all ranks
    (the verification cases ``taylor_green`` and ``advect_sine``; None for the others). Collective.

    Returns
    -------
    dict or None
        ``{field: max |field - exact|}``, the same on every rank.
    """
    from mpi4py import MPI
    ctx, g = model.ctx, model.ctx.grid
    c, t = cfg.case, model.t
    I, J = g.interior
    xc, xf = g.x_cells()[:, None, None], g.x_faces()[:, None, None]
    yc, yf = g.y_cells()[None, :, None], g.y_faces()[None, :, None]
    host = {n: np.asarray(a.get() if hasattr(a, "get") else a) for n, a in ctx.fields.items()}

    def err(name, ref):
        return float(np.abs(host[name] - np.broadcast_to(ref, host[name].shape))[I, J].max())
    errs = {}
    if c.kind == "taylor_green":
        kx, ky = TWO_PI / g.xsize, TWO_PI / g.ysize
        e = math.exp(-diffusivities(cfg)[0] * (kx * kx + ky * ky) * t)
        errs["u"] = err("u", c.amplitude * np.cos(kx * xf) * np.sin(ky * yc) * e)
        errs["v"] = err("v", -c.amplitude * (kx / ky) * np.sin(kx * xc) * np.cos(ky * yf) * e)
        errs["w"] = err("w", 0.0)
    elif c.kind == "advect_sine":
        k = c.wavenumber * TWO_PI / g.xsize
        decay = math.exp(-diffusivities(cfg)[1] * k * k * t)
        errs["thl"] = err("thl", c.amplitude * np.sin(k * (xc - c.velocity * t)) * decay)
    else:
        return None
    vals = np.array([errs[k] for k in sorted(errs)])
    ctx.team.Allreduce(MPI.IN_PLACE, vals, op=MPI.MAX)
    return dict(zip(sorted(errs), vals.tolist()))


def make_statistics(cfg, model):
    """The :class:`~hpcsuite.les.statistics.Statistics` of an atmospheric case (hourly mean
    profiles), or None for the verification cases and when ``output.stats_every`` is 0. Local."""
    if cfg.case.kind not in ATMOSPHERIC or not cfg.output.stats_every:
        return None
    from .statistics import Statistics
    return Statistics(model.ctx.team, model.ctx.grid, interval=3600.0)
