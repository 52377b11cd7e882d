"""The sponge layer (``les.forcings.Sponge``, DALES's gravity-wave damping) against analytic decay,
on a real model: a single horizontal mode in the sponge of a resting atmosphere, with every other
term off, decays as the Runge-Kutta scheme's exact solution of ``ds/dt = -r(z) s`` (and within its
truncation bound of ``exp(-r t)``) at 1-4 ranks (the slab means over the ranks); a gravity wave near
the top of a stably stratified run from the les deck decays with the sponge and persists without; the
deck keys default to no sponge (every shipped deck unchanged) and bad values give one line naming the
key. The kernels are checked against the operator's reference by tests/les/test_ops.py (registry).
"""
from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from helpers import ROOT
from physctx import coords, gather_interior, local_block
from hpcsuite import deck as dk
from hpcsuite.les import forcings
from hpcsuite.les.grid import Grid
from hpcsuite.les.model import build
from hpcsuite.les.timestep import TimeStepper
from hpcsuite.runtime import InputError


@pytest.fixture(autouse=True)
def one_numba_thread():
    """These grids are a few hundred columns: a step is its kernels' start-up, and numba's parallel
    threads on a shared machine made it 40x slower (0.5 s against 0.012 s per step, measured at a
    load of 14 on 2 cores). One thread here; restored after."""
    from hpcsuite.les import fused
    if not fused.AVAILABLE:
        yield
        return
    before = fused.numba.get_num_threads()
    fused.numba.set_num_threads(1)
    try:
        yield
    finally:
        fused.numba.set_num_threads(before)


def dales_rate(z, base, top, rnu0):
    """DALES modboundary's ``tsc`` written out here (not the code under test): ``rnu0 sin^2(pi/2 (z -
    zspb) / (zspt - zspb))`` from the sponge's base to the top level, zero below."""
    return np.array([rnu0 * math.sin(0.5 * math.pi * min(1.0, (zk - base) / (top - base))) ** 2
                     if zk > base else 0.0 for zk in z])


def test_rate_profile_is_dales_tsc():
    g = Grid.uniform(4, 4, 20, 400.0, 400.0, 2000.0)
    s = forcings.Sponge(1200.0, 2.75e-3, g)
    assert s.top == g.zf[-1] and s.kf == 12 and s.kh == 13          # zf 1250.. and zh 1300.. damped
    z = np.concatenate((g.zf, g.zh))
    np.testing.assert_allclose(forcings.sponge_rates(z, 1200.0, g.zf[-1], 2.75e-3),
                               dales_rate(z, 1200.0, g.zf[-1], 2.75e-3), rtol=1e-15, atol=0)
    for bad, match in (((1200.0, 0.0, g), "rate must be > 0"), ((g.zf[-1], 1e-3, g), "below the highest cell"),
                       ((1200.0, 1e-3, g, "zonal"), "wind must be")):
        with pytest.raises(InputError, match=match):
            forcings.Sponge(*bad)


@pytest.mark.mpi(min_size=1)
def test_single_mode_decays_at_the_analytic_rate(team):
    """A resting atmosphere, thl' = cos(kx x), u' = sin(ky y), v' = sin(kx x) (divergence-free: the
    pressure projection leaves them), sponge only: each level k decays by the RK3 factor
    ``G(-r_k dt)^n`` (the scheme's exact solution of the linear ODE; rounding only: 1e-12), which is
    ``exp(-r_k t)`` within the RK3 truncation ``n (r dt)^4 / 24`` (times 2 for margin)."""
    nx, ny, nz = 16, 8, 12
    g = Grid.uniform(nx, ny, nz, 3200.0, 1600.0, 1200.0)
    base, rnu0, dt, n = 600.0, 0.01, 30.0, 8
    m = build(g, team, ["u", "v", "w", "thl"], None, after=[forcings.Sponge(base, rnu0, g)],
              stepper=TimeStepper(dt_fixed=dt))
    xc, yc, zf, xu, yv, zh = coords(g)
    kx, ky = 2 * math.pi / g.xsize, 2 * math.pi / g.ysize
    ones = np.ones(nz)
    init = {"thl": 300.0 + np.cos(kx * xc)[:, None, None] * np.ones((1, ny, 1)) * ones,
            "u": 2.0 + np.sin(ky * yc)[None, :, None] * np.ones((nx, 1, 1)) * ones,
            "v": np.sin(kx * xc)[:, None, None] * np.ones((1, ny, 1)) * ones}
    for name, a in init.items():
        m.ctx.fields[name][...] = local_block(m.ctx.grid, a)
    m.update_halos()
    for _ in range(n):
        m.step()
    assert m.t == pytest.approx(n * dt, rel=1e-12)
    r = dales_rate(zf, base, zf[-1], rnu0)
    x = -r * dt
    discrete = (1 + x + x * x / 2 + x ** 3 / 6) ** n
    continuous = np.exp(-r * n * dt)
    bound = 2 * n * (r * dt) ** 4 / 24
    assert np.all(r[:6] == 0) and np.all(r[6:] > 0)
    for name, mean in (("thl", 300.0), ("u", 2.0), ("v", 0.0)):
        got = gather_interior(m.ctx, m.ctx.fields[name])
        want = mean + (init[name] - mean) * discrete
        assert np.abs(got - want).max() < 1e-12, name
        assert np.array_equal(got[..., :6], init[name][..., :6]), name          # below the base: untouched
        sel = np.abs(init[name] - mean) > 0.5                                  # cells of a large amplitude
        ratio = (got - mean)[sel] / (init[name] - mean)[sel]
        level = np.broadcast_to(np.arange(nz), got.shape)[sel]
        assert np.all(np.abs(ratio / continuous[level] - 1) <= bound[level]), name
    assert np.abs(gather_interior(m.ctx, m.ctx.fields["w"])).max() < 1e-12
    m.free()


