"""Advective tendencies against analytic derivatives (flux form on the staggered grid): observed
order 2 for the central scheme and 5 for the upwind scheme on scalars; momentum fluxes; conservation
(the tendencies sum to zero over a periodic box with walls); the strict array-API checker giving
the same numbers as NumPy."""
import math

import numpy as np
import pytest

from hpcsuite.les.advection import Advection
from hpcsuite.les.ops.advection import runs as _runs
from hpcsuite.les.grid import Grid
from hpcsuite.les.state import StepContext
from dyncases import order
from lesref import stretched_zh


def scalar_tendency_error(n, scheme):
    g = Grid.uniform(n, n, 4, 2 * math.pi, 2 * math.pi, 1.0)
    x, y = g.x_cells()[:, None, None], g.y_cells()[None, :, None]
    f = {"u": np.full(g.cell_shape, 1.0), "v": np.full(g.cell_shape, 0.5), "w": np.zeros(g.w_shape),
         "thl": np.broadcast_to(np.sin(x) * np.cos(y), g.cell_shape).copy()}
    ctx = StepContext(g, np, None, f)
    Advection(default=scheme)(ctx)
    exact = -(np.cos(x) * np.cos(y) - 0.5 * np.sin(x) * np.sin(y))
    return np.abs(ctx.tend["thl"][g.interior] - np.broadcast_to(exact, g.cell_shape)[g.interior]).max()


@pytest.mark.parametrize("scheme,expect", [("2nd", 2.0), ("5th", 5.0)])
def test_scalar_tendency_order(scheme, expect):
    errs = [scalar_tendency_error(n, scheme) for n in (16, 32, 64)]
    assert all(abs(o - expect) < 0.15 for o in order(errs)), (errs, order(errs))


def test_momentum_self_advection_matches_the_derivative():
    # u(x) only: d(uu)/dx = 2 u u'; the advecting velocity is a 2nd-order average for both schemes
    for scheme in ("2nd", "5th"):
        errs = []
        for n in (16, 32, 64):
            g = Grid.uniform(n, 4, 2, 2 * math.pi, 4 * 2 * math.pi / n, 1.0)
            xf = g.x_faces()[:, None, None]
            uu = 1.0 + 0.3 * np.sin(xf)
            f = {"u": np.broadcast_to(uu, g.cell_shape).copy(), "v": np.zeros(g.cell_shape),
                 "w": np.zeros(g.w_shape)}
            ctx = StepContext(g, np, None, f)
            Advection(default=scheme)(ctx)
            ex = np.broadcast_to(-2 * uu * 0.3 * np.cos(xf), g.cell_shape)
            errs.append(np.abs(ctx.tend["u"][g.interior] - ex[g.interior]).max())
        assert all(1.9 < o < 2.1 for o in order(errs)), (scheme, errs)


def random_fields(g, seed=1):
    rng = np.random.default_rng(seed)
    f = {n: rng.standard_normal(g.w_shape if n == "w" else g.cell_shape) for n in ("u", "v", "w", "thl")}
    f["w"][..., 0] = f["w"][..., -1] = 0.0
    ctx = StepContext(g, np, None, f)
    for a in f.values():
        ctx.update_halo(a)              # periodic halos of the one-rank block
    return ctx


@pytest.mark.parametrize("scheme", ["2nd", "5th"])
def test_flux_form_conserves(scheme):
    g = Grid.stretched(12, 10, 1.2, 1.0, stretched_zh(7))
    ctx = random_fields(g)
    Advection(default=scheme)(ctx)
    I, J = g.interior
    for n in ("u", "v", "thl"):
        vol = ctx.tend[n][I, J] * g.dzf
        assert abs(vol.sum()) < 1e-11 * np.abs(vol).sum(), n
    # (w is not checked: its control volumes end at zf[0] and zf[nz-1], whose fluxes are not zero)


def test_vertical_stencil_order_drops_at_the_walls():
    assert _runs(1, 10, 10) == [("2nd", 1, 2), ("3rd", 2, 3), ("5th", 3, 8), ("3rd", 8, 9), ("2nd", 9, 10)]
    assert _runs(1, 3, 3) == [("2nd", 1, 3)]


def test_unknown_scheme_names_the_variable():
    with pytest.raises(ValueError, match="'thl'.*2nd, 5th"):
        Advection({"thl": "4th"})


@pytest.mark.parametrize("scheme", ["2nd", "5th"])
def test_strict_array_api_gives_the_same_tendencies(scheme):
    xs = pytest.importorskip("array_api_strict")
    g = Grid.stretched(8, 8, 1.0, 1.0, stretched_zh(6))
    ref = random_fields(g, seed=4)
    dev = xs.Device("device1")            # not the CPU device: implicit host conversions raise
    ctx = StepContext(g, xs, None, {n: xs.asarray(a, device=dev) for n, a in ref.fields.items()})
    Advection(default=scheme)(ctx)
    Advection(default=scheme)(ref)
    for n, a in ctx.tend.items():
        host = np.from_dlpack(xs.asarray(a, device=xs.Device("CPU_DEVICE"), copy=True))
        assert np.allclose(host, ref.tend[n], rtol=0, atol=1e-13), n


def test_strict_array_api_divergence_and_courant_rate():
    xs = pytest.importorskip("array_api_strict")
    from hpcsuite.les.pressure import divergence
    from hpcsuite.les.timestep import local_rates
    g = Grid.stretched(8, 8, 1.0, 1.0, stretched_zh(6))
    ref = random_fields(g, seed=5)
    dev = xs.Device("device1")
    ctx = StepContext(g, xs, None, {n: xs.asarray(a, device=dev) for n, a in ref.fields.items()})
    d = divergence(*(ctx.fields[n] for n in "uvw"), g, ctx.zgrid)
    dref = divergence(*(ref.fields[n] for n in "uvw"), g, ref.zgrid)
    host = np.from_dlpack(xs.asarray(d, device=xs.Device("CPU_DEVICE"), copy=True))
    assert np.allclose(host, dref, rtol=0, atol=1e-12)
    r, total = local_rates(ctx)
    r0, total0 = local_rates(ref)
    assert float(r) == pytest.approx(float(r0)) and float(total) == pytest.approx(float(total0))
