"""The SLURM job a process runs in, read from its environment (host lists expanded).

Uses python-hostlist (a well-kept library) to expand ``SLURM_JOB_NODELIST`` (``node[1-3,5]``) and
``SLURM_TASKS_PER_NODE`` (``2(x3),1``); no ``scontrol`` call, so it works on compute nodes and in
containers where the SLURM client tools are missing.

Examples
--------
>>> env = SlurmEnv.from_environ({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]",
...                              "SLURM_TASKS_PER_NODE": "2(x2),1", "SLURM_NTASKS": "5"})
>>> env.nodes, env.tasks_per_node, env.head_node
(['n1', 'n2', 'n3'], [2, 2, 1], 'n1')
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Mapping

import hostlist

__all__ = ["SlurmEnv", "expand_nodelist", "tasks_per_node", "this_node", "slurm_node_address"]


def expand_nodelist(spec: str) -> list[str]:
    """``"n[1-3,5]"`` -> ``["n1", "n2", "n3", "n5"]`` (ValueError naming the bad list). Local."""
    try:
        return hostlist.expand_hostlist(spec)
    except hostlist.BadHostlist as exc:
        raise ValueError(f"malformed host list {spec!r}: {exc}") from None


def tasks_per_node(spec: str) -> list[int]:
    """``"2(x3),1"`` -> ``[2, 2, 2, 1]`` (ValueError naming the bad value). Local."""
    try:
        return hostlist.parse_slurm_tasks_per_node(spec)
    except (hostlist.BadHostlist, ValueError) as exc:
        raise ValueError(f"malformed SLURM_TASKS_PER_NODE {spec!r}: {exc}") from None


def this_node(env: Mapping[str, str] | None = None) -> str:
    """The name of the node this process runs on, as SLURM's host lists spell it. Local.

    Inside a job (batch script or step) that is ``SLURMD_NODENAME``: a site may name its nodes apart
    from their host names (``NodeHostname``), and several emulated nodes may share one host.
    Elsewhere, the short host name.
    """
    env = os.environ if env is None else env
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def slurm_node_address(node: str, timeout: float = 10.0) -> str | None:
    """The address SLURM reaches ``node`` at (its ``NodeAddr``), or ``None`` when SLURM does not say.

    Local; runs ``scontrol show node`` (``None`` if it is missing or fails, or when the address is
    just the node's name, which the caller then resolves itself).
    """
    if shutil.which("scontrol") is None:
        return None
    try:
        p = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = dict(f.split("=", 1) for f in p.stdout.split() if "=" in f) if p.returncode == 0 else {}
    addr = fields.get("NodeAddr")
    return addr if addr and addr != node else None


def _int(env: Mapping[str, str], key: str) -> int | None:
    v = env.get(key)
    return int(v) if v not in (None, "") and v.isdigit() else None


@dataclass
class SlurmEnv:
    """What SLURM tells a process about its job (all ``None``/empty outside a job). Local."""

    job_id: str | None = None
    job_name: str | None = None
    nodes: list[str] = field(default_factory=list)
    tasks_per_node: list[int] = field(default_factory=list)
    ntasks: int | None = None
    cpus_per_task: int | None = None
    procid: int | None = None
    localid: int | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    submit_dir: str | None = None
    partition: str | None = None

    @property
    def in_job(self) -> bool:
        return self.job_id is not None

    @property
    def head_node(self) -> str | None:
        """The first node of the allocation (where single services such as a Ceph monitor go)."""
        return self.nodes[0] if self.nodes else None

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> "SlurmEnv":
        """Read the job from ``env`` (default ``os.environ``). Local."""
        env = os.environ if env is None else env
        if "SLURM_JOB_ID" not in env:
            return cls()
        nodes = expand_nodelist(env["SLURM_JOB_NODELIST"]) if env.get("SLURM_JOB_NODELIST") else []
        tpn = tasks_per_node(env["SLURM_TASKS_PER_NODE"]) if env.get("SLURM_TASKS_PER_NODE") else []
        return cls(job_id=env["SLURM_JOB_ID"], job_name=env.get("SLURM_JOB_NAME"), nodes=nodes,
                   tasks_per_node=tpn, ntasks=_int(env, "SLURM_NTASKS"),
                   cpus_per_task=_int(env, "SLURM_CPUS_PER_TASK"), procid=_int(env, "SLURM_PROCID"),
                   localid=_int(env, "SLURM_LOCALID"), array_job_id=env.get("SLURM_ARRAY_JOB_ID"),
                   array_task_id=_int(env, "SLURM_ARRAY_TASK_ID"), submit_dir=env.get("SLURM_SUBMIT_DIR"),
                   partition=env.get("SLURM_JOB_PARTITION"))
