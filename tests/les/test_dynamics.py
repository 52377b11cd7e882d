"""Verification of the dynamics (advection + diffusion + pressure projection + RK3) against exact
solutions: the Taylor-Green vortex (extruded in z, w = 0) and an advected, diffusing sine, with the
observed order of accuracy on refined grids; identical fields at 1-4 ranks; blow-up detection."""
import math

import numpy as np
import pytest
from mpi4py import MPI

from hpcsuite.les.advection import Advection
from hpcsuite.les.grid import Grid
from hpcsuite.les.model import build
from hpcsuite.les.timestep import BlowUp, TimeStepper
from hpcsuite.runtime import Team
from dyncases import order, run_sine, run_taylor_green, small_case
from lesref import global_divergence


def tg_error(team, n, scheme="2nd"):
    out, (u, v) = run_taylor_green(team, n, scheme=scheme)
    assert np.abs(out["w"]).max() < 1e-12
    return max(np.abs(out["u"] - u[..., None]).max(), np.abs(out["v"] - v[..., None]).max())


def test_taylor_green_second_order(team):
    errs = [tg_error(team, n) for n in (16, 32, 64)]
    assert errs[0] < 1e-3                      # nu = 0.05, t = 0.5: the decay is 5 %, the error 0.06 %
    assert all(1.9 < o < 2.1 for o in order(errs)), (errs, order(errs))


def test_taylor_green_with_upwind_momentum(team):
    # the 5th-order scheme for momentum: its advecting velocity is a 2nd-order average, so ~2nd order
    errs = [tg_error(team, n, "5th") for n in (16, 32)]
    assert errs[1] < errs[0] / 3.5 and errs[0] < 1e-3, errs


@pytest.mark.parametrize("scheme,kappa,expect,first", [("2nd", 0.0, 2.0, 0.03), ("5th", 0.0, 5.0, 3e-4),
                                                       ("2nd", 0.1, 2.0, 0.03)])
def test_advected_sine_order(team, scheme, kappa, expect, first):
    errs = []
    for n in (16, 32, 64):
        # pure advection: a small fixed step so the spatial error dominates
        c, ref = run_sine(team, n, scheme, kappa=kappa, dt=(0.05 * 2 * math.pi / n) if not kappa else None)
        errs.append(np.abs(c[:, 0, 0] - ref).max())
        assert np.allclose(c, c[:, :1, :1])          # stays one-dimensional
    assert errs[0] < first
    assert all(abs(o - expect) < 0.15 for o in order(errs)), (errs, order(errs))


def test_diffusing_sine_with_upwind_is_more_accurate_than_central(team):
    c5, ref = run_sine(team, 32, "5th", kappa=0.1)
    c2, _ = run_sine(team, 32, "2nd", kappa=0.1)
    e5, e2 = np.abs(c5[:, 0, 0] - ref).max(), np.abs(c2[:, 0, 0] - ref).max()
    assert e5 < e2 / 5, (e5, e2)


@pytest.mark.mpi
def test_identical_fields_at_any_rank_count(team):
    ref, g = small_case(Team(MPI.COMM_SELF))            # the same code on one rank (every rank)
    out, _ = small_case(team)
    assert out["t"] == pytest.approx(ref["t"], rel=1e-13)          # dt from the same state, to rounding
    for n in ("u", "v", "w", "thl", "qt"):
        scale = np.abs(ref[n]).max()
        assert np.abs(out[n] - ref[n]).max() <= 1e-12 * scale, n
    div = global_divergence(out["u"], out["v"], out["w"], g.dx, g.dy, g.zh)
    assert np.abs(div).max() < 1e-11 * np.abs(out["u"]).max() / g.dx


@pytest.mark.mpi
def test_blow_up_names_time_variable_and_cell(team):
    g = Grid.uniform(16, 12, 4, 1.6, 1.2, 0.4)
    m = build(g, team, ["u", "v", "w", "thl"], Advection(), stepper=TimeStepper(courant=0.5))
    m.ctx.fields["u"][...] = 1.0
    lg = m.ctx.grid
    if lg.i0 <= 9 < lg.i0 + lg.nxl and lg.j0 <= 7 < lg.j0 + lg.nyl:
        m.ctx.fields["thl"][9 - lg.i0 + lg.h, 7 - lg.j0 + lg.h, 2] = np.nan
    with pytest.raises(BlowUp, match=r"t = 0 .*thl is nan at cell \(i, j, k\) = \(9, 7, 2\), z = 0.25"):
        m.step()
    m.free()
    # every value finite, but two of them (on one rank) so large that the sums overflow: the largest is named
    m = build(g, team, ["u", "v", "w", "thl"], Advection(), stepper=TimeStepper(courant=0.5))
    m.ctx.fields["u"][...] = 1.0
    for i, j, k, val in ((3, 2, 2, 1.5e308), (3, 2, 1, 1.7e308)):
        if lg.i0 <= i < lg.i0 + lg.nxl and lg.j0 <= j < lg.j0 + lg.nyl:
            m.ctx.fields["thl"][i - lg.i0 + lg.h, j - lg.j0 + lg.h, k] = val
    with pytest.raises(BlowUp, match=r"t = 0 .*thl is 1.7e\+308 at cell \(i, j, k\) = \(3, 2, 1\), z = 0.15 "
                       r"\(its largest magnitude"):
        m.step()
    m.free()
    # a fixed step far above the Courant limit: stopped before the step is taken
    m = build(g, team, ["u", "v", "w"], Advection(), stepper=TimeStepper(dt_fixed=1.0, blowup_courant=3.0))
    m.ctx.fields["u"][...] = 1.0
    m.ctx.fields["u"][lg.h, lg.h, 1] = 2.0 if (lg.i0, lg.j0) == (0, 0) else 1.0
    with pytest.raises(BlowUp, match=r"Courant number 20 .*\(0, 0, 1\)"):
        m.step()
    m.free()
