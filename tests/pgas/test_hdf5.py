"""Parallel HDF5 I/O of DistArrays: round trips for every distribution (in place and through a
BLOCKED temporary) read back serially with plain h5py, loads into other distributions, halos,
ranks owning nothing, ``mode="a"``, atomic ``mode="w"`` (the final name is absent or complete, no
temporary left) and bad inputs raising the same error on every rank."""
import contextlib
import os
import re

import h5py
import numpy as np
import pytest

from hpcsuite import pgas
from hpcsuite.pgas import BLOCKED, CYCLIC, NONE, BLOCKCYCLIC as BC, TILE
from hpcsuite.pgas import hdf5 as H
from hpcsuite.pgas.pattern import Pattern

from reference import all_dists, shape_for

DISTS = [d for nd in (1, 2, 3) for d in all_dists(nd, tile_ok=True)]


def grid_for(dist):
    return tuple(0 if s.kind != "none" else 1 for s in dist)


def name_of(dist):
    return "-".join(map(repr, dist))


def reference(shape, dtype):
    ref = np.arange(np.prod(shape)).reshape(shape) * 3 - 7
    return ref.astype(dtype)


def serial_read(path, name):
    with h5py.File(path, "r") as f:
        return f[name][...], dict(f[name].attrs)


@contextlib.contextmanager
def forced(path):
    """Force one transfer path: selections in place ("direct"), or through a BLOCKED temporary."""
    with pytest.MonkeyPatch.context() as mp:
        if path == "direct":
            mp.setattr(H, "MIN_RUN_ELEMENTS", 0)
        else:
            mp.setattr(H, "MIN_RUN_ELEMENTS", 1 << 60)
            mp.setattr(H, "MIN_REDISTRIBUTE_BYTES", 0)
        yield


PATHS = ("direct", "blocked")


# ---------------------------------------------------------------------- serial: selection helpers
SPECS = [BLOCKED, NONE, CYCLIC, BC(2), BC(3), BC(64), TILE(5)]


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_dim_hyperslabs_cover_the_owned_runs(spec):
    from hpcsuite.pgas.dist import DimMap
    for n in (0, 1, 4, 5, 35, 64, 65, 1030, 1035):
        if spec.kind == "tile" and n % spec.block:
            continue
        for p in ((1,) if spec.kind == "none" else (1, 2, 3, 4, 7, 16)):
            m = DimMap(spec, n, p)
            for c in range(p):
                slabs = H.dim_hyperslabs(m, c)
                assert len(slabs) <= 2
                got = [(s + k * st, b) for s, st, cnt, b in slabs for k in range(cnt)]
                want = m.owned_runs(c)
                if m.cyclic and p == 1 and want:
                    want = [(0, n)]        # one run: every block is adjacent
                assert got == want, (spec, n, p, c)
                assert all(cnt == 1 or st >= b for _, st, cnt, b in slabs)   # HDF5: no overlap


