"""Collective stage-in/out on the tmpfs backend at 1-4 ranks: every file arrives once, with the
original bytes (compared on rank 0 with the source files), the work is shared, and errors are the
same on every rank (no hang)."""
import hashlib
import os

import pytest

from hpcsuite.runtime import InputError
from hpcsuite.staging import StagingError, TmpfsStore, stage_in, stage_out

pytestmark = pytest.mark.mpi


def _tree(root, team):
    files = {}
    if team.rank == 0:
        (root / "src" / "d").mkdir(parents=True)
        for i in range(7):
            data = os.urandom(1000 * (i + 1) + (5 << 20 if i == 3 else 0))
            rel = f"d/f{i}" if i % 2 else f"f{i}"
            (root / "src" / rel).write_bytes(data)
            files[rel] = hashlib.sha256(data).hexdigest()
    return team.bcast(files)


def test_stage_in_out_every_rank_moves_its_share(team, shared_tmp):
    files = _tree(shared_tmp, team)
    store = TmpfsStore(shared_tmp / "store", checksum="sha256")    # comparable with hashlib below
    names = stage_in(store, shared_tmp / "src", team, name="run")
    assert names == sorted(f"run/{r}" for r in files)
    mine = [n for n in names if store.exists(n)]
    assert len(mine) == len(files)
    paths = stage_out(store, "run", shared_tmp / "out", team)
    team.barrier()
    assert len(paths) == len(files)
    for rel, digest in files.items():
        assert hashlib.sha256((shared_tmp / "out" / rel).read_bytes()).hexdigest() == digest
        assert store.info(f"run/{rel}").checksum == digest


def test_errors_are_collective(team, shared_tmp):
    store = TmpfsStore(shared_tmp / "store2")
    with pytest.raises(InputError, match="no such file"):
        stage_in(store, shared_tmp / "missing", team)
    with pytest.raises(StagingError, match="no object 'absent'"):
        stage_out(store, "absent", shared_tmp / "o", team)
    if team.rank == 0:
        store.put_bytes("bad/x", b"x" * 100)
        store.put_bytes("bad/y", b"y" * 100)
        with open(store.path("bad/y"), "r+b") as f:
            f.write(b"z")
    team.barrier()
    with pytest.raises(StagingError, match="checksum mismatch"):
        stage_out(store, "bad", shared_tmp / "o2", team)
