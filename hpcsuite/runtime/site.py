"""The site file: what every job at a site repeats, in one TOML file.

A cluster's job scripts start with the same ``module load`` lines and environment, launch with the
same ``srun --mpi=`` plugin and go to the same partition, account and QoS; staging binds to the
same network interface with the same RAM budget. The site file holds these once, and
``hpcsuite jobscript`` renders them into every script (reference: ``docs/site.md``)::

    [modules]
    load = ["gcc/12.2", "openmpi/4.1.6", "hdf5/1.14-openmpi"]

    [env]
    OMP_PROC_BIND = "close"

    [slurm]
    srun_mpi = "pmix"          # default: the plugin for the MPI that mpi4py was built against
    partition = "compute"
    account = "proj42"
    qos = "normal"

    [staging]
    iface = "ib0"
    ram = "8G"

It is looked up in this order, the first that exists wins: ``$HPCSUITE_SITE`` (an error if it names
no file), ``$XDG_CONFIG_HOME/hpcsuite/site.toml`` (``~/.config/hpcsuite/site.toml``), and
``/etc/hpcsuite/site.toml``. No file at all is a valid site with nothing set.

Errors read like the decks' (:mod:`hpcsuite.deck`, whose schema machinery parses the file): one line
naming the file, the table and the key, raised as :class:`~hpcsuite.runtime.InputError`::

    /etc/hpcsuite/site.toml: [slurm] unknown key 'partiton'; did you mean 'partition'?
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .. import deck as dk
from .errors import InputError

__all__ = ["Site", "load_site", "site_candidates", "SITE_SCHEMA"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLUGIN = re.compile(r"^[a-z][a-z0-9_]*$")
_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT](i?B)?)?$", re.I)
_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass
class _StrList(dk.Field):
    """A list of non-empty strings (may be empty)."""

    what: str = "strings"

    def convert(self, v):
        if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
            raise ValueError(f"must be a list of {self.what}, got {v!r}")
        return [x.strip() for x in v]


@dataclass
class _Pattern(dk.Field):
    """A string matching ``pattern``; ``what`` says what it must be."""

    pattern: re.Pattern = _PLUGIN
    what: str = "a name"

    def convert(self, v):
        if not isinstance(v, str) or not self.pattern.match(v.strip()):
            raise ValueError(f"must be {self.what}, got {v!r}")
        return v.strip()


SITE_SCHEMA = dk.Schema({
    "modules": {
        "load": _StrList(default=[], what="module names (the arguments of 'module load')",
                         help="modules loaded before the job's environment is activated"),
    },
    "slurm": {
        "srun_mpi": _Pattern(default=None, pattern=_PLUGIN, what="an srun --mpi plugin name such as "
                             "'pmi2', 'pmix' or 'cray_shasta'",
                             help="srun --mpi plugin (default: the one for this installation's MPI)"),
        "partition": dk.Str(default=None, nonempty=True, help="default #SBATCH --partition"),
        "account": dk.Str(default=None, nonempty=True, help="default #SBATCH --account"),
        "qos": dk.Str(default=None, nonempty=True, help="default #SBATCH --qos"),
    },
    "staging": {
        "iface": dk.Str(default=None, nonempty=True, help="network interface or address Ceph binds to"),
        "ram": _Pattern(default=None, pattern=_SIZE, what="a size such as '512M', '8G' or '1T'",
                        help="RAM budget per node for staging"),
    },
    "env": {},          # free-form: NAME = "value" (checked by _parse_env)
}, doc={"modules": "environment modules", "env": "environment variables of every job step",
        "slurm": "SLURM defaults", "staging": "job-temporary RAM storage"})


@dataclass(frozen=True)
class Site:
    """What a site file sets (``None``/empty where it sets nothing).

    Attributes
    ----------
    path : Path or None
        The file that was read; ``None`` when no site file exists.
    modules : list of str
        Arguments of ``module load``, in order.
    env : dict of str to str
        Environment variables for every job (``$VAR`` in a value expands in the job's shell).
    srun_mpi : str or None
        The ``srun --mpi=`` plugin; ``None``: the one for this installation's MPI.
    partition, account, qos : str or None
        Default ``#SBATCH`` directives (the command line of ``hpcsuite jobscript`` wins).
    staging_iface : str or None
        Network interface (``ib0``) or address for staging daemons.
    staging_ram : str or None
        RAM budget per node for staging, as written (``"8G"``); see :attr:`staging_ram_bytes`.
    """

    path: Path | None = None
    modules: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    srun_mpi: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    staging_iface: str | None = None
    staging_ram: str | None = None

    @property
    def staging_ram_bytes(self) -> int | None:
        """``staging_ram`` in bytes (binary units: ``"8G"`` is 8 GiB), or ``None``. Local."""
        if self.staging_ram is None:
            return None
        s = self.staging_ram.strip().upper().removesuffix("B").removesuffix("I").strip()
        if s and s[-1] in _SIZE_UNITS:
            return int(float(s[:-1]) * _SIZE_UNITS[s[-1]])
        return int(float(s))


def site_candidates(env=None) -> list[tuple[str, Path]]:
    """The places a site file is looked for, in order, as ``(why, path)``. Local.

    ``$HPCSUITE_SITE`` (when set and not empty), ``$XDG_CONFIG_HOME/hpcsuite/site.toml`` (default
    ``~/.config``) and ``/etc/hpcsuite/site.toml``.
    """
    env = os.environ if env is None else env
    out = []
    if env.get("HPCSUITE_SITE"):
        out.append(("$HPCSUITE_SITE", Path(env["HPCSUITE_SITE"]).expanduser()))
    config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path("~/.config").expanduser()
    out.append(("user", config / "hpcsuite" / "site.toml"))
    out.append(("system", Path("/etc/hpcsuite/site.toml")))
    return out


def _parse_env(raw, path: str) -> dict:
    if not isinstance(raw, dict):
        raise InputError(f"{path}: env must be a table [env], got {raw!r}")
    out = {}
    for k, v in raw.items():
        if not _ENV_NAME.match(k):
            raise InputError(f"{path}: [env] {k!r} is not an environment variable name "
                             "(letters, digits and '_', not starting with a digit)")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise InputError(f"{path}: [env] {k} must be a string (or a number), got {v!r}")
        out[k] = str(v)
    return out


def parse_site(text: str, path: str = "<site>") -> Site:
    """The :class:`Site` that the TOML ``text`` describes (``path`` names it in errors). Local.

    Raises
    ------
    InputError
        Invalid TOML, an unknown table or key (with a suggestion), or a value of the wrong type.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    env = _parse_env(raw.pop("env", {}), path)
    parsed = dk.parse(raw, SITE_SCHEMA, path)
    return Site(path=Path(path), modules=list(parsed.modules.load), env=env,
                srun_mpi=parsed.slurm.srun_mpi, partition=parsed.slurm.partition,
                account=parsed.slurm.account, qos=parsed.slurm.qos,
                staging_iface=parsed.staging.iface, staging_ram=parsed.staging.ram)


def load_site(path: str | Path | None = None) -> Site:
    """The site configuration: the file at ``path``, else the first of :func:`site_candidates`
    that exists, else an empty :class:`Site` (``path`` None). Local (read on the calling process).

    Raises
    ------
    InputError
        ``path`` or ``$HPCSUITE_SITE`` names no readable file, or the file is invalid (one line
        naming the file, table and key).
    """
    if path is not None:
        chosen = Path(path).expanduser()
        why = "site file"
    else:
        chosen = why = None
        for why_, p in site_candidates():
            if why_ == "$HPCSUITE_SITE" or p.is_file():
                chosen, why = p, why_
                break
    if chosen is None:
        return Site()
    try:
        text = chosen.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{chosen}: no such site file" + (f" (from {why}={chosen})" if why.startswith("$")
                                                            else "")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{chosen}: cannot read the site file: {exc}") from None
    return parse_site(text, str(chosen))
