"""The per-node OSD agent: creates and runs this node's OSDs on RAM, removes them on SIGTERM.

``hpcsuite stage up`` starts one agent per node: a local process outside SLURM, one task per node
of ``srun --overlap`` inside an allocation. The agent registers its OSDs with the monitor
(``osd new`` with a fresh cephx secret), formats them (``ceph-osd --mkfs``: bluestore on a file in
the node's private ``/dev/shm`` folder, or memstore), runs them in the foreground and writes each
one's PID (with its start time) to ``<node_dir>/pids/``. On SIGTERM/SIGINT it stops its OSDs and
deletes their RAM files; ``stage down`` and the epilog also find the OSDs by those PID files.

Run: ``python -m hpcsuite.staging.agent --conf C --node-dir D --osds N --head HOST [--addr IP]
[--network CIDR [--iface NAME]]`` (with ``--addr auto`` and a network: this node's address in it,
on that interface).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from hpcsuite.jobs.env import this_node

from . import procs
from .cephconf import cephx_key, write_keyring
from .radosstore import rados_client

_stop = False


def _on_signal(signum, frame):
    global _stop
    _stop = True


def _mon_command(cluster, cmd: dict, inbuf: bytes = b"") -> str:
    rc, out, err = cluster.mon_command(json.dumps(cmd), inbuf, timeout=30)
    if rc != 0:
        raise RuntimeError(f"ceph {cmd['prefix']}: {err} (rc {rc})")
    return out.decode()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="hpcsuite-stage-agent")
    ap.add_argument("--conf", required=True)
    ap.add_argument("--node-dir", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--osds", type=int, default=1)
    ap.add_argument("--head", required=True, help="host name of the head node (keeps its node dir)")
    ap.add_argument("--addr", default="auto", help="address the OSDs bind to (auto: this host's)")
    ap.add_argument("--network", help="with --addr auto: bind to this node's address in this network")
    ap.add_argument("--iface", help="with --network: the address on this interface")
    a = ap.parse_args(argv)
    os.umask(0o077)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    host = this_node()          # SLURM's node name: emulated nodes may share one host name
    node_dir, log_dir = Path(a.node_dir), Path(a.log_dir)
    for d in (node_dir, node_dir / "run", node_dir / "pids"):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    if a.addr == "auto" and a.network:
        from .netif import Binding
        addr = Binding("", a.network, a.iface).local_address(host)
    elif a.addr == "auto":
        from .ceph import node_address
        addr = node_address(host)
    else:
        addr = a.addr
    (node_dir / "pids" / f"agent-{host}.json").write_text(json.dumps(
        procs.Proc(f"agent-{host}", os.getpid(), procs.start_ticks(os.getpid()) or 0, "", host).to_dict()))
    running: list[tuple[procs.Proc, subprocess.Popen]] = []
    made: list[tuple[int, str]] = []
    try:
        cluster = rados_client(a.conf, timeout=30)
        try:
            for _ in range(a.osds):
                u, key = str(uuid.uuid4()), cephx_key()
                out = _mon_command(cluster, {"prefix": "osd new", "uuid": u, "format": "json"},
                                   json.dumps({"cephx_secret": key}).encode())
                osd_id = int(json.loads(out)["osdid"]) if out.strip().startswith("{") else int(out)
                d = node_dir / f"osd.{osd_id}"
                d.mkdir(mode=0o700, exist_ok=True)
                write_keyring(d / "keyring", {f"osd.{osd_id}": (key, {})})
                made.append((osd_id, u))
        finally:
            cluster.shutdown()
        mkfs = [(i, subprocess.Popen(["ceph-osd", "-c", a.conf, "-i", str(i), "--mkfs", "--osd-uuid", u],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
                for i, u in made]
        for i, p in mkfs:
            out, _ = p.communicate(timeout=120)
            if p.returncode != 0:
                raise RuntimeError(f"ceph-osd --mkfs of osd.{i} on {host} failed (exit {p.returncode}): "
                                   f"{out.strip()[-400:]}")
        for i, _ in made:
            proc, popen = procs.start(f"osd.{i}", ["ceph-osd", "-f", "-c", a.conf, "-i", str(i),
                                                   "--public-addr", addr, "--cluster-addr", addr,
                                                   # placed under SLURM's node name (`osd tree`)
                                                   f"--crush_location=host={host} root=default"],
                                      log_dir / f"osd.{i}.out", host)
            tmp = node_dir / "pids" / f".osd.{i}.json.tmp"
            tmp.write_text(json.dumps(proc.to_dict()))
            tmp.replace(node_dir / "pids" / f"osd.{i}.json")
            running.append((proc, popen))
        print(f"agent on {host}: osd {', '.join(str(i) for i, _ in made)} running", flush=True)
        while not _stop:
            for proc, popen in running:
                if popen.poll() is not None and not getattr(popen, "_reported", False):
                    popen._reported = True
                    print(f"agent on {host}: {proc.name} exited with code {popen.returncode}; see {proc.log} "
                          f"and {log_dir}/{proc.name}.log", flush=True)
            time.sleep(0.2)
        return 0
    except Exception as exc:  # noqa: BLE001 - reported in the agent's log, read by stage up
        print(f"agent on {host}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        procs.stop_all([p for p, _ in running], grace=5.0)
        for _, popen in running:
            popen.poll()
        for i, _ in made:                      # RAM files of every OSD made here, running or not
            shutil.rmtree(node_dir / f"osd.{i}", ignore_errors=True)
            (node_dir / "pids" / f"osd.{i}.json").unlink(missing_ok=True)
        (node_dir / "pids" / f"agent-{host}.json").unlink(missing_ok=True)
        if host != a.head.split(".")[0]:
            shutil.rmtree(node_dir, ignore_errors=True)     # the head's folder is removed by stage down


if __name__ == "__main__":
    sys.exit(main())
