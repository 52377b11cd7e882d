"""Deploy and tear down a real Ceph cluster on RAM for one job: no root-only modules, no systemd.

:func:`deploy` starts, on the head node (the first of the SLURM allocation, or this machine), one
monitor and one manager, then one OSD agent per node (:mod:`hpcsuite.staging.agent`; a local
process outside SLURM, ``srun --overlap`` tasks inside), and what the backend needs on top: a RADOS
pool (``rados``), a RADOS gateway and an S3 user (``s3``), or an MDS and a ceph-fuse mount
(``cephfs``). It waits for every OSD to be up and every placement group active+clean, with a
timeout; if a daemon dies or the time runs out, it stops everything it started and raises a
:class:`StagingError` that names the daemon and its log file.

Folders (both 0700, keys 0600): the *state folder* (``--dir``: ``ceph.conf``, keyrings,
``state.json``, ``logs/``) and the *node folder* ``/dev/shm/hpcsuite-ceph-<job|uid>-<fsid8>`` on every
node (daemon data, OSD RAM files, admin sockets, PID files). Ports: the monitor's two ports are
chosen free by the kernel, other daemons bind to ports the kernel has free, so deployments side by
side do not collide. Daemons bind to loopback on one node, to the nodes' own addresses otherwise
(see :func:`node_address`), or to the interface or network chosen with ``iface``/``address``
(:mod:`hpcsuite.staging.netif`: each node its own address there; Ceph's ``public network``). OSDs
are placed in the CRUSH map under their SLURM node's name. Before anything starts, every node checks
that its OSDs' RAM fits in its ``/dev/shm`` and that it has an address on the chosen network
(:mod:`hpcsuite.staging.preflight`).

:func:`teardown` is idempotent: it unmounts, stops every daemon by PID (client side first, the
monitor last), and deletes the node folder and the state folder.

Every daemon's PID and start time is kept in ``state.json`` and in ``<node folder>/pids/`` (where
``jobscripts/stage-epilog.sh`` finds them after a killed job). ``HPCSUITE_STAGE_DEBUG=1`` prints the
cluster state while waiting for health.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from hpcsuite.jobs.env import slurm_node_address, this_node
from hpcsuite.runtime import InputError, optional

from . import netif, preflight, procs
from .cephconf import cephx_key, free_port, render_conf, write_keyring
from .poll import poll_until
from .radosstore import RADOS_HINT, rados_client
from .store import StagingError

__all__ = ["deploy", "teardown", "status", "CEPH_BACKENDS", "POOL", "node_dir_for"]

CEPH_BACKENDS = ("rados", "s3", "cephfs")
POOL = "hpcsuite"
_BINARIES = {"rados": ["ceph-mon", "ceph-mgr", "ceph-osd"], "s3": ["radosgw", "radosgw-admin"],
             "cephfs": ["ceph-mds", "ceph-fuse"]}


def _now() -> float:
    return time.monotonic()


def node_dir_for(fsid: str) -> Path:
    """The per-node RAM folder of a deployment (same path on every node; the job id in the name
    lets the epilog find it)."""
    job = os.environ.get("SLURM_JOB_ID")
    key = f"job{job}" if job else f"uid{os.getuid()}"
    return Path("/dev/shm") / f"hpcsuite-ceph-{key}-{fsid[:8]}"


def node_address(host: str) -> str:
    """The IPv4 address daemons on node ``host`` bind to.

    SLURM's ``NodeAddr`` for the node when the site set one (SLURM itself reaches the node there;
    on a cluster emulated on one machine that is a loopback address, which is right there),
    else the first non-loopback address the name resolves to (Debian maps the host name to
    127.0.1.1 in /etc/hosts, which other nodes cannot reach).
    """
    addr = slurm_node_address(host) if os.environ.get("SLURM_JOB_ID") else None
    try:
        addrs = [a[4][0] for a in socket.getaddrinfo(addr or host, None, socket.AF_INET, socket.SOCK_STREAM)]
    except OSError as exc:
        raise InputError(f"stage up: cannot resolve node {host!r} (address {addr or host!r}): {exc}") from None
    if addr:
        return addrs[0]
    good = [a for a in addrs if not a.startswith("127.")]
    if not good:
        raise InputError(f"stage up: node {host!r} resolves only to loopback ({', '.join(addrs)}); other "
                         "nodes could not reach its daemons; fix the host's name resolution")
    return good[0]


def _mon_command(cluster, cmd: dict, inbuf: bytes = b"", timeout: int = 30) -> str:
    rc, out, err = cluster.mon_command(json.dumps(cmd), inbuf, timeout=timeout)
    if rc != 0:
        raise StagingError(f"ceph {cmd['prefix']} failed: {err or out.decode()} (rc {rc})")
    return out.decode()


class _Deployment:
    """Book-keeping while deploying: what was started, so that a failure can undo it."""

    def __init__(self, state_dir: Path, state: dict):
        self.dir = state_dir
        self.state = state
        self.popen: dict[str, subprocess.Popen] = {}

    def save(self) -> None:
        tmp = self.dir / ".state.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.dir / "state.json")

    def start(self, name: str, argv: list[str], env=None) -> None:
        proc, popen = procs.start(name, argv, self.dir / "logs" / f"{name}.out", self.state["head"], env)
        self.state["daemons"].append(proc.to_dict())
        # also beside the RAM data, where the epilog (jobscripts/stage-epilog.sh) looks for PIDs
        pid_file = Path(self.state["node_dir"]) / "pids" / f"{name}.json"
        pid_file.with_suffix(".tmp").write_text(json.dumps(proc.to_dict()))
        pid_file.with_suffix(".tmp").replace(pid_file)
        self.popen[name] = popen
        self.save()

    def check_alive(self) -> None:
        """Raise naming the first daemon started here that has exited."""
        for d in self.state["daemons"]:
            p = self.popen.get(d["name"])
            if p is not None and p.poll() is not None:
                self.died(d["name"], p.returncode)

    def died(self, name: str, code) -> None:
        logs = self.dir / "logs"
        log = logs / f"{name}.log"
        if not log.exists() or not procs.tail(log):
            log = logs / f"{name}.out"
        raise StagingError(f"ceph: {name} exited with code {code} during start-up; see its log {log}"
                           f" (last lines: {procs.tail(log) or 'empty'})")


def _binaries(backend: str) -> None:
    need = _BINARIES["rados"] + (_BINARIES[backend] if backend != "rados" else [])
    missing = [b for b in need if shutil.which(b) is None]
    if missing:
        raise InputError(f"stage up --backend {backend}: {', '.join(missing)} not found; install the Ceph "
                         "packages (scripts/setup.sh does: ceph ceph-mon ceph-osd ceph-mgr ceph-mds radosgw "
                         "ceph-fuse python3-rados python3-cephfs)")
    optional.require("rados", f"stage up --backend {backend}", hint=RADOS_HINT)


def deploy(state_dir, backend: str = "rados", osd_bytes: int = 1 << 30, osds_per_node: int = 1,
           objectstore: str = "bluestore", timeout: float = 90.0, mon_port: int | None = None,
           nodes: list[str] | None = None, log=print, iface: str | None = None,
           address: str | None = None) -> dict:
    """Deploy a Ceph cluster for ``backend`` and wait until it is healthy. Local (head node).

    Parameters
    ----------
    state_dir : path-like
        The deployment's private folder (created 0700; must not hold a deployment already).
    backend : {'rados', 's3', 'cephfs'}
    osd_bytes : int
        RAM per OSD.
    osds_per_node : int
    objectstore : {'bluestore', 'memstore'}
        bluestore on a file in ``/dev/shm``, or Ceph's in-memory store.
    timeout : float
        Seconds to wait for health before giving up (everything started is then stopped).
    mon_port : int, optional
        The monitor's msgr2 port (default: a free one).
    nodes : list of str, optional
        Host names (default: the SLURM allocation's, or this machine alone).
    iface : str, optional
        Network interface the daemons bind to (``ib0``; DisTRaC's ``-i``): on every node its own
        IPv4 address on that interface. Default: loopback on one node, else each node's address
        (SLURM's ``NodeAddr`` or its name's).
    address : str, optional
        An address of this (the head) node (the others bind to theirs in its network), or a
        network ``10.1.0.0/16`` (every node binds to its address inside it); with ``iface``, on it.

    Returns
    -------
    dict
        The deployment state (also in ``state.json``): daemons, addresses, pool, mount, S3 endpoint.

    Raises
    ------
    InputError
        Bad arguments; an interface or address that does not exist on some node (one line naming
        the node and its interfaces); OSDs whose RAM does not fit in ``/dev/shm`` on some node.
        Checked on every node before anything starts.
    StagingError
        A daemon failed or the cluster did not become healthy in time (everything is stopped).
    """
    if backend not in CEPH_BACKENDS:
        raise InputError(f"stage up: --backend must be one of tmpfs, {', '.join(CEPH_BACKENDS)}; got {backend!r}")
    if objectstore not in ("bluestore", "memstore"):
        raise InputError(f"stage up: --store must be bluestore or memstore, got {objectstore!r}")
    # bluestore's RocksDB preallocates about 282 MiB in the OSD's file: 256M fails in mkfs, 384M works
    if osds_per_node < 1 or osd_bytes < (64 << 20) or (objectstore == "bluestore" and osd_bytes < (384 << 20)):
        raise InputError("stage up: need --osds-per-node >= 1 and --osd-size >= 64M (>= 384M for "
                         "--store bluestore, the default)")
    if backend == "s3":
        optional.require("boto3", "stage up --backend s3")      # the client side: the s3 extra
    t0 = _now()
    state_dir = Path(state_dir).absolute()
    if nodes is None:
        from hpcsuite.jobs.env import SlurmEnv
        nodes = SlurmEnv.from_environ().nodes
    single = len(nodes) <= 1
    here = this_node()
    head = nodes[0] if nodes else here
    if not single and here != head.split(".")[0]:
        raise InputError(f"stage up: run it on the first node of the allocation ({head}), where the "
                         f"monitor goes; this is {here} (the batch script runs there)")
    binding = netif.resolve(iface, address, node=here)
    if binding is not None:
        mon_addr = binding.address
    else:
        mon_addr = "127.0.0.1" if single else node_address(head)
    _binaries(backend)
    # every node: the RAM fits in /dev/shm, the chosen network exists (before anything starts)
    checked = preflight.check_nodes(nodes or [here], head, osd_bytes, osds_per_node, objectstore, binding)
    fsid = str(uuid.uuid4())
    ndir = node_dir_for(fsid)
    os.umask(0o077)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state_dir, 0o700)
    for d in (state_dir / "logs", ndir, ndir / "run", ndir / "pids"):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    v2 = mon_port or free_port(mon_addr)
    ports = (v2, free_port(mon_addr, {v2}))
    conf = state_dir / "ceph.conf"
    conf.write_text(render_conf(fsid=fsid, mon_addr=mon_addr, ports=ports, state_dir=state_dir,
                                node_dir=ndir, objectstore=objectstore, osd_bytes=osd_bytes,
                                single_node=single, network=binding.network if binding else None,
                                iface=binding.iface if binding else None))
    n_osds = osds_per_node * max(1, len(nodes))
    dep = _Deployment(state_dir, {
        "backend": backend, "fsid": fsid, "conf": str(conf), "head": head, "nodes": nodes or [head],
        "node_dir": str(ndir), "mon_addr": mon_addr, "ports": list(ports), "pool": POOL,
        "osds": n_osds, "objectstore": objectstore, "osd_bytes": osd_bytes, "daemons": [],
        "agents": [], "mount": None, "s3": None, "created": time.time(),
        "binding": binding.to_dict() if binding else None,
        "node_addresses": {n: r["address"] for n, r in checked.items() if r.get("address")}})
    dep.save()
    try:
        _bring_up(dep, conf, backend, osds_per_node, timeout, t0, single, log)
    except BaseException as exc:
        teardown(state_dir, keep_logs=True)
        if isinstance(exc, StagingError):
            raise StagingError(f"{exc} [everything started was stopped; logs kept in {state_dir / 'logs'}]") from None
        raise
    dep.state["deploy_seconds"] = round(_now() - t0, 2)
    dep.save()
    return dep.state


def _bring_up(dep: _Deployment, conf: Path, backend: str, osds_per_node: int, timeout: float,
              t0: float, single: bool, log) -> None:
    st, d, ndir = dep.state, dep.dir, Path(dep.state["node_dir"])
    deadline = t0 + timeout
    admin_key = cephx_key()
    write_keyring(d / "client.admin.keyring", {"client.admin": (admin_key, {
        "mon": "allow *", "osd": "allow *", "mds": "allow *", "mgr": "allow *"})})
    write_keyring(d / "mon.keyring", {
        "mon.": (cephx_key(), {"mon": "allow *"}),
        "client.admin": (admin_key, {"mon": "allow *", "osd": "allow *", "mds": "allow *", "mgr": "allow *"})})
    addrs = f"[v2:{st['mon_addr']}:{st['ports'][0]},v1:{st['mon_addr']}:{st['ports'][1]}]"
    _run(["monmaptool", "--create", "--clobber", "--addv", "a", addrs, "--fsid", st["fsid"], str(d / "monmap")], d)
    _run(["ceph-mon", "-c", str(conf), "--mkfs", "-i", "a", "--monmap", str(d / "monmap"),
          "--keyring", str(d / "mon.keyring")], d)
    (d / "monmap").unlink()
    (d / "mon.keyring").unlink()        # the monitor keeps its key in its own data folder
    dep.start("mon.a", ["ceph-mon", "-f", "-c", str(conf), "-i", "a"])
    cluster = _connect(dep, conf, deadline)
    log(f"monitor mon.a up at {addrs} ({_now() - t0:.1f} s)")
    try:
        mgr_key = json.loads(_mon_command(cluster, {
            "prefix": "auth get-or-create", "entity": "mgr.x", "format": "json",
            "caps": ["mon", "allow profile mgr", "osd", "allow *", "mds", "allow *"]}))[0]["key"]
        (ndir / "mgr.x").mkdir(mode=0o700, exist_ok=True)
        write_keyring(ndir / "mgr.x" / "keyring", {"mgr.x": (mgr_key, {})})
        dep.start("mgr.x", ["ceph-mgr", "-f", "-c", str(conf), "-i", "x", "--public-addr", st["mon_addr"]])
        _start_agents(dep, conf, osds_per_node, single)
        pools = _make_pools(cluster, backend, st["osds"])
        st["pools"] = pools
        dep.save()
        if backend == "cephfs":
            _mon_command(cluster, {"prefix": "fs new", "fs_name": "hpcfs", "metadata": "cephfs_metadata",
                                   "data": "cephfs_data"})
            _start_key_daemon(dep, cluster, "mds.a", ["mon", "allow profile mds", "osd", "allow rwx",
                                                      "mds", "allow", "mgr", "allow profile mds"],
                              ndir / "mds.a", ["ceph-mds", "-f", "-c", str(conf), "-i", "a",
                                               "--public-addr", st["mon_addr"]])
        if backend == "s3":
            port = free_port(st["mon_addr"], set(st["ports"]))
            _start_key_daemon(dep, cluster, "client.rgw.gw", ["mon", "allow rw", "osd", "allow rwx", "mgr", "allow rw"],
                              ndir / "rgw", ["radosgw", "-f", "-c", str(conf), "-n", "client.rgw.gw",
                                             "--rgw-frontends", f"beast endpoint={st['mon_addr']}:{port}"],
                              name="rgw.gw")
            st["s3"] = {"endpoint": f"http://{st['mon_addr']}:{port}"}
            dep.save()
        log(f"manager, {st['osds']} OSD(s) and pools {', '.join(pools) or '(gateway pools)'} "
            f"started ({_now() - t0:.1f} s); waiting for health")
        _wait_healthy(dep, cluster, deadline, log)
        log(f"healthy ({_now() - t0:.1f} s)")
        if backend == "s3":
            _s3_user(dep, conf, deadline)
        if backend == "cephfs":
            _mount(dep, conf, deadline)
    finally:
        cluster.shutdown()


def _run(argv, d: Path, timeout: float = 60) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise StagingError(f"ceph: {' '.join(argv[:2])} failed (exit {p.returncode}): "
                           f"{(p.stderr or p.stdout).strip()[-400:]}")
    return p.stdout


def _connect(dep: _Deployment, conf: Path, deadline: float):
    def attempt(left):
        dep.check_alive()
        if left <= 0:
            return None
        try:
            return rados_client(conf, timeout=min(left, 2))
        except StagingError:
            return None
    log = dep.dir / "logs" / "mon.a.log"
    return poll_until(lambda: f"ceph: the monitor mon.a did not answer in time; see its log {log} "
                              f"(last lines: {procs.tail(log)})", deadline, attempt, interval=0.2)


def _start_agents(dep: _Deployment, conf: Path, osds_per_node: int, single: bool) -> None:
    st = dep.state
    args = ["-m", "hpcsuite.staging.agent", "--conf", str(conf), "--node-dir", st["node_dir"],
            "--log-dir", str(dep.dir / "logs"), "--osds", str(osds_per_node), "--head", st["head"]]
    # the agent imports hpcsuite (and so mpi4py) but must not join an MPI job: no MPI_Init
    env = dict(os.environ, MPI4PY_RC_INITIALIZE="false", PYTHONUNBUFFERED="1")
    if single:
        dep.start("agent", [sys.executable, *args, "--addr", st["mon_addr"]], env)
    else:
        if st.get("binding"):                 # each node its own address on the chosen network
            args += netif.Binding(**st["binding"]).agent_args()
        n = len(st["nodes"])
        # one task per node beside the job's own steps; it holds the OSDs until stage down
        dep.start("agent", ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
                            "--cpu-bind=none", "--job-name=hpcsuite-stage-osd", "--kill-on-bad-exit=0",
                            sys.executable, *args, "--addr", "auto"], env)


def _pg_count(n_osds: int, fraction: float = 1.0) -> int:
    """Placement groups for a pool holding ``fraction`` of the data (power of two, >= 8)."""
    import math
    return max(8, 2 ** round(math.log2(max(1.0, fraction * n_osds * 32))))


def _make_pools(cluster, backend: str, n_osds: int) -> list[str]:
    # the gateway's pools are made here so that they are clean before it starts using them
    rgw = [(p, 0.05, "rgw") for p in (".rgw.root", "default.rgw.log", "default.rgw.control", "default.rgw.meta",
                                      "default.rgw.buckets.index", "default.rgw.buckets.non-ec")]
    specs = {"rados": [(POOL, 1.0, "rados")], "s3": rgw + [("default.rgw.buckets.data", 0.7, "rgw")],
             "cephfs": [("cephfs_data", 0.9, "cephfs"), ("cephfs_metadata", 0.1, "cephfs")]}[backend]
    for name, frac, app in specs:
        pg = _pg_count(n_osds, frac)
        _mon_command(cluster, {"prefix": "osd pool create", "pool": name, "pg_num": pg, "pgp_num": pg,
                               "autoscale_mode": "off"})
        if backend != "cephfs":             # (fs new tags the CephFS pools itself)
            _mon_command(cluster, {"prefix": "osd pool application enable", "pool": name, "app": app})
    return [s[0] for s in specs]


def _start_key_daemon(dep, cluster, entity: str, caps: list[str], data_dir: Path, argv, name=None) -> None:
    key = json.loads(_mon_command(cluster, {"prefix": "auth get-or-create", "entity": entity,
                                            "caps": caps, "format": "json"}))[0]["key"]
    data_dir.mkdir(mode=0o700, exist_ok=True)
    write_keyring(data_dir / "keyring", {entity: (key, {})})
    dep.start(name or entity, argv)


def _health(cluster) -> dict:
    return json.loads(_mon_command(cluster, {"prefix": "status", "format": "json"}, timeout=10))


def _wait_healthy(dep: _Deployment, cluster, deadline: float, log) -> None:
    want = dep.state["osds"]
    last = "no status yet"

    def attempt(_left):
        nonlocal last
        dep.check_alive()
        _check_agent_osds(dep)
        try:
            s = _health(cluster)
            up = s["osdmap"].get("num_up_osds", 0)
            pgs = s["pgmap"].get("num_pgs", 0)
            clean = sum(x["count"] for x in s["pgmap"].get("pgs_by_state", [])
                        if x["state_name"] == "active+clean")
            mds_ok = True
            if dep.state["backend"] == "cephfs":     # the MDS must be active, not just creating
                mds_ok = any(r.get("status") == "up:active" for r in s.get("fsmap", {}).get("by_rank", []))
            last = f"{up}/{want} OSDs up, {clean}/{pgs} placement groups active+clean"
            if up >= want and pgs and clean == pgs and mds_ok:
                return True
            if os.environ.get("HPCSUITE_STAGE_DEBUG"):
                log(f"  {_now():.1f} {last} {s['health']['status']} mgr={s.get('mgrmap', {}).get('available')}")
        except StagingError as exc:
            last = str(exc)
        return None
    poll_until(lambda: f"ceph: not healthy within the timeout ({last}); {_culprit(dep, up_hint=last)}",
               deadline, attempt, interval=0.25)


def _culprit(dep: _Deployment, up_hint: str) -> str:
    """Name the daemon most likely at fault, with its log file."""
    logs = dep.dir / "logs"
    osd_logs = sorted(logs.glob("osd.*.log"))
    if not osd_logs:
        return (f"no OSD started: see the agent's log {logs / 'agent.out'} "
                f"(last lines: {procs.tail(logs / 'agent.out') or 'empty'})")
    worst = osd_logs[-1]
    return f"check the OSD logs, e.g. {worst} (last lines: {procs.tail(worst)})"


def _check_agent_osds(dep: _Deployment) -> None:
    """Raise if a local OSD started by the agent has exited."""
    pid_dir = Path(dep.state["node_dir"]) / "pids"
    for f in pid_dir.glob("osd.*.json"):
        try:
            p = procs.Proc(**json.loads(f.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if not procs.alive(p):
            dep.died(p.name, "?")


def _s3_user(dep: _Deployment, conf: Path, deadline: float) -> None:
    """Create the job's S3 user (keys kept 0600 in ``s3.json``) and wait for the gateway to answer."""
    err = ""

    def create(left):
        nonlocal err
        dep.check_alive()
        p = subprocess.run(["radosgw-admin", "-c", str(conf), "-n", "client.admin", "user", "create",
                            "--uid", "hpcsuite", "--display-name", "hpcsuite job"],
                           capture_output=True, text=True, timeout=max(5, left))
        if p.returncode == 0:
            return json.loads(p.stdout)
        err = p.stderr.strip()[-300:]
        return None
    out = poll_until(lambda: f"ceph: radosgw-admin user create failed: {err}", deadline, create, interval=0.5)
    keys = out["keys"][0]
    s3 = dict(dep.state["s3"], access_key=keys["access_key"], secret_key=keys["secret_key"])
    fd = os.open(dep.dir / "s3.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(s3, f)
    import urllib.request

    def answers(_left):                 # the gateway answers HTTP some seconds after it starts
        dep.check_alive()
        try:
            urllib.request.urlopen(s3["endpoint"], timeout=2).read()
            return True
        except OSError as exc:
            if getattr(exc, "code", None):      # an HTTP error status: it answers
                return True
        return None
    log = dep.dir / "logs" / "rgw.gw.log"
    poll_until(lambda: f"ceph: the gateway rgw.gw does not answer at {s3['endpoint']}; see its log {log} "
                       f"(last lines: {procs.tail(log)})", deadline, answers, interval=0.3)


def _mount(dep: _Deployment, conf: Path, deadline: float) -> None:
    mnt = Path(dep.state["node_dir"]) / "mnt"      # node-local, the same path on every node
    mnt.mkdir(mode=0o700, exist_ok=True)
    dep.state["mount"] = str(mnt)
    argv = ["ceph-fuse", "-f", "-c", str(conf), "-n", "client.admin", "--client_fs", "hpcfs",
            "-o", "noatime", str(mnt)]
    dep.start("ceph-fuse", argv)
    others = [n for n in dep.state["nodes"] if n != dep.state["head"]]
    if others:
        # the same node-local mount point on every other node: one ceph-fuse task per node
        fuse = f"mkdir -p -m 700 {mnt} && exec ceph-fuse -f -c {conf} -n client.admin --client_fs hpcfs {mnt}"
        dep.start("ceph-fuse-nodes", ["srun", "--overlap", f"--nodes={len(others)}", f"--ntasks={len(others)}",
                                      "--ntasks-per-node=1", f"--nodelist={','.join(others)}", "--cpu-bind=none",
                                      "--job-name=hpcsuite-stage-fuse", "bash", "-c", fuse])
    tries = 1

    def mounted(left):
        nonlocal tries
        if os.path.ismount(mnt):
            return True
        p = dep.popen["ceph-fuse"]
        if p.poll() is not None and tries < 3 and left > 0:
            tries += 1                   # a client that gave up early (MDS just activated): again
            dep.state["daemons"] = [d for d in dep.state["daemons"] if d["name"] != "ceph-fuse"]
            time.sleep(0.5)
            dep.start("ceph-fuse", argv)
            return None
        dep.check_alive()
        return None
    poll_until(f"ceph: ceph-fuse did not mount {mnt} in time; see {dep.dir / 'logs' / 'ceph-fuse.out'}",
               deadline, mounted, interval=0.1)
    os.chmod(mnt, 0o700)


# ---------------------------------------------------------------------- teardown and status
def _load(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _unmount(path: str) -> None:
    if path and os.path.ismount(path):
        for argv in (["fusermount3", "-u", path], ["fusermount", "-u", path], ["umount", path],
                     ["umount", "-l", path]):
            if shutil.which(argv[0]) and subprocess.run(argv, capture_output=True).returncode == 0:
                break


def teardown(state_dir, keep_logs: bool = False) -> list[str]:
    """Stop every daemon of the deployment by PID and delete its files. Local (head node);
    idempotent. Returns what was stopped (empty when there was nothing to do).

    Order: the mount and clients, the MDS (SIGKILL: it takes seconds on SIGTERM), gateway, OSD
    agents and OSDs, manager, monitor last (an OSD whose monitor is gone waits before exiting).
    """
    state_dir = Path(state_dir).absolute()
    st = _load(state_dir)
    stopped: list[str] = []
    if st is not None:
        _unmount(st.get("mount"))
        daemons = [procs.Proc(**d) for d in st.get("daemons", [])]
        node_dir = Path(st["node_dir"])
        local = []
        for f in sorted((node_dir / "pids").glob("*.json")) if (node_dir / "pids").is_dir() else []:
            try:
                local.append(procs.Proc(**json.loads(f.read_text())))
            except (OSError, ValueError, TypeError):
                pass

        def group(pred):
            seen, out = set(), []
            for p in daemons + local:
                if pred(p.name) and p.pid not in seen:
                    seen.add(p.pid)
                    out.append(p)
            return out
        order = [(lambda n: n.startswith("ceph-fuse"), signal.SIGTERM), (lambda n: n.startswith("mds."), signal.SIGKILL),
                 (lambda n: n.startswith("rgw."), signal.SIGTERM), (lambda n: n.startswith("agent"), signal.SIGTERM),
                 (lambda n: n.startswith("osd."), signal.SIGTERM), (lambda n: n.startswith("mgr."), signal.SIGTERM),
                 (lambda n: n.startswith("mon."), signal.SIGTERM)]
        for pred, sig in order:
            g = [p for p in group(pred) if procs.alive(p)]
            if g:
                left = procs.stop_all(g, sig, grace=5.0)
                stopped += [p.name for p in g if p not in left]
        _unmount(st.get("mount"))
        shutil.rmtree(node_dir, ignore_errors=True)
    if state_dir.is_dir():
        if keep_logs:
            for p in state_dir.iterdir():
                if p.name != "logs":
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        else:
            shutil.rmtree(state_dir, ignore_errors=True)
    return stopped


def _osd_hosts(tree: dict) -> dict[str, str]:
    """``{"osd.0": "node1", ...}`` from ``ceph osd tree`` (agents place OSDs under their node's name)."""
    byid = {n["id"]: n for n in tree.get("nodes", [])}
    return {byid[c]["name"]: n["name"] for n in tree.get("nodes", []) if n.get("type") == "host"
            for c in n.get("children", []) if c in byid}


def status(state_dir, timeout: float = 5.0) -> dict:
    """Health and usage of the deployment: daemons alive, OSDs up, PG states, bytes used. Local."""
    state_dir = Path(state_dir).absolute()
    st = _load(state_dir)
    if st is None:
        raise StagingError(f"no deployment at {state_dir} (hpcsuite stage up --dir {state_dir})")
    daemons = {d["name"]: procs.alive(procs.Proc(**d)) for d in st["daemons"]}
    pid_dir = Path(st["node_dir"]) / "pids"
    for f in sorted(pid_dir.glob("osd.*.json")) if pid_dir.is_dir() else []:
        p = procs.Proc(**json.loads(f.read_text()))
        daemons[p.name] = procs.alive(p)
    out = {"backend": st["backend"], "dir": str(state_dir), "daemons": daemons, "mount": st.get("mount"),
           "s3": (st.get("s3") or {}).get("endpoint"), "health": "UNREACHABLE",
           "binding": st.get("binding"), "node_addresses": st.get("node_addresses") or {}}
    try:
        cluster = rados_client(st["conf"], timeout=timeout)
    except StagingError as exc:
        out["error"] = str(exc)
        return out
    try:
        s = _health(cluster)
        df = json.loads(_mon_command(cluster, {"prefix": "df", "format": "json"}, timeout=int(timeout)))
        tree = json.loads(_mon_command(cluster, {"prefix": "osd tree", "format": "json"}, timeout=int(timeout)))
    except StagingError as exc:
        out["error"] = str(exc)
        return out
    finally:
        cluster.shutdown()
    out.update(health=s["health"]["status"], checks=sorted(s["health"].get("checks", {})),
               osds_up=s["osdmap"].get("num_up_osds"), osds=s["osdmap"].get("num_osds"),
               pgs={x["state_name"]: x["count"] for x in s["pgmap"].get("pgs_by_state", [])},
               bytes_used=df["stats"]["total_used_raw_bytes"], bytes_total=df["stats"]["total_bytes"],
               objects=sum(p["stats"].get("objects", 0) for p in df.get("pools", [])),
               osd_hosts=_osd_hosts(tree))
    return out
