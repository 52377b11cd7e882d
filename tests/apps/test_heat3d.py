"""heat3d against independent references: the analytic decay, a serial NumPy (np.roll) solver, and
the same run at 1-4 ranks; its HDF5 output read back serially; the [solver] keys (halo depth,
backend) giving identical fields, and their validation."""
import math
import tomllib

import h5py
import numpy as np
import pytest

from helpers import HPCSUITE
from hpcsuite import deck as dk
from hpcsuite.apprunner import load_app
from hpcsuite.runtime import gpu_status

heat3d = load_app("heat3d")

MODES = [[1, 1, 1, 1.0], [2, 0, 1, 0.5]]


def make_deck(n, t_end=0.02, lengths=(1.0, 1.0, 1.0), out="", dims=(0, 0, 0), modes=MODES, solver="",
              app=""):
    text = f"""[app]\nname = "heat3d"\n{app}\n[grid]\nnx = {n[0]}\nny = {n[1]}\nnz = {n[2]}
lx = {lengths[0]}\nly = {lengths[1]}\nlz = {lengths[2]}\n[time]\nt_end = {t_end}
[initial]\nmodes = {modes}\n[decomposition]\ndims = {list(dims)}\n[solver]\n{solver}\n[output]\nfile = "{out}"\n"""
    return dk.parse(tomllib.loads(text), heat3d.SCHEMA, "test.toml"), text


def analytic(n, lengths, t, alpha=1.0, modes=MODES):
    """Exact solution on the cell centres, written out independently of the app."""
    x, y, z = (np.arange(n[0])[:, None, None] + 0.5) * lengths[0] / n[0], \
              (np.arange(n[1])[None, :, None] + 0.5) * lengths[1] / n[1], \
              (np.arange(n[2])[None, None, :] + 0.5) * lengths[2] / n[2]
    u = 0.0
    for kx, ky, kz, a in modes:
        k2 = (2 * np.pi) ** 2 * ((kx / lengths[0]) ** 2 + (ky / lengths[1]) ** 2 + (kz / lengths[2]) ** 2)
        u = u + a * np.exp(-alpha * k2 * t) * np.sin(2 * np.pi * (kx * x / lengths[0] + ky * y / lengths[1] + kz * z / lengths[2]))
    return u


def numpy_reference(n, lengths, steps, dt, alpha=1.0):
    """Forward Euler with the periodic 7-point Laplacian via np.roll (a different implementation)."""
    u = analytic(n, lengths, 0.0)
    h2 = [(lengths[d] / n[d]) ** 2 for d in range(3)]
    for _ in range(steps):
        lap = sum((np.roll(u, 1, d) - 2 * u + np.roll(u, -1, d)) / h2[d] for d in range(3))
        u = u + alpha * dt * lap
    return u


def test_second_order_convergence_to_the_exact_decay(team):
    errors = []
    for m in (8, 16, 32):
        deck, _ = make_deck((m, m, m))
        res = heat3d.simulate(deck, team)
        err = np.max(np.abs(res.field - analytic((m, m, m), (1, 1, 1), 0.02)))
        assert err == pytest.approx(res.error_max, rel=1e-9)    # the app reports the same error
        errors.append(err)
    orders = [math.log2(errors[i] / errors[i + 1]) for i in range(2)]
    assert all(1.8 < o < 2.2 for o in orders), (errors, orders)
    assert errors[-1] < 2e-3


def test_matches_numpy_reference_on_an_uneven_box(team):
    n, lengths = (11, 7, 5), (1.0, 0.7, 1.3)
    deck, _ = make_deck(n, t_end=0.003, lengths=lengths)
    res = heat3d.simulate(deck, team)
    ref = numpy_reference(n, lengths, res.steps, res.dt)
    assert np.allclose(res.field, ref, rtol=0, atol=1e-13)


def test_same_result_at_1_to_4_ranks(run, tmp_path):
    n = (13, 10, 7)
    fields = {}
    for nranks in (1, 2, 3, 4):
        out = tmp_path / f"u{nranks}.h5"
        _, text = make_deck(n, t_end=0.002, out=out)
        deck = tmp_path / f"d{nranks}.toml"
        deck.write_text(text)
        p = run([HPCSUITE, "run", "-q", deck], nranks=nranks, timeout=120)
        assert p.returncode == 0, p.stderr
        with h5py.File(out, "r") as f:
            fields[nranks] = f["u"][...]
            assert f.attrs["ranks"] == nranks
            steps, dt = int(f.attrs["steps"]), float(f.attrs["dt"])
    ref = numpy_reference(n, (1, 1, 1), steps, dt)
    for nranks, u in fields.items():
        assert np.allclose(u, fields[1], rtol=0, atol=1e-15), nranks
        assert np.allclose(u, ref, rtol=0, atol=1e-13), nranks


