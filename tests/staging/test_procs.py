"""staging.procs on real processes: the recorded start time is /proc/<pid>/stat's (what the bash
epilog and earlier records compare), a recycled PID is never taken for the daemon, and stop_all
stops children, orphans (whose exit leaves a zombie nobody may collect) and processes that ignore
SIGTERM."""
import json
import os
import subprocess
import time

import pytest

from hpcsuite.staging import procs


def proc_stat_start(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat, read as jobscripts/stage-epilog.sh reads it."""
    raw = open(f"/proc/{pid}/stat").read()
    return int(raw[raw.rindex(")") + 2:].split()[19])


@pytest.fixture
def started(tmp_path):
    """procs.start() of a sleeper; killed afterwards if a test left it running."""
    made = []

    def start(argv=("sleep", "60"), name="sleeper"):
        proc, popen = procs.start(name, list(argv), tmp_path / f"{name}.out")
        made.append(popen)
        return proc, popen
    yield start
    for p in made:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_the_record_holds_procs_start_time_in_clock_ticks(started):
    proc, _ = started()
    assert proc.start == proc_stat_start(proc.pid) > 0
    assert procs.start_ticks(proc.pid) == proc.start
    assert procs.start_ticks(os.getpid()) == proc_stat_start(os.getpid())
    assert procs.alive(proc)


def test_old_records_read_and_a_recycled_pid_is_not_the_daemon(started):
    proc, _ = started()
    # a record as earlier versions wrote it (state.json, pids/*.json): the same fields
    old = json.loads(json.dumps({"name": "osd.0", "pid": proc.pid, "start": proc_stat_start(proc.pid),
                                 "log": "/x/osd.0.out", "host": "n1"}))
    assert procs.alive(procs.Proc(**old))
    assert procs.alive(procs.Proc("osd.0", proc.pid, 0, ""))            # start unknown: PID only
    other = procs.Proc("osd.0", proc.pid, proc.start + 1, "")           # the PID, another process
    assert not procs.alive(other)
    assert procs.stop_all([other], grace=0.2) == []
    assert procs.alive(proc), "a process whose start time differs from the record was signalled"


def test_stop_all_stops_and_collects_own_children(started):
    a, pa = started(name="a")
    b, pb = started(name="b")
    t0 = time.monotonic()
    assert procs.stop_all([a, b], grace=5.0) == []
    assert time.monotonic() - t0 < 4.0
    assert not procs.alive(a) and not procs.alive(b)
    with pytest.raises(ChildProcessError):     # collected: no zombie of ours left behind
        os.waitpid(a.pid, os.WNOHANG)
    assert procs.stop_all([a, b]) == []        # again: nothing to do


def test_stop_all_does_not_wait_for_an_orphans_zombie():
    """A daemon whose starter has exited belongs to PID 1, which in containers may never collect
    it: once it has exited it is gone, not running until the grace time."""
    out = subprocess.run(["bash", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True).stdout
    pid = int(out)
    orphan = procs.Proc("orphan", pid, procs.start_ticks(pid), "")
    try:
        assert procs.alive(orphan)
        t0 = time.monotonic()
        assert procs.stop_all([orphan], grace=5.0) == []
        assert time.monotonic() - t0 < 2.5
        assert not procs.alive(orphan)
    finally:
        if procs.alive(orphan):
            os.kill(pid, 9)


def test_sigterm_ignored_means_sigkill_after_the_grace(started):
    proc, _ = started(["bash", "-c", "trap '' TERM; exec sleep 60"], name="stubborn")
    for _ in range(100):                       # until bash has set the trap and exec'd sleep
        if open(f"/proc/{proc.pid}/comm").read().strip() == "sleep":
            break
        time.sleep(0.02)
    t0 = time.monotonic()
    assert procs.stop_all([proc], grace=0.5) == []
    took = time.monotonic() - t0
    assert 0.5 <= took < 3.0, took
    assert not procs.alive(proc)


def test_tail_of_a_log(tmp_path):
    f = tmp_path / "x.log"
    f.write_text("one\n\n two \nthree\n" + "x" * 400 + "\n")
    assert procs.tail(f, lines=3, width=5) == "two | three | xxxxx"
    assert procs.tail(tmp_path / "missing.log") == ""
