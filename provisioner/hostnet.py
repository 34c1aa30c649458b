"""A node's data networks as its host configures them: one rule for validate and render.

The management (and provisioning) NIC is the installer's: autoinstall's netplan brings it
up from the same inventory (render/autoinstall.py), so the host network role leaves it as
it is and configures every other network the node has an address on: RoCE rails, storage,
others. Each gets its NIC (by MAC, a name rule or a bond of MACs), its address and MTU, a
VLAN sub-interface where the network is tagged at the host, its static routes.

Several RoCE NICs (rails) get source-based routing: one routing table per rail and a rule
`from <address> lookup <table>`, so a reply leaves by the rail it came in on, with ARP
answered only on the NIC that owns the address (arp_ignore 1, arp_announce 2) and loose
reverse-path filtering (rp_filter 2): Linux ip-sysctl documentation
(docs.kernel.org/networking/ip-sysctl.html, arp_ignore, arp_announce, rp_filter).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from ipaddress import IPv4Interface

from provisioner.inventory.models import BlockType, Network, NetworkKind, Node, Site

ROUTE_TABLE_BASE = 100  # rail n's table is 101 + its place among the site's RoCE networks
DATA_KINDS = frozenset({NetworkKind.ROCE, NetworkKind.STORAGE, NetworkKind.OTHER})
# per-interface kernel settings of a RoCE NIC on a multi-NIC host (ip-sysctl.rst)
ROCE_SYSCTL = {"arp_ignore": 1, "arp_announce": 2, "rp_filter": 2}
IFNAMSIZ = 15


@dataclass(frozen=True, slots=True)
class HostIf:
    """One network on one host: where the role puts it and what it sets."""

    network: str
    kind: str
    name: str  # the interface carrying the address (a VLAN's name where tagged)
    port: str  # the port (or bond) under it
    mac: str | None
    match_name: str | None
    members: tuple[str, ...]  # bond members' MACs
    bond_mode: str | None
    address: str  # a.b.c.d/prefix
    mtu: int
    vlan: int | None
    table: int | None  # source routing (rails) only
    gateway: str | None
    routes: tuple[tuple[str, str], ...] = field(default=())

    def to_vars(self) -> dict[str, object]:
        return {"network": self.network, "kind": self.kind, "name": self.name,
                "port": self.port, "mac": self.mac or "", "match_name": self.match_name or "",
                "members": list(self.members), "bond_mode": self.bond_mode or "",
                "address": self.address, "mtu": self.mtu, "vlan": self.vlan or 0,
                "table": self.table or 0, "gateway": self.gateway or "",
                "routes": [{"to": t, "via": v} for t, v in self.routes],
                "sysctl": ROCE_SYSCTL if self.kind == NetworkKind.ROCE.value else {}}


def default_name(network: str) -> str:
    """The interface name a network's NIC gets when the inventory names none."""
    return network.replace(".", "-")[:IFNAMSIZ]


def member_name(port: str, i: int) -> str:
    return f"{port[:IFNAMSIZ - 3]}-p{i}"


def vlan_name(port: str, vlan: int) -> str:
    suffix = f".{vlan}"
    return port[:IFNAMSIZ - len(suffix)] + suffix


def data_networks(site: Site, node: Node) -> list[Network]:
    """The networks the role configures on this node, in the site's order."""
    return [n for n in site.networks if n.kind in DATA_KINDS and n.name in node.addresses]


def rail_tables(site: Site) -> dict[str, int]:
    """RoCE network -> its routing table on a multi-rail host (stable across nodes)."""
    roce = [n.name for n in site.networks if n.kind is NetworkKind.ROCE]
    return {name: ROUTE_TABLE_BASE + 1 + i for i, name in enumerate(roce)}


def is_bound(node: Node, network: str) -> bool:
    """Whether the host can tell which of its ports carries `network`."""
    if network in node.macs:
        return True
    nic = node.interfaces.get(network)
    return nic is not None and (nic.match_name is not None or nic.bond is not None)


def ports_used(node: Node, networks: list[Network]) -> int:
    """Physical ports the networks take on the node (a bond takes all its members)."""
    used = 0
    for n in networks:
        nic = node.interfaces.get(n.name)
        used += len(nic.bond.members) if nic is not None and nic.bond else 1
    return used


def roce_ports(block: BlockType) -> int:
    return sum(n.ports for n in block.nics if n.carries == "roce")


def plan(site: Site, node: Node) -> list[HostIf]:
    """Every bound data network of the node as the role configures it."""
    return list(_plan(site, node))


def _plan(site: Site, node: Node) -> Iterator[HostIf]:
    nets = data_networks(site, node)
    rails = [n for n in nets if n.kind is NetworkKind.ROCE]
    tables = rail_tables(site) if len(rails) > 1 else {}
    for n in nets:
        if not is_bound(node, n.name):
            continue
        nic = node.interfaces.get(n.name)
        port = (nic.name if nic is not None and nic.name else None) or default_name(n.name)
        tagged = n.host_tagged and n.vlan is not None
        yield HostIf(
            network=n.name, kind=n.kind.value,
            name=vlan_name(port, n.vlan) if tagged and n.vlan is not None else port,
            port=port, mac=node.macs.get(n.name),
            match_name=nic.match_name if nic is not None else None,
            members=nic.bond.members if nic is not None and nic.bond else (),
            bond_mode=nic.bond.mode if nic is not None and nic.bond else None,
            address=str(IPv4Interface(f"{node.addresses[n.name]}/{n.cidr.prefixlen}")),
            mtu=n.mtu, vlan=n.vlan if tagged else None, table=tables.get(n.name),
            gateway=str(n.gateway) if n.gateway is not None else None,
            routes=tuple((str(r.to), str(r.via)) for r in n.routes))
