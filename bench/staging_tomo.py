"""The tomography pipeline (hpcsuite/apps/tomo.py) with its intermediates on local disk with fsync (a
stand-in for central storage), on tmpfs, and on Ceph in RAM (rados objects, cephfs parallel HDF5,
s3), the median of a few runs each; prints I/O time, total time and their ratios to the disk run, and the 1-node
deploy/teardown time of each Ceph backend. (The DisTRaC paper: Savu spent 81% less time on I/O
with Ceph on RAM than with GPFS, 8% less in total.)

Run (not under mpiexec; it starts the ranks itself):
    .venv/bin/python bench/staging_tomo.py [--ranks 2] [--size 128] [--slices 16] [--angles 180]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HPC, MPIEXEC = str(BIN / "hpcsuite"), str(BIN / "mpiexec")


def deck(tmp: Path, tag: str, a, backend: str, sdir: str = "", disk_dir: str = "") -> Path:
    p = tmp / f"{tag}.toml"
    p.write_text(f"""[app]\nname = "tomo"\n[phantom]\nsize = {a.size}\nslices = {a.slices}\nangles = {a.angles}
[staging]\nbackend = "{backend}"\ndir = "{sdir}"\ndisk_dir = "{disk_dir}"\n[output]\nfile = "{tmp / (tag + '.h5')}"
max_error = 0.5\n""")
    return p


def run_median(path: Path, ranks: int, repeat: int) -> dict:
    """The run with the median total time of ``repeat`` runs."""
    runs = sorted((run_tomo(path, ranks) for _ in range(repeat)), key=lambda r: r["total"])
    return runs[len(runs) // 2]


def run_tomo(path: Path, ranks: int) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([MPIEXEC, "-n", str(ranks), HPC, "run", str(path)], capture_output=True, text=True,
                       timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"tomo failed on {path}:\n{p.stdout}\n{p.stderr}")
    m = re.search(r"timing: io ([0-9.]+) s, compute ([0-9.]+) s, total ([0-9.]+) s \(([0-9.]+) MiB", p.stdout)
    e = re.search(r"relative L2 = ([0-9.]+)", p.stdout)
    return {"io": float(m.group(1)), "compute": float(m.group(2)), "total": float(m.group(3)),
            "mib": float(m.group(4)), "error": float(e.group(1)), "wall": wall}


def stage(*args, timeout=300) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([HPC, "stage", *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"hpcsuite stage {' '.join(map(str, args))} failed:\n{p.stdout}\n{p.stderr}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--slices", type=int, default=32)
    ap.add_argument("--angles", type=int, default=360)
    ap.add_argument("--repeat", type=int, default=3, help="runs per backend (the median is shown)")
    ap.add_argument("--backends", default="disk,tmpfs,rados,cephfs,s3")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-tomo-", dir=ROOT / "out" if (ROOT / "out").is_dir() else None) as t:
        tmp = Path(t)
        for b in a.backends.split(","):
            if b == "disk":
                rows[b] = run_median(deck(tmp, b, a, "disk", disk_dir=str(tmp / "disk-intermediate")), a.ranks, a.repeat)
            elif b == "tmpfs":
                rows[b] = run_median(deck(tmp, b, a, "tmpfs", sdir=str(tmp / "no-deployment")), a.ranks, a.repeat)
            else:
                d = Path(f"/dev/shm/bench-tomo-{b}")
                up = stage("up", "--backend", b, "--osd-size", "2G", "--dir", d, "-q")
                try:
                    rows[b] = run_median(deck(tmp, b, a, b, sdir=str(d)), a.ranks, a.repeat)
                finally:
                    down = stage("down", "--dir", d)
                rows[b].update(deploy=up, teardown=down)
            print(f"{b}: {rows[b]}", file=sys.stderr, flush=True)
    ref = rows.get("disk")
    print(f"## tomo pipeline, {a.slices} slices of {a.size}x{a.size}, {a.angles} angles, {a.ranks} ranks, median "
          f"of {a.repeat} runs each ({rows[next(iter(rows))]['mib']:.0f} MiB of intermediates moved per run)")
    print(f"{'intermediates on':<22}{'I/O s':>8}{'total s':>9}{'I/O vs disk':>13}{'I/O saved':>11}"
          f"{'total vs disk':>15}{'error':>8}{'deploy s':>10}{'down s':>8}")
    for b, r in rows.items():
        label = {"disk": "disk + fsync", "tmpfs": "tmpfs (/dev/shm)", "rados": "Ceph RAM: rados",
                 "cephfs": "Ceph RAM: cephfs", "s3": "Ceph RAM: s3 (rgw)"}[b]
        rio = r["io"] / ref["io"] if ref else float("nan")
        rt = r["total"] / ref["total"] if ref else float("nan")
        dep = f"{r['deploy']:10.1f}{r['teardown']:8.1f}" if "deploy" in r else f"{'-':>10}{'-':>8}"
        print(f"{label:<22}{r['io']:8.3f}{r['total']:9.3f}{rio:13.2f}{(1 - rio) * 100:10.0f}%{rt:15.2f}"
              f"{r['error']:8.3f}{dep}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