@pytest.mark.mpi(min_size=1)
def test_tendencies_relax_towards_slab_means_or_the_geostrophic_wind(team):
    """One call of the term on random fields against NumPy on the gathered fields: ``-r (s - slab
    mean)`` for thl, qt (and u, v with ``wind = "mean"``; ``ug - cu``, ``vg - cv`` in the moving
    frame otherwise), ``-r w`` at the half levels, e12 and the levels below the base untouched."""
    from physctx import make_ctx
    nx, ny, nz = 12, 10, 8
    g = Grid.uniform(nx, ny, nz, 1200.0, 1000.0, 800.0)
    rng = np.random.default_rng(5)
    glob = {n: rng.uniform(-1, 1, (nx, ny, nz + (n == "w"))) for n in ("u", "v", "w", "thl", "qt", "e12")}
    ug, vg, cu, cv = rng.uniform(-8, -4, nz), rng.uniform(-1, 1, nz), -6.0, 0.5
    ctx = make_ctx(team, g, glob, profiles={"ug": ug, "vg": vg})
    ctx.galilean = (cu, cv)
    rf, rh = dales_rate(g.zf, 420.0, g.zf[-1], 2e-3), dales_rate(g.zh, 420.0, g.zf[-1], 2e-3)
    for wind in ("mean", "geostrophic"):
        ctx.zero_tendencies()
        forcings.Sponge(420.0, 2e-3, g, wind)(ctx)
        for n, a in glob.items():
            target = a.mean(axis=(0, 1))[:nz]
            if wind == "geostrophic" and n in ("u", "v"):
                target = ug - cu if n == "u" else vg - cv
            want = -rh * a if n == "w" else 0.0 * a if n == "e12" else -rf * (a - target)
            got = gather_interior(ctx, ctx.tend[n])
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-17, err_msg=(wind, n))
            assert np.all(got[..., :4] == 0), n                 # zf 50 .. 350, zh 0 .. 400: below 420 m


def _deck(changes: dict, name: str = "cbl"):
    from hpcsuite.apps.les import SCHEMA
    path = ROOT / "inputs" / f"{name}.toml"
    return dk.parse(tomllib.loads(dk.modified(path, changes)), SCHEMA, str(path))


def _wave_deck(**physics):
    """A resting, stably stratified dry atmosphere (gamma 0.01 K/m: N = 0.018/s, a buoyancy period of
    5.8 minutes) on a small grid, no surface flux, no subgrid diffusion, fixed step."""
    return _deck({"case.zi0": 0.0, "case.gamma": 0.01, "case.perturbation": 0.0, "grid.nx": 16, "grid.ny": 4,
                  "grid.nz": 20, "grid.xsize": 3200.0, "grid.ysize": 800.0, "grid.zsize": 2000.0,
                  "advection.momentum": "2nd", "advection.scalars": "2nd", "advection.e12": "",
                  "subgrid.scheme": "constant", "physics.wthl": 0.0, "time.dt": 10.0,
                  **{f"physics.{k}": v for k, v in physics.items()}})


