"""Checks of the host side of the networks: what the host network role would refuse or
guess at, refused or said by `validate` first (provisioner/hostnet.py is the one rule)."""

from __future__ import annotations

from collections.abc import Callable

from provisioner import hostnet
from provisioner.inventory.findings import Severity
from provisioner.inventory.loader import KeyPath, LoadedSite
from provisioner.inventory.models import NetworkKind, Node, Site

Emit = Callable[..., None]


def check(loaded: LoadedSite, emit: Emit) -> None:
    site = loaded.site
    nets = {n.name: n for n in site.networks}
    for i, n in enumerate(site.networks):
        if n.host_tagged and n.vlan is None:
            emit("vlan-missing", ("networks", i, "host_tagged"),
                 f"network {n.name} is tagged at the hosts but has no vlan",
                 "give it vlan: <id>, or drop host_tagged")
        for j, r in enumerate(n.routes):
            if r.via not in n.cidr:
                emit("address-outside-cidr", ("networks", i, "routes", j, "via"),
                     f"route to {r.to} via {r.via}: the next hop is outside {n.name} {n.cidr}",
                     "a route's next hop is a router on the network itself")
    macs: dict[str, KeyPath] = {}
    for i, p in enumerate(site.placements):
        block = loaded.catalog.get(p.block)
        for j, node in enumerate(p.nodes):
            base: KeyPath = ("placements", i, "nodes", j)
            for net, mac in node.macs.items():
                macs.setdefault(mac, (*base, "macs", net))
            for net, nic in node.interfaces.items():
                path: KeyPath = (*base, "interfaces", net)
                if net not in nets:
                    emit("unknown-network", path, f"interface for unknown network '{net}'",
                         f"known: {', '.join(sorted(nets)) or 'none'}", at_key=True)
                elif net not in node.addresses:
                    emit("nic-without-address", path,
                         f"{node.hostname}: interfaces.{net} names a network the node has "
                         "no address on", f"add addresses.{net}, or drop the entry",
                         at_key=True)
                for k, mac in enumerate(nic.bond.members if nic.bond else ()):
                    mp = (*path, "bond", "members", k)
                    if mac in macs:
                        where = loaded.sources.locate(macs[mac])
                        emit("duplicate-mac", mp, f"duplicate mac {mac}: also at "
                             f"{where.file}:{where.line} ({where.key_path})",
                             "check the MAC (copy errors are common)")
                    else:
                        macs[mac] = mp
            if node.management is not None:
                continue  # a switch: its ports are the fabric renderers'
            _names(node, site, base, emit)
            data = hostnet.data_networks(site, node)
            for n in data:
                if not hostnet.is_bound(node, n.name):
                    emit("nic-unbound", (*base, "addresses", n.name),
                         f"{node.hostname}: no NIC is named for network {n.name}, so the "
                         "host network role leaves it unconfigured",
                         f"give macs.{n.name} (the port's MAC), or interfaces.{n.name}."
                         "match_name or a bond", severity=Severity.WARNING, at_key=True)
            ports = hostnet.roce_ports(block) if block is not None else 0
            rails = hostnet.ports_used(node, [n for n in data if n.kind is NetworkKind.ROCE])
            if ports and rails > ports:
                emit("roce-rails-exceed-ports", (*base, "addresses"),
                     f"{node.hostname} is on {rails} RoCE port(s) but its block {p.block} "
                     f"has {ports}", "one RoCE network (rail) per port: drop a network "
                     "or fix the block's nics", at_key=True)
            elif ports and 0 < rails < ports:
                emit("roce-rails-fewer-than-ports", (*base, "addresses"),
                     f"{node.hostname} uses {rails} of its block's {ports} RoCE ports: "
                     f"NCCL gets {rails} rail(s) of {ports}",
                     "give each rail its own RoCE network and address, as the block is "
                     "cabled", severity=Severity.WARNING, at_key=True)


def _names(node: Node, site: Site, base: KeyPath, emit: Emit) -> None:
    """Two networks whose NICs end up with one interface name on the host."""
    seen: dict[str, str] = {}
    for h in hostnet.plan(site, node):
        names = [h.port, *(hostnet.member_name(h.port, k) for k in range(len(h.members)))]
        if h.name != h.port:
            names.append(h.name)
        for name in names:
            other = seen.get(name)
            if other is not None and other != h.network:
                key = "interfaces" if h.network in node.interfaces else "addresses"
                emit("interface-name-clash", (*base, key, h.network),
                     f"{node.hostname}: networks {other} and {h.network} both get the "
                     f"interface name {name}", f"give interfaces.{h.network}.name",
                     at_key=True)
            seen.setdefault(name, h.network)
