"""``hpcsuite stage ...``: the command-line face of :mod:`hpcsuite.staging`.

Only argparse is imported at module level (the CLI builds its parser without loading MPI or Ceph).
``up``, ``down`` and ``status`` act once (rank 0 when started on several ranks); ``in`` and ``out``
are collective: every rank moves its share.
"""
from __future__ import annotations

import argparse
import json
import time

__all__ = ["add_parser", "run"]

DESCRIPTION = """\
Job-temporary storage in RAM. A deployment is a private folder (--dir) naming one backend:
  tmpfs   files in node-local /dev/shm (default; nothing to start)
  rados   a real Ceph cluster on RAM, objects through librados
  s3      the same plus a RADOS gateway (S3, boto3) bound to the job's own address
  cephfs  the same plus an MDS and a ceph-fuse POSIX mount (parallel HDF5 works on it)
Ceph daemons run as your processes (no systemd, no root-only modules): a monitor and a manager on
the first node, OSDs on RAM on every node (srun --overlap inside a SLURM allocation, local
processes outside). Keys are 0600, folders 0700, ports free ones; 'down' stops everything by PID
and deletes the RAM files on every node of the job.

--dir default: $HPCSUITE_STAGE_DIR, else /dev/shm/hpcsuite-stage-<uid>-<job<ID>|local>, or
$SLURM_SUBMIT_DIR/.hpcsuite-stage-job<ID> in a multi-node allocation (the keys must be shared)."""

EXAMPLES = """\
examples:
  hpcsuite stage up                                   tmpfs store for this job
  hpcsuite stage up --backend rados --osd-size 1G --dir /dev/shm/st
  hpcsuite stage up --backend cephfs --iface ib0 --osd-size 8G   daemons on every node's ib0 address
  hpcsuite stage in data/ --name run1 --dir /dev/shm/st   copy a tree in (checksummed)
  mpiexec -n 4 hpcsuite stage out run1 results/ --dir /dev/shm/st   every rank moves its share
  hpcsuite stage status --dir /dev/shm/st             health and usage
  hpcsuite stage down --dir /dev/shm/st               stop and delete everything (idempotent)

exit codes: 0 success, 2 bad arguments, 1 failure (the message names the daemon and its log)"""


