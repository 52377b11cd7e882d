"""A named staging deployment: a folder (``--dir``) that says which backend runs and how to reach it.

``up`` creates it (for ``tmpfs``: a private folder of files in RAM, in the state folder when that
is on tmpfs, else node-local ``/dev/shm/hpcsuite-store-<uid>-<job>-<hash>`` on every node; for ``rados``/``s3``/``cephfs``: a
Ceph cluster, see :mod:`hpcsuite.staging.ceph`), :func:`open_store` connects a client to it,
``down`` removes it (idempotent). All functions are local: run ``stage up``/``down`` once per job
(on the first node), and :func:`open_store` on every rank that moves data.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from hpcsuite.runtime import InputError

from . import ceph
from .checksum import check_algorithm
from .filestore import FileStore, TmpfsStore, default_tmpfs_root
from .store import StagingError, Store

__all__ = ["BACKENDS", "default_dir", "up", "down", "status", "open_store", "load_state"]

BACKENDS = ("tmpfs",) + ceph.CEPH_BACKENDS


def default_dir() -> Path:
    """The default deployment folder: ``$HPCSUITE_STAGE_DIR``, else private to the user and job.
    Local.

    One node (or outside SLURM): ``/dev/shm/hpcsuite-stage-<uid>-<job<ID>|local>``. A multi-node
    allocation: ``$SLURM_SUBMIT_DIR/.hpcsuite-stage-job<ID>``, because every node must read the
    configuration and keys (the RAM data itself stays node-local).
    """
    if os.environ.get("HPCSUITE_STAGE_DIR"):
        return Path(os.environ["HPCSUITE_STAGE_DIR"])
    from hpcsuite.jobs.env import SlurmEnv
    env = SlurmEnv.from_environ()
    if env.in_job and len(env.nodes) > 1:
        return Path(env.submit_dir or os.getcwd()) / f".hpcsuite-stage-job{env.job_id}"
    tag = f"job{env.job_id}" if env.in_job else "local"
    return Path("/dev/shm") / f"hpcsuite-stage-{os.getuid()}-{tag}"


def _on_tmpfs(path: Path) -> bool:
    """Whether ``path`` lies on a RAM filesystem (tmpfs), per /proc/mounts."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return False
    p, best = str(path.resolve()), ("", "")
    for mnt, fstype in mounts:
        if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[0]):
            best = (mnt, fstype)
    return best[1] in ("tmpfs", "ramfs")


def load_state(state_dir) -> dict:
    """The deployment's ``state.json``; :class:`StagingError` naming the folder if there is none.
    Local."""
    p = Path(state_dir) / "state.json"
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise StagingError(f"no staging deployment at {state_dir} (start one: hpcsuite stage up "
                           f"--dir {state_dir})") from None
    except ValueError as exc:
        raise StagingError(f"{p}: unreadable deployment state: {exc}") from None


