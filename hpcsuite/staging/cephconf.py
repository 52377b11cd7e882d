"""Ceph configuration, keys and free ports for one private deployment (no Ceph process runs here)."""
from __future__ import annotations

import base64
import os
import socket
import struct
import time
from pathlib import Path

__all__ = ["cephx_key", "write_keyring", "free_port", "render_conf", "parse_size"]


def cephx_key() -> str:
    """A new cephx secret in Ceph's base64 form (type 1 = AES, creation time, 16 random bytes)."""
    return base64.b64encode(struct.pack("<HIIH", 1, int(time.time()), 0, 16) + os.urandom(16)).decode()


def write_keyring(path: Path, entries: dict[str, tuple[str, dict[str, str]]]) -> None:
    """Write a keyring file (mode 0600): ``{entity: (key, {service: cap})}``."""
    text = ""
    for entity, (key, caps) in entries.items():
        text += f"[{entity}]\n\tkey = {key}\n" + "".join(f'\tcaps {s} = "{c}"\n' for s, c in caps.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def free_port(addr: str = "127.0.0.1", avoid: set[int] = frozenset()) -> int:
    """A TCP port free on ``addr`` now (the kernel's choice, so two deployments get different ones)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise OSError(f"no free TCP port on {addr}")


def parse_size(text: str | int) -> int:
    """``"1G"``, ``"512M"``, ``"4GiB"``, ``1073741824`` -> bytes (binary units). ValueError if bad."""
    if isinstance(text, int):
        return text
    s = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if s and s[-1] in mult:
            return int(float(s[:-1]) * mult[s[-1]])
        return int(s)
    except ValueError:
        raise ValueError(f"bad size {text!r} (use e.g. 512M, 1G, 4G)") from None


def render_conf(*, fsid: str, mon_addr: str, ports: tuple[int, int], state_dir: Path, node_dir: Path,
                objectstore: str, osd_bytes: int, single_node: bool, network: str | None = None,
                iface: str | None = None) -> str:
    """The ``ceph.conf`` of a deployment: cephx on, everything under the two private folders,
    pools of size 1 (RAM is job-temporary), no placement-group autoscaling. ``network`` (CIDR) and
    ``iface``: the public (and cluster) network the daemons bind to (``stage up --iface/--address``);
    default: ``mon_addr`` alone on one node. Local."""
    v2, v1 = ports
    if network:
        net = f"public network = {network}\ncluster network = {network}\n"
        if iface:
            net += f"public network interface = {iface}\ncluster network interface = {iface}\n"
    else:
        net = f"public network = {mon_addr}/32\n" if single_node else ""
    return f"""# written by hpcsuite stage up; private to this deployment
[global]
fsid = {fsid}
mon host = [v2:{mon_addr}:{v2},v1:{mon_addr}:{v1}]
mon initial members = a
{net}auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
run dir = {node_dir}/run
admin socket = $run_dir/$cluster-$name.asok
log file = {state_dir}/logs/$name.log
log to stderr = false
err to stderr = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 5
mgr initial modules = iostat
# placement-group states reach the manager within a second (health is known sooner)
mgr stats period = 1
osd mon report interval = 1
mgr tick period = 1
# a port that is taken fails fast instead of retrying for 15 s
ms bind retry count = 1
ms bind retry delay = 1

[mon]
mon data = {node_dir}/$name
keyring = $mon_data/keyring

[mgr]
mgr data = {node_dir}/$name
keyring = $mgr_data/keyring

[osd]
osd data = {node_dir}/$name
keyring = $osd_data/keyring
osd objectstore = {objectstore}
bluestore block create = true
bluestore block size = {osd_bytes}
bluestore fsck on mkfs = false
bluestore fsck on mount = false
memstore device bytes = {osd_bytes}
osd memory target = 1073741824
# each op shard takes ~0.3 s to set up; a RAM OSD on a few cores needs few of them
osd op num shards = 2
osd op num threads per shard = 2
osd heartbeat grace = 6

[mds]
mds data = {node_dir}/$name
keyring = $mds_data/keyring

[client]
keyring = {state_dir}/client.admin.keyring
admin socket = $run_dir/$cluster-$name.$pid.asok
log file = /dev/null

[client.rgw.gw]
keyring = {node_dir}/rgw/keyring
log file = {state_dir}/logs/rgw.gw.log
rgw data = {node_dir}/rgw
"""
