"""The error paths: collective agreement on bad input, and abort of the whole job on a failure."""
from pathlib import Path

import pytest

from hpcsuite.runtime import InputError, agree

PROG = Path(__file__).resolve().parents[1] / "progs" / "fail_on_one_rank.py"


@pytest.mark.parametrize("mode", ["guarded", "hook"])
@pytest.mark.parametrize("nranks,bad", [(4, 2), (4, 0), (2, 1)])
def test_failure_on_one_rank_ends_every_rank_quickly(run, nranks, bad, mode):
    import sys
    p = run([sys.executable, PROG, bad, mode], nranks=nranks, timeout=60)
    assert p.returncode != 0
    assert p.seconds < 30, f"took {p.seconds:.1f} s to abort"
    # the failing rank's message, exactly once
    assert p.stderr.count(f"deliberate failure on rank {bad}") >= 1
    assert p.stderr.count(f"hpcsuite: rank {bad} of {nranks}: RuntimeError: deliberate failure") == 1


@pytest.mark.mpi
def test_agree_raises_the_same_error_on_every_rank(team):
    def check():
        if team.rank == team.size - 1:
            raise InputError(f"bad value on rank {team.rank}")
        return "fine"

    with pytest.raises(InputError) as e:
        agree(team, check)
    assert str(e.value) == f"bad value on rank {team.size - 1}"
    # the lowest failing rank wins, and other exception types are carried as InputError
    def check2():
        if team.rank >= 0:
            raise KeyError(f"k{team.rank}")

    with pytest.raises(InputError, match="KeyError: 'k0'"):
        agree(team, check2)
    assert agree(team, lambda: team.rank) == team.rank
