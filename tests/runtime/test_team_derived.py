"""``Team.derived``: communicators derived from a team are made once, kept with it, and freed with
it (newest first) or at exit, checked against independent arithmetic and MPI's own state."""
import os
import subprocess
import sys

import pytest
from mpi4py import MPI

from hpcsuite.runtime import Team


class _Recorder:
    """Something with a ``free()``, recording the order of frees."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def free(self):
        self.log.append(self.name)


def test_made_once_per_key_and_freed_newest_first():
    team = Team(MPI.COMM_SELF.Dup())
    log, made = [], []

    def make(name):
        def f(t):
            assert t is team
            made.append(name)
            return _Recorder(name, log)
        return f

    a = team.derived(("a",), make("a"))
    assert team.derived(("a",), make("again")) is a          # kept: make not called again
    b = team.derived(("b", 2), make("b"))
    assert b is not a and made == ["a", "b"]
    team.free()
    assert log == ["b", "a"]                                  # newest first, each once
    assert team.comm == MPI.COMM_NULL


def test_a_communicator_is_freed_with_its_team():
    team = Team(MPI.COMM_SELF.Dup())
    dup = team.derived(("dup",), lambda t: t.comm.Dup())
    assert isinstance(dup, MPI.Comm) and dup.Get_size() == 1
    team.free()
    assert dup == MPI.COMM_NULL                               # mpi4py nulls a freed handle


@pytest.mark.mpi
def test_derived_split_matches_the_arithmetic(team):
    sub = team.split(0)                                       # a team of its own, freed below
    try:
        halves = sub.derived(("test.halves",), lambda t: t.split(t.rank % 2))
        assert sub.derived(("test.halves",), lambda t: pytest.fail("made twice")) is halves
        same = [r for r in range(sub.size) if r % 2 == sub.rank % 2]
        assert halves.allgather(sub.rank) == same
    finally:
        sub.free()
    assert halves.comm == MPI.COMM_NULL


@pytest.mark.mpi
def test_the_pgas_node_communicator_is_kept_with_the_team(team):
    from hpcsuite.pgas.memory import node_comm
    sub = team.split(0)
    try:
        nc = node_comm(sub)
        assert node_comm(sub) is nc and sub.node_team().comm is nc     # one node split per team
        # independent: the ranks on the same node (SLURM's node name inside a job: the local test
        # cluster's nodes share one host name; else the processor name) share the node
        me = os.environ.get("SLURMD_NODENAME") or MPI.Get_processor_name()
        assert nc.Get_size() == sub.allgather(me).count(me)
    finally:
        sub.free()
    assert nc == MPI.COMM_NULL


def test_what_is_kept_is_freed_at_exit_before_mpi_finalises():
    # a world team's derived communicators (never freed by the program) go at exit without error
    code = ("from hpcsuite.runtime import Team\n"
            "t = Team.world()\n"
            "t.node_team()\n"
            "t.derived(('dup',), lambda t: t.comm.Dup())\n"
            "print('done')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr[-2000:]
    assert "error" not in p.stderr.lower(), p.stderr[-2000:]
