"""Cabling resolved to concrete links: rules expanded, ports parsed per switch OS.

Pure and cheap: checks (fabric_checks.py) and the switch renderers (provisioner/fabric/) read
the same resolved links, so what is checked is what is rendered.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from provisioner.inventory.models import BlockKind, BlockType, NetworkKind, Node, Site

KeyPath = tuple[str | int, ...]

# Front-panel port names per switch OS: (port number, breakout sub-port or None, sub base).
# Cumulus: swp1, swp1s0 (sub-ports from 0); Onyx: Eth1/1, Eth1/1/1; EOS: Ethernet1,
# Ethernet1/1 (sub-ports from 1). SONiC names ports by first lane (Ethernet0, Ethernet8):
# only the form is checked there, not the count (lanes per port vary by platform).
_PORT_FORMS: dict[str, tuple[re.Pattern[str], int]] = {
    "cumulus": (re.compile(r"^swp(\d+)(?:s(\d+))?$"), 0),
    "onyx": (re.compile(r"^Eth1/(\d+)(?:/(\d+))?$"), 1),
    "eos": (re.compile(r"^Ethernet(\d+)(?:/(\d+))?$"), 1),
    "cisco_ios": (re.compile(r"^[A-Za-z]+(?:\d+/)*(\d+)()$"), 1),
}
_SONIC_PORT = re.compile(r"^Ethernet(\d+)$")


@dataclass(frozen=True, slots=True)
class PortName:
    number: int  # front-panel port, from 1
    sub: int | None  # breakout sub-port index, from 0, or None for the whole port


def parse_port(nos: str, name: str) -> PortName | None:
    """The port a name designates on this OS, or None when the name is not of its form."""
    if nos == "sonic":
        m = _SONIC_PORT.match(name)
        return PortName(int(m.group(1)) + 1, None) if m else None
    form = _PORT_FORMS.get(nos)
    m = form[0].match(name) if form else None
    if form is None or m is None:
        return None
    sub = int(m.group(2)) - form[1] if m.group(2) else None
    return PortName(int(m.group(1)), sub)


@dataclass(frozen=True, slots=True)
class Endpoint:
    node: Node
    rack: str
    block: BlockType
    path: KeyPath  # key path of the node's hostname


@dataclass(frozen=True, slots=True)
class ResolvedLink:
    node: str
    nic: str
    switch: str
    switch_port: str
    host_mtu_bytes: int
    switch_mtu_bytes: int
    host_speed_gbps: float | None
    path: KeyPath  # where the link (or the rule that made it) is written


def endpoints(site: Site, catalog: dict[str, BlockType]) -> dict[str, Endpoint]:
    out: dict[str, Endpoint] = {}
    for pi, p in enumerate(site.placements):
        block = catalog.get(p.block)
        if block is None:
            continue
        for ni, n in enumerate(p.nodes):
            out.setdefault(n.hostname, Endpoint(n, p.rack, block,
                                                ("placements", pi, "nodes", ni, "hostname")))
    return out


def roce_networks(site: Site) -> dict[str, int]:
    """RoCE network name -> MTU in bytes."""
    return {n.name: n.mtu for n in site.networks if n.kind is NetworkKind.ROCE}


def roce_nics(site: Site, node: Node) -> tuple[str, ...]:
    """The node's RoCE ports: software.roce.interfaces, else the names of its RoCE networks."""
    nets = [name for name in node.addresses if name in roce_networks(site)]
    if not nets:
        return ()
    return site.software.roce.interfaces or tuple(nets)


def host_mtu(site: Site, node: Node) -> int:
    nets = roce_networks(site)
    mtus = [nets[name] for name in node.addresses if name in nets]
    return min(mtus) if mtus else 1500


def link_mtu(site: Site, node: Node, nic: str) -> int:
    """The host end's MTU of one link: its own RoCE network's where the NIC is named by
    the network (a rail), else the node's smallest RoCE MTU."""
    nets = roce_networks(site)
    if nic in nets and nic in node.addresses:
        return nets[nic]
    return host_mtu(site, node)


def is_switch(ep: Endpoint) -> bool:
    return ep.block.kind is BlockKind.SWITCH and ep.node.management is not None


def is_roce_switch(ep: Endpoint) -> bool:
    return is_switch(ep) and ep.block.switch_role == "roce"


def rack_leaves(eps: dict[str, Endpoint]) -> dict[str, Endpoint]:
    """Rack -> its first RoCE switch (placement order). One pass: sites run to 10^4 nodes."""
    out: dict[str, Endpoint] = {}
    for ep in eps.values():
        if is_roce_switch(ep):
            out.setdefault(ep.rack, ep)
    return out


def _speed(ep: Endpoint) -> float | None:
    return ep.block.nics[0].speed_gbps if ep.block.nics else None


def resolve(site: Site, catalog: dict[str, BlockType]) -> Iterator[ResolvedLink]:
    """Explicit links first, then rule-made ones for NICs no explicit link cables."""
    eps = endpoints(site, catalog)
    leaves = rack_leaves(eps)
    cab = site.cabling
    explicit: set[tuple[str, str]] = set()
    for i, link in enumerate(cab.links):
        explicit.add((link.node, link.nic))
        ep = eps.get(link.node)
        yield ResolvedLink(
            link.node, link.nic, link.switch, link.switch_port,
            link_mtu(site, ep.node, link.nic) if ep else 1500,
            link.mtu_bytes or cab.switch_mtu_bytes,
            _speed(ep) if ep else None, ("cabling", "links", i))
    for ri, rule in enumerate(cab.rules):
        index: dict[str, int] = {}
        for name, ep in eps.items():
            if is_switch(ep) or rule.nic not in roce_nics(site, ep.node):
                continue
            index[ep.rack] = index.get(ep.rack, 0) + 1
            if (name, rule.nic) in explicit:
                continue
            leaf = leaves.get(ep.rack)
            if leaf is None:
                continue
            port = rule.port_pattern.replace("{n}", str(rule.first_port + index[ep.rack] - 1))
            yield ResolvedLink(name, rule.nic, leaf.node.hostname, port,
                               link_mtu(site, ep.node, rule.nic), cab.switch_mtu_bytes,
                               _speed(ep),
                               ("cabling", "rules", ri))