def up(state_dir=None, backend: str = "tmpfs", log=print, checksum: str | None = None,
       **ceph_args) -> dict:
    """Create the deployment at ``state_dir`` (default :func:`default_dir`). Local (head node).

    ``checksum`` names the checksum algorithm of the objects its clients write (default: the
    fastest available, XXH3-128; see :mod:`hpcsuite.staging.checksum`). ``ceph_args`` go to :func:`hpcsuite.staging.ceph.deploy` (``osd_bytes``, ``osds_per_node``,
    ``objectstore``, ``timeout``, ``mon_port``, ``iface``, ``address``). Raises :class:`InputError`
    for bad arguments, a network or RAM budget that does not fit some node, or an existing
    deployment; :class:`StagingError` when the cluster does not become healthy.
    """
    if backend not in BACKENDS:
        raise InputError(f"stage up: --backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    try:
        check_algorithm(checksum)
    except InputError as exc:
        raise InputError(f"stage up: --{exc}") from None
    d = Path(state_dir or default_dir()).absolute()
    if (d / "state.json").exists():
        raise InputError(f"stage up: {d} already holds a {load_state(d)['backend']} deployment "
                         f"(hpcsuite stage down --dir {d} first)")
    if d.exists() and any(p.name != "logs" for p in d.iterdir()):
        raise InputError(f"stage up: {d} exists and is not empty; choose another --dir")
    if backend == "tmpfs":
        t0 = time.monotonic()
        os.umask(0o077)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(d, 0o700)
        # the data stay in node-local RAM even when the state folder is shared (multi-node default)
        tag = hashlib.sha1(str(d).encode()).hexdigest()[:8]       # one RAM folder per deployment
        root = d / "store" if _on_tmpfs(d) else Path(f"{default_tmpfs_root()}-{tag}")
        TmpfsStore(root)
        state = {"backend": "tmpfs", "root": str(root), "created": time.time(),
                 "deploy_seconds": round(time.monotonic() - t0, 3)}
        if checksum:
            state["checksum"] = checksum
        _write_state(d, state)
        return state
    state = ceph.deploy(d, backend=backend, log=log, **ceph_args)
    if checksum:
        state = {**load_state(d), "checksum": checksum}
        _write_state(d, state)
    return state


def _write_state(d: Path, state: dict) -> None:
    tmp = d / ".state.json.tmp"
    tmp.write_text(json.dumps(state))
    tmp.replace(d / "state.json")


def down(state_dir=None) -> list[str]:
    """Remove the deployment: stop its daemons, unmount, delete its RAM files and folder. Local;
    idempotent (nothing there: returns an empty list)."""
    d = Path(state_dir or default_dir()).absolute()
    try:
        st = load_state(d)
    except StagingError:
        st = None
    if st is not None and st["backend"] == "tmpfs":
        shutil.rmtree(st["root"], ignore_errors=True)      # this node's RAM ...
        others = _remove_on_other_nodes(st["root"])        # ... and every other node's
        shutil.rmtree(d, ignore_errors=True)
        return ["tmpfs store"] + [f"tmpfs store on {n}" for n in others]
    return ceph.teardown(d)


def _remove_on_other_nodes(root: str) -> list[str]:
    """Delete the node-local folder ``root`` on the allocation's other nodes (one ``srun --overlap``
    task per node); the nodes it ran on. Outside a multi-node job: nothing. Local.

    Ranks on every node write into their own node's copy of ``root``; without this, only the
    epilog (if the site installed it) would free those nodes' RAM."""
    import subprocess
    from hpcsuite.jobs.env import SlurmEnv, this_node
    env = SlurmEnv.from_environ()
    others = [n for n in env.nodes if n != this_node()]
    if not (env.in_job and others and shutil.which("srun")):
        return []
    argv = ["srun", "--overlap", f"--nodes={len(others)}", f"--ntasks={len(others)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(others)}", "--cpu-bind=none", "--job-name=hpcsuite-stage-down",
            "rm", "-rf", "--one-file-system", root]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise StagingError(f"stage down: removing {root} on {', '.join(others)} timed out (srun); "
                           "the epilog (jobscripts/stage-epilog.sh) removes it when the job ends") from None
    if p.returncode != 0:
        raise StagingError(f"stage down: removing {root} on {', '.join(others)} failed (srun exit "
                           f"{p.returncode}: {p.stderr.strip()[-300:]}); the epilog removes it when the job ends")
    return others


def status(state_dir=None) -> dict:
    """Health and usage of the deployment. Local."""
    d = Path(state_dir or default_dir()).absolute()
    st = load_state(d)
    if st["backend"] == "tmpfs":
        root = Path(st["root"])
        used = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        fs = os.statvfs(root)
        return {"backend": "tmpfs", "dir": str(d), "health": "OK", "root": str(root),
                "objects": len(TmpfsStore(root).list()), "bytes_used": used,
                "bytes_free": fs.f_bavail * fs.f_frsize}
    return ceph.status(d)


def open_store(state_dir=None, timeout: float = 15.0, checksum: str | None = None) -> Store:
    """A client of the deployment at ``state_dir`` (default :func:`default_dir`). Local.

    Every process (rank) opens its own; close it (or use ``with``) when done. ``checksum``: the
    algorithm of the objects it writes (default: the deployment's, else the fastest available).
    """
    d = Path(state_dir or default_dir()).absolute()
    st = load_state(d)
    b = st["backend"]
    alg = check_algorithm(checksum or st.get("checksum"))
    if b == "tmpfs":
        return TmpfsStore(st["root"], checksum=alg)
    if b == "rados":
        from .radosstore import RadosStore
        return RadosStore(st["conf"], st["pool"], timeout=timeout, checksum=alg)
    if b == "cephfs":
        if not st.get("mount") or not os.path.ismount(st["mount"]):
            raise StagingError(f"cephfs: {st.get('mount')} is not mounted (is the deployment at {d} up?)")
        return FileStore(Path(st["mount"]) / "store", backend="cephfs", checksum=alg)
    if b == "s3":
        from .s3store import S3Store
        try:
            cred = json.loads((d / "s3.json").read_text())
        except OSError as exc:
            raise StagingError(f"s3: cannot read the gateway credentials {d / 's3.json'}: {exc}") from None
        return S3Store(cred["endpoint"], cred["access_key"], cred["secret_key"], timeout=timeout,
                       checksum=alg)
    raise StagingError(f"{d}: unknown backend {b!r} in state.json")
