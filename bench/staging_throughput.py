"""Store throughput for 4 MiB objects: hpcsuite's rados client against Ceph's own ``rados bench``
on the same 1-node RAM cluster, and the tmpfs store against a plain copy to ``/dev/shm``; plus the
deploy and teardown time of that cluster (goal: usable in under 15 s, gone in under 5 s).

Run (single process; it deploys and removes its own cluster):
    .venv/bin/python bench/staging_throughput.py [--objects 64] [--seconds 5] [--store bluestore]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from hpcsuite.staging import TmpfsStore, down, open_store, up

MiB = 1 << 20


def rate(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def store_rates(store, n: int) -> dict:
    """MB/s writing/reading ``n`` separate 4 MiB objects, and one ``n x 4 MiB`` streamed object."""
    data = np.random.default_rng(0).integers(0, 256, 4 * MiB, dtype=np.uint8).tobytes()
    t0 = time.perf_counter()
    for i in range(n):
        store.put_bytes(f"bench/{i}", data)
    t1 = time.perf_counter()
    for i in range(n):
        store.get_bytes(f"bench/{i}")
    t2 = time.perf_counter()
    with store.writer("bench/stream") as w:
        for _ in range(n):
            w.write(data)
    t3 = time.perf_counter()
    with store.open("bench/stream") as f:
        while f.read(4 * MiB):
            pass
    t4 = time.perf_counter()
    for i in range(n):
        store.delete(f"bench/{i}")
    store.delete("bench/stream")
    nb = n * 4 * MiB
    return {"put": rate(nb, t1 - t0), "get": rate(nb, t2 - t1), "stream_put": rate(nb, t3 - t2),
            "stream_get": rate(nb, t4 - t3)}


def shm_copy(n: int) -> dict:
    """Plain file writes/reads of ``n`` 4 MiB files in /dev/shm (no checksum, no rename)."""
    d = Path(f"/dev/shm/bench-copy-{os.getpid()}")
    d.mkdir()
    data = np.random.default_rng(0).integers(0, 256, 4 * MiB, dtype=np.uint8).tobytes()
    try:
        t0 = time.perf_counter()
        for i in range(n):
            with open(d / str(i), "wb") as f:
                f.write(data)
        t1 = time.perf_counter()
        for i in range(n):
            with open(d / str(i), "rb") as f:
                f.read()
        t2 = time.perf_counter()
    finally:
        shutil.rmtree(d)
    return {"put": rate(n * 4 * MiB, t1 - t0), "get": rate(n * 4 * MiB, t2 - t1)}


def rados_bench(conf: str, pool: str, seconds: int, threads: int) -> dict:
    out = {}
    for mode in ("write", "seq"):
        argv = ["rados", "-c", conf, "-p", pool, "bench", str(seconds), mode, "-t", str(threads)]
        if mode == "write":
            argv += ["-b", str(4 * MiB), "--no-cleanup"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 6 + 60)
        m = re.search(r"Bandwidth \(MB/sec\):\s+([0-9.]+)", p.stdout)
        if not m:
            raise SystemExit(f"rados bench {mode} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        out[mode] = float(m.group(1)) * MiB / 1e6          # rados bench's "MB" are MiB
    subprocess.run(["rados", "-c", conf, "-p", pool, "cleanup"], capture_output=True, timeout=120)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=4, help="duration of each rados bench phase")
    ap.add_argument("--osd-gib", type=int, default=8, help="OSD size: must hold what rados bench writes")
    ap.add_argument("--threads", type=int, default=16, help="rados bench operations in flight")
    ap.add_argument("--store", default="bluestore", choices=("bluestore", "memstore"))
    a = ap.parse_args()
    d = Path(f"/dev/shm/bench-throughput-{os.getpid()}")
    t0 = time.perf_counter()
    st = up(d, "rados", osd_bytes=a.osd_gib << 30, objectstore=a.store, log=lambda m: None)
    deploy = time.perf_counter() - t0
    try:
        with open_store(d) as s:
            ours = store_rates(s, a.objects)
        peer = rados_bench(st["conf"], st["pool"], a.seconds, a.threads)
    finally:
        t0 = time.perf_counter()
        down(d)
        teardown = time.perf_counter() - t0
    tdir = Path(f"/dev/shm/bench-tmpfs-{os.getpid()}")
    try:
        tm = store_rates(TmpfsStore(tdir), a.objects)
    finally:
        shutil.rmtree(tdir, ignore_errors=True)
    cp = shm_copy(a.objects)
    n = a.objects
    print(f"## staging store throughput, 4 MiB objects (1 process; {n} objects = {n * 4} MiB; Ceph 1 OSD "
          f"{a.store} on /dev/shm; rados bench {a.seconds} s, {a.threads} in flight)")
    print(f"{'store / path':<44}{'write MB/s':>11}{'read MB/s':>11}{'write ratio':>13}{'read ratio':>12}")
    rows = [("rados bench (peer, -t %d)" % a.threads, peer["write"], peer["seq"], None),
            ("hpcsuite rados, one object at a time", ours["put"], ours["get"], peer),
            ("hpcsuite rados, one streamed object", ours["stream_put"], ours["stream_get"], peer),
            ("plain copy to /dev/shm (peer)", cp["put"], cp["get"], None),
            ("hpcsuite tmpfs, one object at a time", tm["put"], tm["get"], cp),
            ("hpcsuite tmpfs, one streamed object", tm["stream_put"], tm["stream_get"], cp)]
    for label, w, r, ref in rows:
        rw = w / (ref["write"] if "write" in ref else ref["put"]) if ref else 1.0
        rr = r / (ref["seq"] if "seq" in ref else ref["get"]) if ref else 1.0
        print(f"{label:<44}{w:11.0f}{r:11.0f}{rw:13.2f}{rr:12.2f}")
    print(f"1-node rados deploy (usable) {deploy:.1f} s (goal < 15 s), teardown {teardown:.1f} s (goal < 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
