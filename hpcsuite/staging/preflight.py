"""Checks on every node before a Ceph deployment starts anything: does the RAM fit, and does the
chosen network exist there.

``stage up`` runs :func:`check_node` on this node for a one-node deployment, and on every node of
the allocation (one ``srun --overlap`` task per node, the path the OSD agents take) for a
multi-node one: each node reports its free ``/dev/shm`` (or free memory for ``memstore``) and its
own address on the chosen interface or network. Any node that fails stops the deployment before
the monitor starts, with one line that names the node.

Run on a node: ``python -m hpcsuite.staging.preflight --osd-bytes N --osds K --objectstore S
[--head] [--network CIDR [--iface NAME]]``: prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from hpcsuite.runtime import InputError

from .netif import Binding
from .store import StagingError

__all__ = ["HEAD_RESERVE", "SHM", "needs", "check_node", "check_nodes", "fmt_bytes"]

#: where the OSDs' RAM files (bluestore), the monitor's and manager's stores live
SHM = "/dev/shm"

#: ``/dev/shm`` kept for the monitor and manager on the head node. Measured: the monitor's
#: RocksDB store is 40 MiB right after start-up (most of it its preallocated write-ahead log), the
#: manager's 4 KiB; the margin covers the maps a job's lifetime adds and the gateway's/MDS's keys.
HEAD_RESERVE = 128 << 20

#: ``/dev/shm`` per OSD beside its data: keyring, fsid and bluestore's labels (measured: ~1 MiB)
OSD_OVERHEAD = 4 << 20


def fmt_bytes(n: int) -> str:
    """``"1.5 GiB"``: a size for messages. Local."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def needs(osd_bytes: int, osds: int, objectstore: str, head: bool) -> dict[str, int]:
    """Bytes a node needs: ``{"shm": ...}`` in ``/dev/shm`` and ``{"memory": ...}`` of free memory
    (memstore keeps the OSD's data in the daemon's own memory). Local."""
    shm = osds * OSD_OVERHEAD + (HEAD_RESERVE if head else 0)
    mem = 0
    if objectstore == "memstore":
        mem = osds * osd_bytes
    else:
        shm += osds * osd_bytes
    return {"shm": shm, "memory": mem}


def _shm_free(path: str = SHM) -> int:
    fs = os.statvfs(path)
    return fs.f_bavail * fs.f_frsize


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_node(osd_bytes: int, osds: int, objectstore: str, head: bool, binding: Binding | None,
               node: str) -> dict:
    """This node's report: ``{"node", "address", "shm_free", "memory_free", "error"}`` (``error`` is
    ``None`` or one line). Local."""
    out = {"node": node, "address": None, "error": None}
    want = needs(osd_bytes, osds, objectstore, head)
    try:
        out["shm_free"] = _shm_free()
    except OSError as exc:
        out["shm_free"] = 0
        out["error"] = f"{SHM} is not usable on {node}: {exc}"
        return out
    out["memory_free"] = _mem_available()
    what = f"{osds} OSD(s) x --osd-size {fmt_bytes(osd_bytes)}" + (" + monitor/manager" if head else "")
    if want["shm"] > out["shm_free"]:
        out["error"] = (f"{what} need {fmt_bytes(want['shm'])} in {SHM} on {node}, which has "
                        f"{fmt_bytes(out['shm_free'])} free")
    elif want["memory"] > out["memory_free"]:
        out["error"] = (f"{what} (memstore) need {fmt_bytes(want['memory'])} of memory on {node}, which "
                        f"has {fmt_bytes(out['memory_free'])} available")
    if binding is not None and out["error"] is None:
        try:
            out["address"] = binding.local_address(node)
        except InputError as exc:
            out["error"] = str(exc).removeprefix("stage up: ")
    return out


def _refuse(reports: list[dict]) -> None:
    bad = sorted((r for r in reports if r.get("error")), key=lambda r: r["node"])     # the same line each time
    if bad:
        more = f" (and {len(bad) - 1} more node(s))" if len(bad) > 1 else ""
        raise InputError(f"stage up: {bad[0]['error']}{more}; nothing was started")


def check_nodes(nodes: list[str], head: str, osd_bytes: int, osds: int, objectstore: str,
                binding: Binding | None, timeout: float = 60.0) -> dict[str, dict]:
    """Run :func:`check_node` on every node of ``nodes`` (here when it is this node alone, else
    one ``srun --overlap`` task per node) and refuse with one line if any fails. Local (head).

    Returns ``{node: report}``; raises :class:`InputError` (bad budget or network on some node) or
    :class:`StagingError` (the check itself could not run there).
    """
    if len(nodes) <= 1:
        reports = [check_node(osd_bytes, osds, objectstore, True, binding, nodes[0] if nodes else head)]
        _refuse(reports)
        return {r["node"]: r for r in reports}
    args = ["--osd-bytes", str(osd_bytes), "--osds", str(osds), "--objectstore", objectstore,
            "--head-node", head] + (binding.agent_args() if binding else [])
    n = len(nodes)
    argv = ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", "--cpu-bind=none", "--job-name=hpcsuite-stage-check",
            sys.executable, "-m", "hpcsuite.staging.preflight", *args]
    env = dict(os.environ, MPI4PY_RC_INITIALIZE="false")      # imports hpcsuite, joins no MPI job
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StagingError(f"stage up: the check of every node (srun) failed: {exc}") from None
    reports = []
    for line in p.stdout.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and "node" in r:
            reports.append(r)
    missing = sorted(set(nodes) - {r["node"] for r in reports})
    _refuse(reports)
    if p.returncode != 0 or missing:
        raise StagingError(f"stage up: the check of every node (srun) did not report from "
                           f"{', '.join(missing) or 'every node'} (exit {p.returncode}: "
                           f"{p.stderr.strip()[-300:]})")
    return {r["node"]: r for r in reports}


def main(argv=None) -> int:
    """One node's check as a JSON line (``srun`` runs it on every node). Local."""
    ap = argparse.ArgumentParser(prog="hpcsuite-stage-check")
    ap.add_argument("--osd-bytes", type=int, required=True)
    ap.add_argument("--osds", type=int, required=True)
    ap.add_argument("--objectstore", default="bluestore")
    ap.add_argument("--head-node", required=True)
    ap.add_argument("--network")
    ap.add_argument("--iface")
    a = ap.parse_args(argv)
    from hpcsuite.jobs.env import this_node
    node = this_node()
    binding = Binding("", a.network, a.iface) if a.network else None
    print(json.dumps(check_node(a.osd_bytes, a.osds, a.objectstore, node == a.head_node.split(".")[0],
                                binding, node)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