def add_parser(sub) -> argparse.ArgumentParser:
    """Add the ``stage`` sub-command to the CLI's sub-parsers."""
    s = sub.add_parser("stage", help="job-temporary RAM storage: tmpfs or a Ceph cluster on RAM",
                       description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ss = s.add_subparsers(dest="stage_command", metavar="ACTION")

    def common(p):
        p.add_argument("--dir", metavar="STATE_DIR", help="the deployment's folder (see 'stage --help')")
        return p

    u = common(ss.add_parser("up", help="create a deployment (tmpfs store or Ceph cluster)",
                             description="Create the deployment and wait until it is usable. On failure "
                             "everything started is stopped and the error names the daemon and its log.",
                             epilog="example: hpcsuite stage up --backend cephfs --osd-size 2G --timeout 120",
                             formatter_class=argparse.RawDescriptionHelpFormatter))
    u.add_argument("--backend", default="tmpfs", choices=("tmpfs", "rados", "s3", "cephfs"))
    u.add_argument("--osd-size", default=None,
                   help="RAM per OSD, e.g. 512M, 1G, 4G (Ceph backends; default: the site file's "
                   "[staging] ram / --osds-per-node, else 1G); must fit in /dev/shm on every node")
    u.add_argument("--osds-per-node", type=int, default=1)
    u.add_argument("--iface", metavar="NAME",
                   help="network interface the Ceph daemons bind to, e.g. ib0 (every node its own "
                   "address on it; default: the site file's [staging] iface, else loopback on one "
                   "node and each node's SLURM address across nodes)")
    u.add_argument("--address", metavar="ADDR",
                   help="bind to this address of the head node (the others: theirs in its network), "
                   "or to a network such as 10.1.0.0/16 (every node its address in it)")
    u.add_argument("--store", default="bluestore", choices=("bluestore", "memstore"),
                   help="OSD object store: bluestore on a /dev/shm file, or memstore")
    u.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for health")
    u.add_argument("--mon-port", type=int, help="the monitor's port (default: a free one)")
    u.add_argument("--checksum", choices=("xxh3-128", "sha256", "crc32"), default=None,
                   help="checksum stored with every object and verified on read (default xxh3-128, "
                   "crc32 without the xxhash package; sha256 for a cryptographic digest)")
    u.add_argument("-q", "--quiet", action="store_true", help="print only the final line")

    st = common(ss.add_parser("status", help="health and usage of a deployment",
                              description="Health, daemons, OSDs, placement groups and usage. Exit code 1 "
                              "when the cluster is unreachable, in HEALTH_ERR, or a daemon is not running."))
    st.add_argument("--json", action="store_true", help="machine-readable output")
    common(ss.add_parser("down", help="stop every daemon by PID, unmount, delete the RAM files (idempotent)"))

    i = common(ss.add_parser("in", help="copy a file or directory tree into the store (checksummed)",
                             description="Stream PATH into the store in chunks. Under mpiexec/srun every "
                             "rank moves its share of the files (collective)."))
    i.add_argument("path", metavar="PATH")
    i.add_argument("--op-timeout", type=float, default=15.0, metavar="S",
                   help="seconds before an operation on a dead OSD/gateway fails (default 15)")
    i.add_argument("--name", help="object name (a directory's files go below NAME/; default: base name)")
    i.add_argument("--checksum", choices=("xxh3-128", "sha256", "crc32"), default=None,
                   help="checksum of these objects (default: the deployment's)")
    o = common(ss.add_parser("out", help="copy an object or every object below NAME/ out (verified)",
                             description="Stream NAME (or every object below NAME/) to DEST, verifying "
                             "each checksum before the atomic rename. Under mpiexec/srun every rank "
                             "moves its share (collective)."))
    o.add_argument("name", metavar="NAME")
    o.add_argument("dest", metavar="DEST")
    o.add_argument("--op-timeout", type=float, default=15.0, metavar="S",
                   help="seconds before an operation on a dead OSD/gateway fails (default 15)")
    ls = common(ss.add_parser("ls", help="list objects (size, checksum algorithm:value, name)"))
    ls.add_argument("prefix", nargs="?", default="")
    return s


def _env_rank() -> int:
    from hpcsuite.runtime.launcher import env_rank
    return env_rank()


def _world_team():
    from hpcsuite.runtime import Team
    return Team.world()


def run(args, fail) -> int:
    """Run ``hpcsuite stage ACTION``; ``fail(msg, code)`` prints a one-line error on rank 0."""
    from hpcsuite.runtime import InputError

    from . import deployment as dp
    from .cephconf import parse_size
    from .store import StagingError

    act = args.stage_command
    if act is None:
        return fail("stage: name an action: up, status, down, in, out, ls (hpcsuite stage --help)")
    if act in ("up", "down", "status") and _env_rank() != 0:
        return 0            # once per job: under mpiexec/srun only rank 0 deploys, removes, reports
    try:
        if act == "up":
            osd_bytes, iface, address = _site_defaults(args, parse_size)
            log = (lambda m: None) if args.quiet else (lambda m: print(f"stage up: {m}", flush=True))
            kw = {} if args.backend == "tmpfs" else dict(
                osd_bytes=osd_bytes, osds_per_node=args.osds_per_node, objectstore=args.store,
                timeout=args.timeout, mon_port=args.mon_port, iface=iface, address=address)
            st = dp.up(args.dir, args.backend, log=log, checksum=args.checksum, **kw)
            where = st.get("root") or st.get("mount") or (st.get("s3") or {}).get("endpoint") or \
                f"pool {st.get('pool')}"
            print(f"stage up: {st['backend']} ready in {st['deploy_seconds']:.1f} s at "
                  f"{args.dir or dp.default_dir()} ({where})")
            return 0
        if act == "down":
            t = time.monotonic()
            stopped = dp.down(args.dir)
            took = time.monotonic() - t
            print(f"stage down: {'stopped ' + ', '.join(stopped) if stopped else 'nothing to stop'} "
                  f"({took:.1f} s)")
            return 0
        if act == "status":
            s = dp.status(args.dir)
            if args.json:
                print(json.dumps(s, indent=1))
            else:
                print(_format_status(s))
            healthy = s.get("health", "").startswith(("OK", "HEALTH_OK", "HEALTH_WARN"))
            return 0 if healthy and all(s.get("daemons", {}).values()) else 1   # 1: look at it
        team = _world_team()
        with dp.open_store(args.dir, timeout=getattr(args, "op_timeout", 15.0),
                           checksum=getattr(args, "checksum", None)) as store:
            if act == "ls":
                if team.rank == 0:
                    for info in store.iter_infos(args.prefix):
                        print(f"{info.size:14d}  {info.algorithm}:{info.checksum[:16]}  {info.name}")
                return 0
            from .parallel import stage_in, stage_out
            if act == "in":
                names = stage_in(store, args.path, team, args.name)
                if team.rank == 0:
                    print(f"stage in: {len(names)} object(s) into the {store.backend} store"
                          + (f": {names[0]}" if len(names) == 1 else f" below {names[0].split('/')[0]}/"
                             if names else ""))
                return 0
            if act == "out":
                paths = stage_out(store, args.name, args.dest, team)
                if team.rank == 0:
                    print(f"stage out: {len(paths)} file(s) written, checksums verified"
                          + (f": {paths[0]}" if len(paths) == 1 else f" below {args.dest}"))
                return 0
    except InputError as exc:
        return fail(str(exc), 2)
    except StagingError as exc:
        return fail(str(exc), 1)
    return fail(f"stage: unknown action {act!r}")


def _site_defaults(args, parse_size) -> tuple[int, str | None, str | None]:
    """``(osd_bytes, iface, address)`` of ``stage up``: the command line, else the site file's
    ``[staging]`` (``iface``: an interface name, or an address/network; ``ram``: the budget per
    node, split over the OSDs), else 1 GiB and the default network. An explicit ``--osd-size``
    beyond the site's budget is refused. Local."""
    from hpcsuite.runtime import InputError
    site = None
    try:
        from hpcsuite.runtime.site import load_site
    except ImportError:              # (a build without the site module: no site defaults)
        load_site = None
    if load_site is not None:
        site = load_site()
    budget = site.staging_ram_bytes if site is not None else None
    where = f"{site.path} [staging] ram = {site.staging_ram!r}" if budget else ""
    if args.osd_size is not None:
        try:
            osd_bytes = parse_size(args.osd_size)
        except ValueError as exc:
            raise InputError(f"stage up: --osd-size: {exc}") from None
        if budget and args.backend != "tmpfs" and osd_bytes * max(1, args.osds_per_node) > budget:
            raise InputError(f"stage up: --osd-size {args.osd_size} x {args.osds_per_node} OSD(s) per node "
                             f"exceeds the site's staging RAM budget ({where})")
    else:
        osd_bytes = budget // max(1, args.osds_per_node) if budget else 1 << 30
    iface, address = args.iface, args.address
    if args.backend == "tmpfs" and (iface is not None or address is not None):
        raise InputError(f"stage up: --{'iface' if iface is not None else 'address'} applies to the Ceph "
                         "backends (--backend rados, s3 or cephfs); tmpfs runs no daemon")
    if iface is None and address is None and site is not None and site.staging_iface:
        import ipaddress
        try:
            ipaddress.IPv4Interface(site.staging_iface)
            address = site.staging_iface             # the site names an address or a network
        except ValueError:
            iface = site.staging_iface
    return osd_bytes, iface, address


def _format_status(s: dict) -> str:
    lines = [f"backend   {s['backend']}  ({s['dir']})", f"health    {s.get('health')}"]
    if s["backend"] == "tmpfs":
        lines += [f"objects   {s['objects']}", f"used      {s['bytes_used'] / 2**20:.1f} MiB "
                  f"({s['bytes_free'] / 2**30:.1f} GiB free in {s['root']})"]
        return "\n".join(lines)
    if s.get("checks"):
        lines.append(f"checks    {', '.join(s['checks'])}")
    dead = [n for n, ok in s["daemons"].items() if not ok]
    lines.append(f"daemons   {', '.join(s['daemons'])}" + (f"  NOT RUNNING: {', '.join(dead)}" if dead else ""))
    if "osds" in s:
        per_node: dict[str, list[str]] = {}
        for osd, node in sorted(s.get("osd_hosts", {}).items()):
            per_node.setdefault(node, []).append(osd)
        where = "; ".join(f"{n}: {', '.join(o)}" for n, o in sorted(per_node.items()))
        lines += [f"osds      {s['osds_up']}/{s['osds']} up" + (f" ({where})" if where else ""),
                  f"pgs       {', '.join(f'{v} {k}' for k, v in s['pgs'].items())}",
                  f"usage     {s['bytes_used'] / 2**20:.1f} MiB raw used of {s['bytes_total'] / 2**30:.2f} GiB, "
                  f"{s['objects']} RADOS objects"]
    if s.get("binding"):
        b = s["binding"]
        where = ", ".join(f"{n} {a}" for n, a in sorted(s.get("node_addresses", {}).items()))
        lines.append(f"network   {b['network']}" + (f" on {b['iface']}" if b.get("iface") else "")
                     + (f" ({where})" if where else ""))
    if s.get("mount"):
        lines.append(f"mount     {s['mount']}")
    if s.get("s3"):
        lines.append(f"s3        {s['s3']}")
    if s.get("error"):
        lines.append(f"error     {s['error']}")
    return "\n".join(lines)