@pytest.mark.mpi
def test_hdf5_file_equals_gathered_field(team, shared_tmp):
    n = (9, 6, 5)
    out = shared_tmp / "heat.h5"
    deck, _ = make_deck(n, t_end=0.001)
    res = heat3d.simulate(deck, team)
    from hpcsuite.runtime.h5io import write_blocks_hdf5
    write_blocks_hdf5(out, team, n, res.starts, {"u": res.field}, {"t": 0.001})
    blocks = team.gather((res.starts, res.field))
    if team.rank == 0:
        whole = np.full(n, np.nan)
        for (s, b) in blocks:
            whole[s[0]:s[0] + b.shape[0], s[1]:s[1] + b.shape[1], s[2]:s[2] + b.shape[2]] = b
        assert not np.isnan(whole).any()
        with h5py.File(out, "r") as f:            # serial read, no MPI driver
            assert np.array_equal(f["u"][...], whole)
            assert f.attrs["t"] == 0.001
        assert sorted(p.name for p in shared_tmp.iterdir()) == ["heat.h5"]
    team.barrier()


@pytest.mark.mpi
def test_halo_depths_and_backends_give_the_same_field(team):
    n = (12, 9, 8)                    # blocks of >= 4 cells along every split at 1-4 ranks
    fields = {}
    for key in ("depth = 1", "depth = 2\nblock = 1", "depth = 4\nblock = 1", "depth = 0",
                "depth = 4\nblock = 4", "depth = 4\nblock = 3", "depth = 2\nblock = 0",
                'depth = 3\nbackend = "strict"', 'depth = 1\nbackend = "cpu"'):
        deck, _ = make_deck(n, t_end=0.003, solver=key)
        heat3d.check(deck, team)
        res = heat3d.simulate(deck, team)
        fields[key] = res.field
        assert res.exchanges == -(-res.steps // res.depth)
        if key.startswith("depth = 0"):
            smallest = min(c // r for c, r in zip(n, res.grid))
            assert res.depth in (1, 2, 4, 8) and res.depth <= smallest
        else:
            assert res.depth == int(key.split()[2])
        if "block = 4" in key or "block = 3" in key:
            # temporal blocking: the pass length asked for, with the default tile
            assert (res.block, res.tile) == (int(key.split()[-1]), 16)
        elif "block = 1" in key or "strict" in key or key.startswith("depth = 1"):
            assert (res.block, res.tile) == (1, None)
        else:
            assert res.block in (1, res.depth)                       # chosen by timing
        assert res.backend == ("strict" if "strict" in key else "cpu")
    ref = numpy_reference(n, (1, 1, 1), res.steps, res.dt)
    for key, f in fields.items():
        assert np.array_equal(f, fields["depth = 1"]), key
        assert np.allclose(f, ref[tuple(slice(s, s + b) for s, b in zip(res.starts, f.shape))], rtol=0, atol=1e-13)


@pytest.mark.mpi
@pytest.mark.skipif(not gpu_status()[0], reason=f"no GPU: {gpu_status()[1]}")
def test_gpu_device_gives_the_cpu_field(team):
    """[app] device = "gpu" runs the CuPy kernels on device-resident blocks and ends with the CPU
    run's field (same operations in the same order: no FMA in the CUDA kernels)."""
    n = (12, 9, 8)
    cpu, _ = make_deck(n, t_end=0.003, solver="depth = 2")
    gpu, _ = make_deck(n, t_end=0.003, solver="depth = 2", app='device = "gpu"')
    heat3d.check(gpu, team)
    ref = heat3d.simulate(cpu, team)
    res = heat3d.simulate(gpu, team)
    assert res.backend == "gpu"
    np.testing.assert_allclose(res.field, ref.field, rtol=0, atol=1e-13)
    team.barrier()


def test_solver_keys_are_validated(team):
    cases = [
        ("depth = 9", "", "[solver] depth = 9 is larger than the smallest block (8 cells along x"),
        ("depth = -1", "", "[solver] depth must be a non-negative integer, got -1"),
        ("depth = 2\nblock = 4", "", "[solver] block = 4 is larger than [solver] depth = 2"),
        ('backend = "tpu"', "", "[solver] backend must be one of 'auto', 'cpu', 'gpu', 'strict', got 'tpu'"),
        ('backend = "gpu"', "", "[solver] backend = 'gpu' needs [app] device = 'gpu'"),
        ('backend = "strict"', 'device = "gpu"', "[solver] backend = 'strict' runs on the CPU"),
    ]
    if not gpu_status()[0]:
        cases.append(("", 'device = "gpu"', "[app] device = 'gpu' but no GPU is usable here"))
    for solver, app, msg in cases:
        with pytest.raises(dk.DeckError) as info:
            deck, _ = make_deck((8, 8, 8), solver=solver, app=app)
            heat3d.check(deck, team)
        assert str(info.value).startswith("test.toml: ") and msg in str(info.value), str(info.value)
    deck, _ = make_deck((8, 8, 8), solver="depth = 8")
    heat3d.check(deck, team)                                     # the largest depth that fits


def test_bad_depth_at_two_ranks_exits_2_with_one_line(run, tmp_path):
    _, text = make_deck((8, 8, 8), solver="depth = 5")
    deck = tmp_path / "deep.toml"
    deck.write_text(text)
    p = run([HPCSUITE, "run", deck], nranks=2, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"hpcsuite: error: {deck}: [solver] depth = 5 is larger than the smallest block "
                                "(4 cells along x per rank on the 2x1x1 process grid): the halo must come from "
                                "the next rank alone; use depth <= 4 or 0 (auto)")
