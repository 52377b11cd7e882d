"""Where a rados write's time goes: python-rados asynchronous writes of 4 MiB objects (bare, with
the 200-byte record tail and the xattr hpcsuite's head write adds, 32 in flight) beside
``rados bench`` and hpcsuite's ``put_many``, interleaved, on a 1-OSD Ceph on RAM (issue 23).

    flock /tmp/hpcsuite-ceph.lock .venv/bin/python bench/staging_rados_paths.py [repetitions]

Prints each repetition's MB/s and the medians.
"""
import os
import statistics
import sys
import time
from pathlib import Path
if {"-h", "--help"} & set(sys.argv[1:]):
    sys.exit(__doc__)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import rados  # noqa: E402
import staging_throughput as B  # noqa: E402

from hpcsuite.staging import down, up  # noqa: E402

d = Path(f"/dev/shm/lead-exp-{os.getpid()}")
st = up(d, "rados", osd_bytes=4 << 30, objectstore="bluestore", log=lambda m: None)
try:
    data = B.payloads(64)
    cl = rados.Rados(conffile=st["conf"]); cl.connect()
    io = cl.open_ioctx(st["pool"])
    def raw(tail: bool, inflight=16, xattr=False, name="x"):
        t0 = time.perf_counter(); q = []
        for i, dta in enumerate(data):
            while len(q) >= inflight:
                q.pop(0).wait_for_complete()
            op = io.create_write_op()
            op.write_full(dta)
            if tail:
                op.write(b"r" * 200, len(dta))
            if xattr:
                op.set_xattr("rec", b"r" * 200)
            q.append((io.operate_aio_write_op(op, f"{name}{i}"), op)[0])
        for c in q: c.wait_for_complete()
        dt = time.perf_counter() - t0
        for i in range(64): io.remove_object(f"{name}{i}")
        return 64 * 4 / dt * 1.048576
    from hpcsuite.staging.radosstore import RadosStore
    s = RadosStore(st["conf"], st["pool"], inflight=16)
    rows = {k: [] for k in ["bench", "raw", "raw+tail", "raw+xattr", "raw+tail+xattr", "ours", "raw32"]}
    for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        rows["bench"].append(B.rados_bench(st["conf"], st["pool"], 64, 16)["write"])
        rows["raw"].append(raw(False))
        rows["raw+tail"].append(raw(True))
        rows["raw+xattr"].append(raw(False, xattr=True))
        rows["raw+tail+xattr"].append(raw(True, xattr=True))
        rows["raw32"].append(raw(False, inflight=32))
        rows["ours"].append(B.store_round(s, data, batch=True)["write"])
        print(r, {k: round(v[-1]) for k, v in rows.items()}, flush=True)
    print({k: round(statistics.median(v)) for k, v in rows.items()})
    s.close(); io.close(); cl.shutdown()
finally:
    down(d)
