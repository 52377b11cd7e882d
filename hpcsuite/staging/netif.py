"""Which network a Ceph deployment binds to: ``stage up --iface NAME`` / ``--address ADDR``.

DisTRaC takes the interface (``-i ib0``) and binds every daemon to that interface's address on
each node. Here a :class:`Binding` is decided once on the head node (where the monitor goes) and
each node resolves its own address from it (:meth:`Binding.local_address`): the address on the
named interface, or the one inside the chosen network. Interfaces come from psutil's
``net_if_addrs`` (a staging dependency); without psutil, from the standard library (names from
``socket.if_nameindex``, each one's primary IPv4 address and netmask from the kernel's
``SIOCGIFADDR``/``SIOCGIFNETMASK``). All functions are local.

Examples
--------
>>> b = resolve(iface="lo")
>>> b.address, b.network
('127.0.0.1', '127.0.0.0/8')
>>> b.local_address()                     # what every other node runs to find its own
'127.0.0.1'
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import asdict, dataclass

from hpcsuite.runtime import InputError

__all__ = ["Binding", "interfaces", "resolve", "describe_interfaces"]


def interfaces() -> dict[str, list[tuple[str, int]]]:
    """``{name: [(IPv4 address, prefix length), ...]}`` for every interface of this node (an
    interface without IPv4 address maps to an empty list). Local."""
    try:
        import psutil
    except ImportError:
        return _interfaces_stdlib()
    out: dict[str, list[tuple[str, int]]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        out[name] = [(a.address, _prefix(a.netmask)) for a in addrs if a.family == socket.AF_INET]
    return out


def _prefix(netmask: str | None) -> int:
    if not netmask:
        return 32
    return ipaddress.IPv4Network(f"0.0.0.0/{netmask}").prefixlen


def _interfaces_stdlib() -> dict[str, list[tuple[str, int]]]:
    """Linux: every interface's name and its primary IPv4 address (secondary ones are not seen)."""
    import fcntl
    import struct
    siocgifaddr, siocgifnetmask = 0x8915, 0x891B
    out: dict[str, list[tuple[str, int]]] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), siocgifaddr, req)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), siocgifnetmask, req)[20:24])
            except OSError:                   # EADDRNOTAVAIL: no IPv4 address
                out[name] = []
                continue
            out[name] = [(addr, _prefix(mask))]
    return out


def describe_interfaces(ifs: dict[str, list[tuple[str, int]]] | None = None) -> str:
    """``"lo 127.0.0.1, eth0 10.1.0.5, ib0 (no IPv4)"``: this node's interfaces, for messages."""
    ifs = interfaces() if ifs is None else ifs
    return ", ".join(f"{n} {' '.join(a for a, _ in v)}" if v else f"{n} (no IPv4)" for n, v in sorted(ifs.items()))


@dataclass(frozen=True)
class Binding:
    """Where the daemons listen: ``network`` (CIDR, Ceph's ``public network``), narrowed to
    ``iface`` when one was named; ``address`` is the head node's own address in it."""

    address: str
    network: str
    iface: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def agent_args(self) -> list[str]:
        """The arguments that let another node's agent (or check) find its own address."""
        return ["--network", self.network] + (["--iface", self.iface] if self.iface else [])

    def local_address(self, node: str | None = None) -> str:
        """This node's IPv4 address on ``iface`` (inside ``network``), or without an
        interface the first of its addresses inside ``network``. Local.

        Raises :class:`InputError` naming ``node`` and its interfaces when there is none.
        """
        return _address_in(interfaces(), self.iface, ipaddress.IPv4Network(self.network), node)


def _address_in(ifs, iface, net: ipaddress.IPv4Network, node) -> str:
    where = f" on {node}" if node else ""
    if iface is not None:
        if iface not in ifs:
            raise InputError(f"stage up: --iface {iface}: no such network interface{where} "
                             f"(interfaces: {describe_interfaces(ifs)})")
        cands = ifs[iface]
        if not cands:
            raise InputError(f"stage up: --iface {iface} has no IPv4 address{where} "
                             f"(interfaces: {describe_interfaces(ifs)})")
    else:
        cands = [a for v in ifs.values() for a in v]
    inside = [a for a, _ in cands if ipaddress.IPv4Address(a) in net]
    if not inside:
        what = f"--iface {iface} has no address" if iface else "no interface has an address"
        raise InputError(f"stage up: {what} in the network {net}{where} (interfaces: {describe_interfaces(ifs)})")
    return inside[0]


def resolve(iface: str | None = None, address: str | None = None, node: str | None = None) -> Binding | None:
    """The :class:`Binding` of ``--iface`` and/or ``--address`` on this (the head) node, or ``None``
    when neither is given. Local; raises :class:`InputError` with one line that names this node's
    interfaces when the choice does not exist here.

    ``iface``: the interface's (first) IPv4 address and its network. ``address``: either an address
    of this node (``10.1.0.5``; its interface's network), or a network (``10.1.0.0/16``: the other
    nodes bind to their own address inside it, this node to its own). Both: the address must be on
    that interface.
    """
    if iface is None and address is None:
        return None
    if iface is not None and (not iface.strip() or "/" in iface or len(iface) > 15):
        raise InputError(f"stage up: --iface {iface!r} is not a network interface name (e.g. ib0, eth0, lo)")
    ifs = interfaces()
    if address is None:
        addr = _address_in(ifs, iface, ipaddress.IPv4Network("0.0.0.0/0"), node)
        prefix = dict(ifs[iface])[addr]
        return Binding(addr, str(ipaddress.IPv4Interface(f"{addr}/{prefix}").network), iface)
    try:
        given = ipaddress.IPv4Interface(address.strip())
    except ValueError:
        raise InputError(f"stage up: --address {address!r} is not an IPv4 address or network "
                         "(e.g. 10.1.0.5 or 10.1.0.0/16)") from None
    if "/" in address and given.ip == given.network.network_address and given.network.prefixlen < 32:
        net = given.network                                         # a network: our address in it
        return Binding(_address_in(ifs, iface, net, node), str(net), iface)
    addr = str(given.ip)
    holders = {n: dict(v)[addr] for n, v in ifs.items() if addr in dict(v)}
    if iface is not None:
        _address_in(ifs, iface, ipaddress.IPv4Network("0.0.0.0/0"), node)       # exists, has IPv4
        if iface not in holders:
            raise InputError(f"stage up: --address {addr} is not on --iface {iface} "
                             f"(interfaces: {describe_interfaces(ifs)})")
    if not holders:
        raise InputError(f"stage up: --address {addr} is not an address of this node{f' ({node})' if node else ''} "
                         f"(interfaces: {describe_interfaces(ifs)})")
    name = iface or sorted(holders)[0]
    prefix = given.network.prefixlen if "/" in address else holders[name]
    return Binding(addr, str(ipaddress.IPv4Interface(f"{addr}/{prefix}").network), iface)
