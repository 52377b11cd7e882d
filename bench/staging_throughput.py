"""Store throughput for 4 MiB objects against what the store stands on, in one run: hpcsuite's
rados client against Ceph's own ``rados bench`` on the same 1-node RAM cluster (the same object
count, size and operations in flight on both sides), and the tmpfs store against a plain copy to
``/dev/shm`` (the same files, one at a time on both sides); plus the deploy and teardown time of
that cluster (goal: usable in under 15 s, gone in under 5 s).

Goals (issue 23): tmpfs store >= 0.8x the plain copy, rados >= 0.9x ``rados bench``, for writes and
reads, with every object checksummed on write and verified on read (``rados bench seq`` verifies
the contents it reads as well). The repetitions of each side are interleaved (the peer first in even
repetitions, last in odd ones) and the medians of the per-repetition ratios are reported, with
their range. Beside the wall-clock rates, the CPU seconds per GB each side costs (this process's
threads, rados bench's, and the Ceph daemons'): on a shared machine, where other load moves the
wall-clock rates by tens of percent, the CPU cost of the same transfer hardly moves, and a side
that costs less CPU moves more bytes when CPU is what limits both.

Run (single process; it deploys and removes its own cluster):
    .venv/bin/python bench/staging_throughput.py [--objects 64] [--repeat 5] [--inflight 16]
        [--checksum xxh3-128|sha256|crc32] [--store bluestore|memstore] [--skip-rados]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from hpcsuite.staging import TmpfsStore, down, open_store, up

MiB = 1 << 20
OBJ = 4 * MiB


def rate(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def payloads(n: int) -> list[bytes]:
    """``n`` different 4 MiB random payloads (made once, outside every timing)."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, OBJ, dtype=np.uint8).tobytes() for _ in range(n)]


#: PIDs of the Ceph daemons whose CPU time counts with each measurement (empty for tmpfs)
DAEMONS: list[int] = []