def test_transfer_rule_only_redistributes_large_single_element_runs():
    big, small = 4 << 20, 1000
    assert H._via_blocked(Pattern(big, CYCLIC, team=2), 8)
    assert H._via_blocked(Pattern((big // 8, 8), (NONE, BLOCKED), team=8), 8)      # runs of 1
    assert not H._via_blocked(Pattern(big, CYCLIC, team=1), 8)                   # one unit: one run
    assert not H._via_blocked(Pattern(small, CYCLIC, team=2), 8)                 # too small to pay
    assert not H._via_blocked(Pattern(big, BC(2), team=2), 8)
    assert not H._via_blocked(Pattern(big, BLOCKED, team=2), 8)
    assert not H._via_blocked(Pattern((big // 4, 4), (CYCLIC, NONE), team=2), 8)  # whole rows
    assert H.file_run_elements(Pattern((10, 6, 4), (BLOCKED, NONE, NONE), team=2)) == 5 * 6 * 4
    assert H.file_run_elements(Pattern((10, 6, 4), (BLOCKED, BC(2), NONE), team=4)) == 2 * 4


# ---------------------------------------------------------------------- MPI: round trips
@pytest.mark.mpi
@pytest.mark.parametrize("dist", DISTS, ids=name_of)
def test_round_trip_every_distribution(team, shared_tmp, dist):
    """float64 and int32 in one file (the second added with mode="a"), transfers in place."""
    shape = shape_for(dist)
    if all(s.kind == "none" for s in dist) and team.size > 1:
        pytest.skip("an all-NONE pattern lives on one unit: it cannot be distributed over "
                    f"{team.size} ranks (test_array checks that error)")
    path = shared_tmp / "rt.h5"
    arrays = {}
    for name, dtype in (("f8", np.float64), ("i4", np.int32)):
        arrays[name] = a = pgas.from_numpy(reference(shape, dtype), dist=dist, root=None, grid=grid_for(dist))
        with forced("direct"):
            pgas.save_hdf5(a, path, name, attrs={"units": "m/s", "step": 3, "dist": name_of(dist)},
                           mode="w" if name == "f8" else "a")
    if team.rank == 0:
        for name, a in arrays.items():
            got, attrs = serial_read(path, name)
            assert got.dtype == a.dtype and got.shape == shape
            assert np.array_equal(got, reference(shape, a.dtype)), name
            assert attrs == {"units": "m/s", "step": 3, "dist": name_of(dist)}
        assert sorted(os.listdir(shared_tmp)) == ["rt.h5"]          # no temporary left behind
    # loaded back with the same distribution: float64 and int32 on alternate distributions
    name = ("f8", "i4")[DISTS.index(dist) % 2]
    with forced("direct"):
        b = pgas.load_hdf5(path, name, dist=dist, grid=grid_for(dist))
    a = arrays[name]
    assert b.shape == shape and b.dtype == a.dtype and b.pattern == a.pattern
    assert np.array_equal(b.local, a.local)          # same pattern: the owned blocks match
    for x in (*arrays.values(), b):
        x.free()


BLOCKED_PATH_DISTS = [(CYCLIC,), (CYCLIC, CYCLIC), (BC(2), NONE, CYCLIC), (TILE(4), TILE(5))]


@pytest.mark.mpi
def test_round_trips_through_a_blocked_temporary(team, shared_tmp):
    """The other path (copy into a BLOCKED temporary, then one hyperslab per rank) both ways."""
    for k, dist in enumerate(BLOCKED_PATH_DISTS):
        shape = shape_for(dist)
        dtype = (np.float64, np.int32)[k % 2]
        ref = reference(shape, dtype)
        a = pgas.from_numpy(ref, dist=dist, root=None, grid=grid_for(dist))
        with forced("blocked"):
            pgas.save_hdf5(a, shared_tmp / "bt.h5", "x")
            b = pgas.load_hdf5(shared_tmp / "bt.h5", "x", dist=dist, grid=grid_for(dist))
        if team.rank == 0:
            assert np.array_equal(serial_read(shared_tmp / "bt.h5", "x")[0], ref), dist
        assert b.dtype == np.dtype(dtype) and np.array_equal(b.local, a.local), dist
        a.free()
        b.free()


@pytest.mark.mpi
def test_load_into_other_distributions(team, shared_tmp):
    shape = (36, 10)                             # fits TILE(4, 5) and every 2-D distribution
    ref = reference(shape, np.float64)
    a = pgas.from_numpy(ref, dist=(CYCLIC, CYCLIC), root=None)
    pgas.save_hdf5(a, shared_tmp / "c.h5", "u")
    a.free()
    targets = [(BLOCKED, NONE), (NONE, BLOCKED), (BC(2), BC(3)), (TILE(4), TILE(5)), (NONE, NONE)]
    for k, dist in enumerate(targets):
        if all(s.kind == "none" for s in dist) and team.size > 1:
            continue
        with forced(PATHS[k % 2]):
            b = pgas.load_hdf5(str(shared_tmp / "c.h5"), "u", dist=dist, grid=grid_for(dist))
        assert b.dist == dist
        g = np.broadcast_arrays(*b.local_global_indices())
        assert np.array_equal(b.local, ref[tuple(g)]), dist
        assert np.array_equal(b[3:30:4, ::3], ref[3:30:4, ::3])    # visible one-sided at once
        b.free()
    # 1-D: BLOCKCYCLIC(7) saved, loaded as TILE(5), both through the BLOCKED temporary
    ref1 = reference((1035,), np.int32)
    c = pgas.from_numpy(ref1, dist=BC(7), root=None)
    with forced("blocked"):
        pgas.save_hdf5(c, shared_tmp / "one.h5", "v")
        d = pgas.load_hdf5(shared_tmp / "one.h5", "v", dist=TILE(5))
    assert np.array_equal(d.to_numpy(), ref1)
    c.free()
    d.free()


@pytest.mark.mpi
def test_halos_are_neither_written_nor_needed(team, shared_tmp):
    shape = (37, 5)
    ref = reference(shape, np.float64)
    a = pgas.full(shape, -1.0, halo=(2, 1))      # BLOCKED rows: local is a non-contiguous view
    assert not a.local.flags.c_contiguous
    a.local_with_halo[...] = np.nan              # ghost cells must never reach the file
    a.local[...] = ref[a.local_slices]
    a.sync()
    for path in PATHS:
        with forced(path):
            pgas.save_hdf5(a, shared_tmp / f"h-{path}.h5", "u")
        if team.rank == 0:
            assert np.array_equal(serial_read(shared_tmp / f"h-{path}.h5", "u")[0], ref)
    # read into halo arrays of other layouts; ghosts then come from the halo exchange
    layouts = [((BLOCKED, BLOCKED), 1), ((BLOCKED, NONE), (3, 2)), ((BLOCKED, CYCLIC), (1, 0))]
    for k, (dist, halo) in enumerate(layouts):
        with forced(PATHS[k % 2]):
            b = pgas.load_hdf5(shared_tmp / "h-direct.h5", "u", dist=dist, halo=halo, boundary="periodic",
                               corners=True)
        assert b.halo_width == ((halo,) * 2 if isinstance(halo, int) else halo)
        assert np.array_equal(b.to_numpy(), ref), dist
        g = np.broadcast_arrays(*b.local_global_indices())
        assert np.array_equal(b.local, ref[tuple(g)])
        b.halo.update()
        w = b.halo_width
        gi = [np.arange(ix.min() - x, ix.max() + x + 1) % n if ix.size else ix
              for ix, x, n in zip(b.local_indices, w, shape)]
        if b.local.size and not any(m.cyclic for m in b.pattern.maps):
            assert np.array_equal(b.local_with_halo, ref[np.ix_(*gi)])
        b.free()
    a.free()


@pytest.mark.mpi
def test_ranks_owning_nothing_take_part(team, shared_tmp):
    for k, (dist, n) in enumerate([(BLOCKED, 2), (BC(2), 3), (BLOCKED, 0), ((BLOCKED, NONE), 3)]):
        shape = (n,) if isinstance(dist, pgas.DistSpec) else (n, 4)
        ref = reference(shape, np.float64)
        a = pgas.from_numpy(ref, dist=dist, root=None)
        with forced(PATHS[k % 2]):
            pgas.save_hdf5(a, shared_tmp / "e.h5", "x")
        if team.rank == 0:
            assert np.array_equal(serial_read(shared_tmp / "e.h5", "x")[0], ref)
        with forced(PATHS[(k + 1) % 2]):
            b = pgas.load_hdf5(shared_tmp / "e.h5", "x", dist=CYCLIC)
        assert b.shape == shape and np.array_equal(b.to_numpy(), ref)
        a.free()
        b.free()


@pytest.mark.mpi
def test_large_cyclic_array_takes_the_blocked_path(team, shared_tmp, monkeypatch):
    """With the default rule a large CYCLIC array goes through a BLOCKED temporary (and is freed)."""
    n = (1 << 20) // 8 + 5
    a = pgas.arange(n, dtype=np.float64, dist=CYCLIC)
    used = []
    real = H._blocked_like
    monkeypatch.setattr(H, "_blocked_like", lambda x: used.append(1) or real(x))
    before = pgas.live_segments()
    pgas.save_hdf5(a, shared_tmp / "big.h5", "x")
    b = pgas.load_hdf5(shared_tmp / "big.h5", "x", dist=CYCLIC)
    assert len(used) == (2 if team.size > 1 else 0)
    assert pgas.live_segments() == before + 1
    assert np.array_equal(b.local, a.local)
    if team.rank == 0:
        assert np.array_equal(serial_read(shared_tmp / "big.h5", "x")[0], np.arange(n, dtype=np.float64))
    a.free()
    b.free()


# ---------------------------------------------------------------------- MPI: files and modes
@pytest.mark.mpi
def test_mode_a_adds_and_replaces_datasets(team, shared_tmp):
    path = shared_tmp / "multi.h5"
    x = pgas.from_numpy(reference((37, 5), np.float64), dist=(CYCLIC, NONE), root=None)
    y = pgas.from_numpy(reference((7, 5, 3), np.int32), dist=(BC(2), NONE, NONE), root=None)
    z = pgas.from_numpy(reference((11,), np.int32) + 1000, root=None)
    pgas.save_hdf5(x, path, "x", attrs={"kind": "first"})
    pgas.save_hdf5(y, path, "fields/y", attrs={"t": 0.5}, mode="a")
    pgas.save_hdf5(z, path, "x", attrs={"kind": "replaced"}, mode="a")   # other shape and dtype
    if team.rank == 0:
        with h5py.File(path, "r") as f:
            assert sorted(f.keys()) == ["fields", "x"] and list(f["fields"].keys()) == ["y"]
            assert np.array_equal(f["fields/y"][...], reference((7, 5, 3), np.int32))
            assert f["fields/y"].attrs["t"] == 0.5
            assert f["x"].dtype == np.int32 and np.array_equal(f["x"][...], reference((11,), np.int32) + 1000)
            assert dict(f["x"].attrs) == {"kind": "replaced"}
        assert sorted(os.listdir(shared_tmp)) == ["multi.h5"]
    b = pgas.load_hdf5(path, "/fields/y", dist=(BLOCKED, BLOCKED, NONE))
    assert np.array_equal(b.to_numpy(), reference((7, 5, 3), np.int32))
    for arr in (x, y, z, b):
        arr.free()


@pytest.mark.mpi
def test_mode_w_is_atomic_and_leaves_no_temporary(team, shared_tmp, monkeypatch):
    path = shared_tmp / "sub" / "dir" / "f.h5"          # missing folders are created
    seen = []                                           # what the final name holds while writing

    def spy(dset, a):
        if team.rank == 0:
            names = os.listdir(path.parent)
            old = serial_read(path, "old")[0] if path.exists() else None
            seen.append((sorted(n for n in names if n != "f.h5"), old))
        real(dset, a)

    real = H._write
    monkeypatch.setattr(H, "_write", spy)
    a = pgas.full((9, 4), 1.5, dist=(CYCLIC, NONE))
    pgas.save_hdf5(a, path, "old")
    a.local[...] = 2.5
    pgas.save_hdf5(a, path, "new", attrs={"when": np.arange(3)})
    if team.rank == 0:
        (tmp1, old1), (tmp2, old2) = seen
        assert old1 is None and len(tmp1) == 1 and tmp1[0].startswith(".f.h5.tmp")   # absent
        assert np.all(old2 == 1.5) and len(tmp2) == 1       # still the complete previous file
        with h5py.File(path, "r") as f:
            assert list(f.keys()) == ["new"]                 # a new file, not an addition
            assert np.all(f["new"][...] == 2.5) and list(f["new"].attrs["when"]) == [0, 1, 2]
        assert os.listdir(path.parent) == ["f.h5"]          # no temporary left behind
    a.free()


@pytest.mark.mpi
def test_attrs_come_from_rank_0(team, shared_tmp):
    a = pgas.zeros(5)
    pgas.save_hdf5(a, shared_tmp / "t.h5", "x", attrs={"rank": team.rank})
    if team.rank == 0:
        assert serial_read(shared_tmp / "t.h5", "x")[1] == {"rank": 0}
    a.free()


@pytest.mark.mpi
def test_sub_teams_write_their_own_files(team, shared_tmp):
    color = team.rank % 2
    sub = team.split(color)
    ref = reference((23, 3), np.float64) + color
    a = pgas.from_numpy(ref, dist=(CYCLIC, NONE), team=sub, root=None)
    pgas.save_hdf5(a, shared_tmp / f"s{color}.h5", "x")
    b = pgas.load_hdf5(shared_tmp / f"s{color}.h5", "x", team=sub, dist=(BLOCKED, NONE))
    assert b.team is sub and np.array_equal(b.to_numpy(), ref)
    a.free()
    b.free()
    team.barrier()
    sub.free()


@pytest.mark.mpi
def test_load_converts_a_foreign_byte_order(team, shared_tmp):
    path = shared_tmp / "be.h5"
    ref = reference((13, 4), ">f8")
    if team.rank == 0:
        with h5py.File(path, "w") as f:
            f.create_dataset("be", data=ref, chunks=(3, 2))         # chunked, big-endian
    team.barrier()
    b = pgas.load_hdf5(path, "be", dist=(CYCLIC, NONE))
    assert b.dtype == np.dtype("=f8") and b.dtype.isnative
    assert np.array_equal(b.to_numpy(), ref.astype(np.float64))
    b.free()


# ---------------------------------------------------------------------- MPI: bad inputs
@pytest.mark.mpi
def test_bad_inputs_raise_on_every_rank_naming_path_and_dataset(team, shared_tmp):
    path = shared_tmp / "ok.h5"
    a = pgas.zeros((6, 2))
    pgas.save_hdf5(a, path, "grp/u")
    missing = shared_tmp / "missing.h5"
    with pytest.raises(FileNotFoundError, match=f"dataset 'u' from {re.escape(str(missing))}: no such file"):
        pgas.load_hdf5(missing, "u")
    with pytest.raises(KeyError, match=f"dataset 'v' from {re.escape(str(path))}: no such dataset"):
        pgas.load_hdf5(path, "v")
    with pytest.raises(ValueError, match=f"dataset 'grp' from {re.escape(str(path))}: 'grp' is a group"):
        pgas.load_hdf5(path, "grp")
    with pytest.raises(ValueError, match=f"dataset 'grp/u' of {re.escape(str(path))} .* dist has 3 entries"):
        pgas.load_hdf5(path, "grp/u", dist=(BLOCKED, NONE, NONE))
    with pytest.raises(ValueError, match="dataset name must be a non-empty string"):
        pgas.load_hdf5(path, "")
    with pytest.raises(ValueError, match=f"no empty, '.' or '..' parts\\), got 'a/../b' \\(file {re.escape(str(path))}\\)"):
        pgas.save_hdf5(a, path, "a/../b")
    with pytest.raises(ValueError, match=f"dataset 'grp/u/v' to {re.escape(str(path))}: 'grp/u' is a dataset"):
        pgas.save_hdf5(a, path, "grp/u/v", mode="a")
    with pytest.raises(FileNotFoundError, match=f"dataset 'u' to {re.escape(str(missing))}: no such file"):
        pgas.save_hdf5(a, missing, "u", mode="a")
    with pytest.raises(ValueError, match=f"mode must be .*got 'x' \\(file {re.escape(str(missing))}, dataset 'u'\\)"):
        pgas.save_hdf5(a, missing, "u", mode="x")
    with pytest.raises(ValueError, match=f"dataset 'grp' to {re.escape(str(path))}: 'grp' is a group"):
        pgas.save_hdf5(a, path, "grp", mode="a")
    with pytest.raises(ValueError, match=f"expected a DistArray, got ndarray \\(file {re.escape(str(path))}, dataset 'u'\\)"):
        pgas.save_hdf5(np.zeros(3), path, "u")
    with pytest.raises(ValueError, match=f"attribute 'o' cannot be stored .*file {re.escape(str(path))}, dataset 'u'"):
        pgas.save_hdf5(a, path, "u", attrs={"o": object()}, mode="a")
    with pytest.raises(ValueError, match=f"dataset 'u' to {re.escape(str(shared_tmp))}: it is a directory"):
        pgas.save_hdf5(a, shared_tmp, "u")
    text = shared_tmp / "notes.txt"
    if team.rank == 0:
        text.write_text("not hdf5\n")
        with h5py.File(shared_tmp / "scalar.h5", "w") as f:
            f["s"] = 3.0
            f["str"] = np.array([b"ab", b"cd"])
    team.barrier()
    with pytest.raises(ValueError, match=f"dataset 'u' from {re.escape(str(text))}: not an HDF5 file"):
        pgas.load_hdf5(text, "u")
    with pytest.raises(ValueError, match="'s' .*scalar.h5: it is a scalar"):
        pgas.load_hdf5(shared_tmp / "scalar.h5", "s")
    with pytest.raises(ValueError, match="'str' .*scalar.h5: its type .* is not numeric"):
        pgas.load_hdf5(shared_tmp / "scalar.h5", "str")
    a.free()
    with pytest.raises(ValueError, match="the array was freed"):
        pgas.save_hdf5(a, path, "u")
    team.barrier()
    if team.rank == 0:                   # the failed saves touched nothing
        assert sorted(os.listdir(shared_tmp)) == ["notes.txt", "ok.h5", "scalar.h5"]
        with h5py.File(path, "r") as f:
            assert list(f["grp"].keys()) == ["u"]