def _wave_energy(sponge_base: float) -> tuple[list, float]:
    """Energy of a gravity wave started as a thl anomaly cos(kx x) sin(pi (z - 1000) / 1000) in the upper
    half, sampled every 60 s for 300 s: kinetic plus available potential (g / th0 / N)^2 thl'^2 / 2."""
    from hpcsuite.les.assembly import initialise, make_model
    from hpcsuite.runtime import Team
    cfg = _wave_deck(sponge_base=sponge_base, sponge_rate=0.01)
    m = make_model(cfg, Team.world())
    initialise(cfg, m)
    g, xp = m.ctx.grid, m.ctx.xp
    xc, yc, zf, *_ = coords(g)
    upper = np.where(zf > 1000.0, np.sin(math.pi * (zf - 1000.0) / 1000.0), 0.0)
    m.ctx.fields["thl"][...] += xp.asarray(local_block(g, np.cos(2 * math.pi * xc / g.xsize)[:, None, None]
                                                       * np.ones((1, g.ny, 1)) * upper))
    m.update_halos()
    thl0 = gather_interior(m.ctx, m.ctx.fields["thl"]).mean(axis=(0, 1))
    n2 = 9.81 / 300.0 * 0.01
    out, wmax = [], 0.0
    while True:
        f = {k: gather_interior(m.ctx, m.ctx.fields[k]) for k in ("u", "v", "w", "thl")}
        pe = 0.5 * (9.81 / 300.0) ** 2 / n2 * (f["thl"] - thl0) ** 2
        out.append(float((0.5 * (f["u"] ** 2 + f["v"] ** 2) + pe).sum() + 0.5 * (f["w"] ** 2).sum()))
        wmax = max(wmax, float(np.abs(f["w"]).max()))
        if m.t >= 300.0 - 1e-9:
            break
        for _ in range(6):
            m.step()
    m.free()
    return out, wmax


def test_gravity_wave_near_the_top_decays_with_the_sponge_and_persists_without():
    """The wave's energy (from the deck, through assembly, numba or the source) with a sponge from
    1000 m at 0.01/s falls within 5 minutes below a third of the run without, which keeps more than
    80 % of it (no diffusion: only the time scheme's small damping; measured: 1.000 of it kept, 0.169
    with the sponge)."""
    (without, wmax), (with_, _) = _wave_energy(0.0), _wave_energy(1000.0)
    assert wmax > 0.1                                   # a wave: buoyancy turned into motion (~1 m/s)
    assert without[0] == with_[0] > 0
    assert min(without) > 0.8 * without[0], without
    assert with_[-1] < 0.33 * without[-1], (with_, without)
    assert all(b <= a * (1 + 1e-9) for a, b in zip(with_, with_[1:])), with_      # only loses energy


def test_deck_default_is_no_sponge_and_every_shipped_deck_is_unchanged():
    from hpcsuite.les.assembly import make_grid, physics_terms
    for name in ("bomex", "bomex_small", "cbl", "dales_bomex", "taylor_green"):
        cfg = _deck({}, name)
        assert cfg.physics.sponge_base == 0.0, name
        _, after, _ = physics_terms(cfg, make_grid(cfg))
        assert not any(isinstance(t, forcings.Sponge) for t in after), name
    cfg = _deck({"physics.sponge_base": 2500.0}, "bomex")
    sponge = [t for t in physics_terms(cfg, make_grid(cfg))[1] if isinstance(t, forcings.Sponge)]
    assert len(sponge) == 1 and sponge[0].rate == 2.75e-3 and sponge[0].wind == "mean"


@pytest.mark.parametrize("changes,match", [
    ({"physics.sponge_base": 2000.0}, r"\[physics\] sponge_base = 2000 m is not below the highest cell centre \(1950 m\)"),
    ({"physics.sponge_base": 1500.0, "physics.sponge_rate": 0.5},
     r"\[physics\] sponge_rate = 0.5 1/s is too fast for the step: sponge_rate x dt = 5 > 1"),
    ({"physics.sponge_rate": 0.0}, r"\[physics\] sponge_rate must be a positive number, got 0.0"),
    ({"physics.sponge_base": -1.0}, r"\[physics\] sponge_base must be a non-negative number, got -1.0"),
    ({"physics.sponge_wind": "zonal"}, r"\[physics\] sponge_wind must be one of 'mean', 'geostrophic'"),
])
def test_bad_sponge_keys_fail_with_one_line_naming_the_key(changes, match):
    from hpcsuite.apps.les import check
    from hpcsuite.runtime import Team
    with pytest.raises(dk.DeckError) as err:
        check(_wave_deck(**{k.split(".")[1]: v for k, v in changes.items()}), Team.world())
    assert len(str(err.value).splitlines()) == 1 and __import__("re").search(match, str(err.value)), str(err.value)