def cpu_now() -> float:
    """CPU seconds used so far by this process (every thread), its waited-for children (rados
    bench) and the cluster's daemons: the work a transfer costs, which other load on a shared
    machine hardly changes (unlike its wall time)."""
    import resource
    import psutil
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + c.ru_utime + c.ru_stime
    for pid in DAEMONS:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def timed(fn) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of ``fn()``."""
    c0, t0 = cpu_now(), time.perf_counter()
    fn()
    t1 = time.perf_counter()
    return t1 - t0, cpu_now() - c0


def result(nbytes: int, w: tuple[float, float], r: tuple[float, float]) -> dict:
    """MB/s (wall) and CPU seconds per GB of a write and a read of ``nbytes``."""
    return {"write": rate(nbytes, w[0]), "read": rate(nbytes, r[0]),
            "write_cpu": w[1] / nbytes * 1e9, "read_cpu": r[1] / nbytes * 1e9}


def daemon_pids(st: dict) -> list[int]:
    """The PIDs of a deployment's daemons (state.json and the node folder's pid files)."""
    import json
    pids = [d["pid"] for d in st.get("daemons", [])]
    for f in (Path(st["node_dir"]) / "pids").glob("*.json"):
        pids.append(json.loads(f.read_text())["pid"])
    return sorted(set(pids))


def store_round(store, data: list[bytes], batch: bool) -> dict:
    """MB/s writing then reading ``len(data)`` separate 4 MiB objects: one call per object
    (``batch=False``: one object at a time) or one ``put_many``/``iter_many`` (several in flight)."""
    n = len(data)
    names = [f"bench/{i}" for i in range(n)]
    got = []                  # (each object read is dropped after use, as the plain copy does)
    if batch:
        tw = timed(lambda: store.put_many(zip(names, data)))
        tr = timed(lambda: got.extend(len(b) for _, b in store.iter_many(names)))
    else:
        tw = timed(lambda: [store.put_bytes(k, d) for k, d in zip(names, data)])
        tr = timed(lambda: got.extend(len(store.get_bytes(k)) for k in names))
    assert got == [OBJ] * n
    for k in names:
        store.delete(k)
    return result(n * OBJ, tw, tr)


def store_stream(store, data: list[bytes]) -> dict:
    """MB/s writing one object of ``len(data)`` x 4 MiB through a writer, and reading it back."""
    def write():
        with store.writer("bench/stream") as w:
            for d in data:
                w.write(d)

    def read():
        with store.open("bench/stream") as f:
            while f.read(OBJ):
                pass
    tw, tr = timed(write), timed(read)
    store.delete("bench/stream")
    return result(len(data) * OBJ, tw, tr)


def plain_copy(data: list[bytes]) -> dict:
    """Plain file writes and reads of the same 4 MiB files in a fresh /dev/shm folder, one at a time
    (no checksum, no rename, no record)."""
    d = Path(f"/dev/shm/bench-copy-{os.getpid()}")
    d.mkdir()
    try:
        def write():
            for i, b in enumerate(data):
                with open(d / str(i), "wb") as f:
                    f.write(b)

        def read():
            for i in range(len(data)):
                with open(d / str(i), "rb") as f:
                    f.read()
        tw, tr = timed(write), timed(read)
    finally:
        shutil.rmtree(d)
    return result(len(data) * OBJ, tw, tr)


def rados_bench(conf: str, pool: str, objects: int, threads: int) -> dict:
    """``rados bench`` writing ``objects`` 4 MiB objects with ``threads`` in flight, then ``seq``
    reading them back (verifying their contents) with as many in flight."""
    base = ["rados", "-c", conf, "-p", pool]
    out = {}
    for mode, extra in (("write", ["-b", str(OBJ), "-O", str(OBJ), "--max-objects", str(objects),
                                   "--no-cleanup"]), ("seq", [])):
        argv = base + ["bench", "120", mode, "-t", str(threads), "--run-name", "hpcsuite-bench"] + extra
        box = {}
        _, cpu = timed(lambda: box.update(p=subprocess.run(argv, capture_output=True, text=True, timeout=600)))
        p = box["p"]
        m = re.search(r"Bandwidth \(MB/sec\):\s+([0-9.]+)", p.stdout)
        if not m:
            raise SystemExit(f"rados bench {mode} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        key = "write" if mode == "write" else "read"
        out[key] = float(m.group(1)) * MiB / 1e6                    # its "MB" are MiB
        out[key + "_cpu"] = cpu / (objects * OBJ) * 1e9    # (its start-up included: a little against it)
    subprocess.run(base + ["cleanup", "--run-name", "hpcsuite-bench"], capture_output=True, timeout=300)
    return out


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def ratio(rows: list[dict], refs: list[dict], key: str) -> float:
    """Median over the repetitions of (this side / the peer of the same repetition)."""
    return statistics.median(r[key] / p[key] for r, p in zip(rows, refs))


def spread(rows: list[dict], refs: list[dict], key: str) -> str:
    """The lowest and highest per-repetition ratio (how much the machine moved the numbers)."""
    q = sorted(r[key] / p[key] for r, p in zip(rows, refs))
    return f"{q[0]:.2f}-{q[-1]:.2f}"


def cpu_ratio(rows: list[dict], refs: list[dict], key: str) -> float:
    """Median over the repetitions of (the peer's CPU seconds / this side's) for the same bytes:
    above 1 this side costs less CPU than the peer."""
    return statistics.median(p[key + "_cpu"] / r[key + "_cpu"] for r, p in zip(rows, refs))


def table(title: str, peer_label: str, peer: list[dict], sides: list[tuple[str, list[dict]]]) -> list[str]:
    lines = [title, f"{'store / path':<52}{'write MB/s':>11}{'read MB/s':>11}{'write ratio':>13}{'read ratio':>12}"
             f"{'(range w / r)':>24}{'CPU s/GB w / r':>17}{'CPU ratio w / r':>17}",
             f"{peer_label:<52}{med(peer, 'write'):11.0f}{med(peer, 'read'):11.0f}{1:13.2f}{1:12.2f}{'':>24}"
             f"{med(peer, 'write_cpu'):>8.2f} / {med(peer, 'read_cpu'):<6.2f}{1:>9.2f} / {1:<5.2f}"]
    for label, rows in sides:
        lines.append(f"{label:<52}{med(rows, 'write'):11.0f}{med(rows, 'read'):11.0f}"
                     f"{ratio(rows, peer, 'write'):13.2f}{ratio(rows, peer, 'read'):12.2f}"
                     f"{spread(rows, peer, 'write') + ' / ' + spread(rows, peer, 'read'):>24}"
                     f"{med(rows, 'write_cpu'):>8.2f} / {med(rows, 'read_cpu'):<6.2f}"
                     f"{cpu_ratio(rows, peer, 'write'):>9.2f} / {cpu_ratio(rows, peer, 'read'):<5.2f}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=64, help="4 MiB objects per repetition")
    ap.add_argument("--repeat", type=int, default=7, help="interleaved repetitions (medians shown)")
    ap.add_argument("--inflight", type=int, default=16, help="operations in flight (rados bench -t, ours)")
    ap.add_argument("--checksum", default=None, help="xxh3-128 (default), sha256 or crc32")
    ap.add_argument("--osd-gib", type=int, default=4, help="OSD size: must hold what one repetition writes")
    ap.add_argument("--store", default="bluestore", choices=("bluestore", "memstore"))
    ap.add_argument("--skip-rados", action="store_true", help="the tmpfs half only (no Ceph)")
    a = ap.parse_args()
    data = payloads(a.objects)
    n, out = a.objects, []
    if not a.skip_rados:
        d = Path(f"/dev/shm/bench-throughput-{os.getpid()}")
        t0 = time.perf_counter()
        st = up(d, "rados", osd_bytes=a.osd_gib << 30, objectstore=a.store, log=lambda m: None)
        deploy = time.perf_counter() - t0
        DAEMONS[:] = daemon_pids(st)
        peer, batch, stream, single = [], [], [], []
        try:
            from hpcsuite.staging.radosstore import RadosStore
            with RadosStore(st["conf"], st["pool"], checksum=a.checksum, inflight=a.inflight) as s:
                alg = s.checksum
                for r in range(a.repeat):          # peer first in even repetitions, last in odd ones
                    if r % 2 == 0:
                        peer.append(rados_bench(st["conf"], st["pool"], n, a.inflight))
                    batch.append(store_round(s, data, batch=True))
                    stream.append(store_stream(s, data))
                    single.append(store_round(s, data, batch=False))
                    if r % 2 == 1:
                        peer.append(rados_bench(st["conf"], st["pool"], n, a.inflight))
                    print(f"rados rep {r}: bench {peer[-1]}, put_many/iter_many {batch[-1]}, "
                          f"stream {stream[-1]}, one at a time {single[-1]}", file=sys.stderr, flush=True)
        finally:
            DAEMONS.clear()
            t0 = time.perf_counter()
            down(d)
            teardown = time.perf_counter() - t0
        out += table(f"## rados: {n} objects of 4 MiB per repetition, {a.inflight} in flight on both sides, "
                     f"checksum {alg}; Ceph 1 OSD {a.store} on /dev/shm; median of {a.repeat} interleaved repetitions",
                     f"rados bench write/seq -t {a.inflight} (peer)", peer,
                     [(f"hpcsuite rados put_many/iter_many", batch),
                      (f"hpcsuite rados, one object streamed ({n} x 4 MiB)", stream),
                      ("hpcsuite rados put_bytes/get_bytes, one at a time", single)])
        out.append(f"1-node rados deploy (usable) {deploy:.1f} s (goal < 15 s), teardown {teardown:.1f} s (goal < 5 s)")
        rpeer, rbatch = peer, batch
    tdir = Path(f"/dev/shm/bench-tmpfs-{os.getpid()}")
    peer, single, batch, stream = [], [], [], []
    try:
        s = TmpfsStore(tdir, checksum=a.checksum)
        for r in range(a.repeat):              # peer first in even repetitions, last in odd ones
            if r % 2 == 0:
                peer.append(plain_copy(data))
            single.append(store_round(s, data, batch=False))
            batch.append(store_round(s, data, batch=True))
            stream.append(store_stream(s, data))
            if r % 2 == 1:
                peer.append(plain_copy(data))
            print(f"tmpfs rep {r}: copy {peer[-1]}, one at a time {single[-1]}, stream {stream[-1]}",
                  file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tdir, ignore_errors=True)
    out += table(f"## tmpfs: {n} objects of 4 MiB per repetition, one at a time on both sides, checksum "
                 f"{s.checksum}; median of {a.repeat} interleaved repetitions",
                 "plain copy to /dev/shm (peer: open/write, open/read)", peer,
                 [("hpcsuite tmpfs put_bytes/get_bytes, one at a time", single),
                  ("hpcsuite tmpfs put_many/iter_many", batch),
                  (f"hpcsuite tmpfs, one object streamed ({n} x 4 MiB)", stream)])
    goals = [f"tmpfs write {ratio(single, peer, 'write'):.2f} read {ratio(single, peer, 'read'):.2f} "
             f"(CPU {cpu_ratio(single, peer, 'write'):.2f} / {cpu_ratio(single, peer, 'read'):.2f}; goal >= 0.8)"]
    if not a.skip_rados:
        goals.insert(0, f"rados write {ratio(rbatch, rpeer, 'write'):.2f} read {ratio(rbatch, rpeer, 'read'):.2f} "
                        f"(CPU {cpu_ratio(rbatch, rpeer, 'write'):.2f} / {cpu_ratio(rbatch, rpeer, 'read'):.2f}; "
                        "goal >= 0.9)")
    out.append("goals: " + "; ".join(goals))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
