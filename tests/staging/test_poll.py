"""staging.poll: the one try-sleep-retry loop of the deployment (monitor, health, S3 user, gateway,
mount) and of stopping daemons, on the real clock with short deadlines."""
import time

import pytest

from hpcsuite.staging.poll import poll_until, wait_for
from hpcsuite.staging.store import StagingError


def test_returns_the_first_result_and_stops_asking():
    calls = []

    def attempt(left):
        calls.append(left)
        return "up" if len(calls) == 3 else None
    t0 = time.monotonic()
    assert poll_until("never shown", t0 + 10.0, attempt, interval=0.01) == "up"
    assert len(calls) == 3
    # the time left is handed over, and it shrinks
    assert 0 < calls[2] < calls[1] < calls[0] <= 10.0
    assert time.monotonic() - t0 < 5.0


def test_falsy_results_other_than_none_count():
    assert wait_for(lambda left: 0, time.monotonic() + 5, interval=0.01) == 0
    assert wait_for(lambda left: [], time.monotonic() + 5, interval=0.01) == []


def test_gives_up_at_the_deadline_after_a_last_try_with_the_message_made_then():
    seen = []

    def attempt(left):
        seen.append((time.monotonic(), left))
        return None
    state = {"last": "no status yet"}

    def message():
        return f"not healthy within the timeout ({state['last']}; {len(seen)} tries)"
    deadline = time.monotonic() + 0.3
    state["last"] = "1/2 OSDs up"
    with pytest.raises(StagingError, match=r"^not healthy within the timeout \(1/2 OSDs up; \d+ tries\)$") as info:
        poll_until(message, deadline, attempt, interval=0.05)
    # the last try is at the deadline (told 0 s left), not an interval before it
    assert seen[-1][1] == 0.0 and seen[-1][0] >= deadline
    assert seen[-1][0] - deadline < 1.0                     # slack for a loaded machine
    # tries an interval apart: 0.3 / 0.05 + 1 of them, fewer when the machine is slow (at least the
    # first and the last), never more
    assert 2 <= len(seen) <= 7, len(seen)
    assert all(b[0] - a[0] >= 0.049 or b[1] == 0.0 for a, b in zip(seen, seen[1:])), seen
    assert f"{len(seen)} tries" in str(info.value)


def test_a_plain_message_and_a_passed_deadline_still_try_once():
    tried = []
    with pytest.raises(StagingError, match=r"^ceph: ceph-fuse did not mount /x in time$"):
        poll_until("ceph: ceph-fuse did not mount /x in time", time.monotonic() - 1.0,
                   lambda left: tried.append(left), interval=0.1)
    assert tried == [0.0]
    assert wait_for(lambda left: None, time.monotonic() - 1.0, interval=0.1) is None


def test_an_error_raised_by_an_attempt_ends_the_wait_at_once():
    def attempt(left):
        raise StagingError("ceph: mon.a exited with code 1 during start-up")
    t0 = time.monotonic()
    with pytest.raises(StagingError, match="mon.a exited"):
        poll_until("timeout", t0 + 10.0, attempt, interval=1.0)
    assert time.monotonic() - t0 < 1.0


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match="interval must be > 0 seconds, got 0"):
        wait_for(lambda left: 1, time.monotonic() + 1, interval=0)
