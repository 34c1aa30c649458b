"""Cross-object checks of a loaded site. No I/O: this runs before anything touches hardware.

Each check yields Findings with a key path; locations are resolved only for findings.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from ipaddress import IPv4Address

from provisioner import power
from provisioner.inventory import (
    circuit_checks,
    fabric_checks,
    hostnet_checks,
    kube_checks,
    software_checks,
)
from provisioner.inventory.fields import ip_or_none
from provisioner.inventory.findings import Category, Finding, Severity
from provisioner.inventory.kube_checks import node_roles
from provisioner.inventory.loader import KeyPath, LoadedSite
from provisioner.inventory.models import (
    BlockKind,
    BlockType,
    Network,
    NetworkKind,
    Role,
)
from provisioner.inventory.security import transport_warnings, way_in
from provisioner.inventory.yamlsafe import gc_paused

Emit = Callable[..., None]


class _Collector:
    def __init__(self, loaded: LoadedSite) -> None:
        self.loaded = loaded
        self.findings: list[Finding] = []

    def __call__(self, code: str, path: KeyPath, message: str, hint: str | None = None, *,
                 severity: Severity = Severity.ERROR, category: Category = Category.INVENTORY,
                 at_key: bool = False) -> None:
        loc = self.loaded.sources.locate(path, at_key=at_key)
        self.findings.append(Finding(code, severity, message, hint, loc, category))


def check(loaded: LoadedSite, basis: power.Basis = "nameplate") -> list[Finding]:
    """All findings for a site, errors and warnings, in inventory order within each check."""
    with gc_paused():  # the loaded site is millions of objects at 100,000 nodes
        return _check(loaded, basis)


def _check(loaded: LoadedSite, basis: power.Basis) -> list[Finding]:
    emit = _Collector(loaded)
    emit.findings.extend(loaded.warnings)
    for fn in (_placements, _uniqueness, _networks, hostnet_checks.check, _credentials,
               software_checks.check, kube_checks.check, transport_warnings, way_in):
        fn(loaded, emit)
    fabric_checks.check(loaded, emit)
    _budgets(loaded, emit, basis)
    return emit.findings


# ---------------------------------------------------------------- placements and racks


def _placements(loaded: LoadedSite, emit: Emit) -> None:
    site, catalog = loaded.site, loaded.catalog
    racks = {r.name: r for r in site.racks}
    seen_rack: set[str] = set()
    for i, r in enumerate(site.racks):
        if r.name in seen_rack:
            emit("duplicate-rack", ("racks", i, "name"), f"rack '{r.name}' is defined twice",
                 "give every rack a unique name")
        seen_rack.add(r.name)
        if r.reserved_u >= r.height_u:
            emit("u-out-of-range", ("racks", i, "reserved_u"),
                 f"reserved_u {r.reserved_u} leaves no space in a {r.height_u} U rack")
    occupied: dict[str, dict[int, int]] = {}  # rack -> U -> placement index
    for i, p in enumerate(site.placements):
        block = catalog.get(p.block)
        if block is None:
            close = difflib.get_close_matches(p.block, list(catalog), n=1)
            emit("unknown-block", ("placements", i, "block"),
                 f"unknown block type '{p.block}'",
                 f"did you mean '{close[0]}'?" if close
                 else "use a block from `provision catalog` or add it under catalog:")
            continue
        rack = racks.get(p.rack)
        if rack is None:
            emit("unknown-rack", ("placements", i, "rack"), f"unknown rack '{p.rack}'",
                 f"define it under racks: (known: {', '.join(sorted(racks)) or 'none'})")
            continue
        top = p.u + block.rack_units - 1
        if top > rack.height_u:
            emit("u-out-of-range", ("placements", i, "u"),
                 f"{block.name} ({block.rack_units} U) at U{p.u} reaches U{top}, "
                 f"above the top of rack {rack.name} (U{rack.height_u})",
                 f"place it at U{rack.height_u - block.rack_units + 1} or lower")
        slots = occupied.setdefault(rack.name, {})
        for u in range(p.u, min(top, rack.height_u) + 1):
            other = slots.get(u)
            if other is not None:
                o = site.placements[other]
                emit("u-overlap", ("placements", i, "u"),
                     f"{block.name} at U{p.u}-U{top} overlaps {o.block} at U{o.u} "
                     f"(placements[{other}], {o.nodes[0].hostname}) in rack {rack.name} at U{u}",
                     "move one of them to free rack units")
                break
            slots[u] = i
        if len(p.nodes) > block.nodes_per_chassis:
            emit("too-many-nodes", ("placements", i, "nodes"),
                 f"{block.name} holds {block.nodes_per_chassis} node(s); {len(p.nodes)} are listed",
                 "split the nodes across more chassis")
        for j, node in enumerate(p.nodes):
            roles = node_roles(node, block.kind)
            if block.kind is BlockKind.SWITCH:
                if node.bmc is not None:
                    emit("switch-bmc", ("placements", i, "nodes", j, "bmc"),
                         "switches are managed over SSH, not through a BMC",
                         "use management: {os: ..., credentials: ...}")
            elif node.bmc is None:
                emit("no-bmc", ("placements", i, "nodes", j), f"{node.hostname} has no bmc",
                     "add a bmc: endpoint so the node can be brought up without hands",
                     severity=Severity.WARNING)
            if (node.boot == "virtual_media" and not site.provisioning.iso_url
                    and block.kind is not BlockKind.SWITCH):
                emit("no-iso-url", ("placements", i, "nodes", j, "boot"),
                     f"{node.hostname} boots from virtual media but no installer ISO is set",
                     "set provisioning: {iso_url: http://mirror/ubuntu.iso}")
            if node.boot == "virtual_media" and node.bmc is not None \
                    and node.bmc.protocol.value == "ipmi":
                emit("ipmi-virtual-media", ("placements", i, "nodes", j, "boot"),
                     f"{node.hostname}: IPMI has no standard virtual media",
                     "use boot: pxe, or a Redfish BMC")
            if Role.SWITCH in roles and block.kind is not BlockKind.SWITCH:
                emit("bad-role", ("placements", i, "nodes", j, "roles"),
                     f"{node.hostname} is a {block.kind.value}, not a switch")


# ---------------------------------------------------------------- uniqueness


def _uniqueness(loaded: LoadedSite, emit: Emit) -> None:
    hosts: dict[str, KeyPath] = {}
    ips: dict[IPv4Address, KeyPath] = {}
    macs: dict[str, KeyPath] = {}
    bmcs: dict[tuple[str, int, str], KeyPath] = {}

    def dup(kind: str, value: object, path: KeyPath, first: KeyPath, hint: str) -> None:
        where = loaded.sources.locate(first)
        emit(f"duplicate-{kind}", path,
             f"duplicate {kind} {value}: also at {where.file}:{where.line} ({where.key_path})",
             hint)

    for i, p in enumerate(loaded.site.placements):
        for j, node in enumerate(p.nodes):
            base: KeyPath = ("placements", i, "nodes", j)
            hp = (*base, "hostname")
            if node.hostname in hosts:
                dup("hostname", node.hostname, hp, hosts[node.hostname],
                    "host names must be unique")
            else:
                hosts[node.hostname] = hp
            for net, addr in node.addresses.items():
                ap = (*base, "addresses", net)
                if addr in ips:
                    dup("ip", addr, ap, ips[addr], "every address must be unique in the site")
                else:
                    ips[addr] = ap
            for net, mac in node.macs.items():
                mp = (*base, "macs", net)
                if mac in macs:
                    dup("mac", mac, mp, macs[mac], "check the MAC (copy errors are common)")
                else:
                    macs[mac] = mp
            if node.bmc is not None:
                bp = (*base, "bmc", "address")
                key = node.bmc.endpoint_key()
                if key in bmcs:
                    dup("bmc", ":".join(map(str, key)).rstrip(":"), bp, bmcs[key],
                        "every node needs its own BMC endpoint (address, port, system_id)")
                else:
                    bmcs[key] = bp
                bmc_ip = ip_or_none(node.bmc.address)
                if bmc_ip is None:
                    continue
                if isinstance(bmc_ip, IPv4Address):
                    if bmc_ip in ips and ips[bmc_ip][-2:] != ("bmc", "address"):
                        dup("ip", bmc_ip, bp, ips[bmc_ip], "a BMC needs its own address")
                    ips.setdefault(bmc_ip, bp)


# ---------------------------------------------------------------- networks


def _networks(loaded: LoadedSite, emit: Emit) -> None:
    site = loaded.site
    nets: dict[str, tuple[int, Network]] = {}
    for i, n in enumerate(site.networks):
        if n.name in nets:
            emit("duplicate-network", ("networks", i, "name"),
                 f"network '{n.name}' is defined twice")
            continue
        for _, other in nets.values():
            if n.cidr.overlaps(other.cidr):
                emit("network-overlap", ("networks", i, "cidr"),
                     f"{n.name} {n.cidr} overlaps {other.name} {other.cidr}",
                     "give every network its own range")
        if n.gateway is not None and n.gateway not in n.cidr:
            emit("address-outside-cidr", ("networks", i, "gateway"),
                 f"gateway {n.gateway} is outside {n.name} {n.cidr}")
        nets[n.name] = (i, n)
    oob = [n for _, n in nets.values() if n.kind is NetworkKind.OOB]
    for i, p in enumerate(site.placements):
        for j, node in enumerate(p.nodes):
            for net_name, addr in node.addresses.items():
                path: KeyPath = ("placements", i, "nodes", j, "addresses", net_name)
                entry = nets.get(net_name)
                if entry is None:
                    emit("unknown-network", path, f"unknown network '{net_name}'",
                         f"define it under networks: (known: {', '.join(sorted(nets)) or 'none'})",
                         at_key=True)
                elif addr not in entry[1].cidr:
                    emit("address-outside-cidr", path,
                         f"{node.hostname}: {addr} is outside network {net_name} {entry[1].cidr}",
                         "fix the address or the network's cidr")
                elif addr in (entry[1].cidr.network_address, entry[1].cidr.broadcast_address):
                    emit("address-outside-cidr", path,
                         f"{node.hostname}: {addr} is the network or broadcast address of "
                         f"{entry[1].cidr}", "use a host address")
                elif (addr == entry[1].gateway and entry[1].switch_gateway
                      and node.management is None):  # the leaf's SVI holds it
                    emit("duplicate-ip", path,
                         f"{node.hostname}: {addr} is network {net_name}'s gateway",
                         "give the node another address, or the network its router's")
            for net_name in node.macs:
                if net_name not in nets:
                    emit("unknown-network", ("placements", i, "nodes", j, "macs", net_name),
                         f"MAC given for unknown network '{net_name}'", at_key=True)
            if node.bmc is not None and oob:
                bip = ip_or_none(node.bmc.address)
                # a BMC on loopback is reached through a local forward (an SSH tunnel to
                # the out-of-band network, the lab's emulators): where the forward lands
                # is not the inventory's to say
                if bip is None or bip.is_loopback:
                    continue
                if not any(bip in n.cidr for n in oob):
                    emit("address-outside-cidr", ("placements", i, "nodes", j, "bmc", "address"),
                         f"{node.hostname}: BMC {bip} is outside the out-of-band network(s) "
                         f"{', '.join(str(n.cidr) for n in oob)}",
                         "BMCs belong on the separate out-of-band network")


# ---------------------------------------------------------------- secrets


def _credentials(loaded: LoadedSite, emit: Emit) -> None:
    creds = loaded.site.credentials
    for i, p in enumerate(loaded.site.placements):
        for j, node in enumerate(p.nodes):
            refs: list[tuple[str, str]] = []
            if node.bmc is not None:
                refs.append(("bmc", node.bmc.credentials))
            if node.management is not None:
                refs.append(("management", node.management.credentials))
            for where, ref in refs:
                if ref not in creds:
                    emit("unknown-credentials",
                         ("placements", i, "nodes", j, where, "credentials"),
                         f"credentials '{ref}' are not defined",
                         f"add '{ref}:' under credentials: with username and "
                         "password: {env: VAR}")
    for name, c in creds.items():
        if c.password.file and not c.password.file.startswith("/"):
            emit("relative-secret-file", ("credentials", name, "password", "file"),
                 "secret file paths should be absolute", "write the full path",
                 severity=Severity.WARNING)


# ---------------------------------------------------------------- budgets


def _budgets(loaded: LoadedSite, emit: Emit, basis: power.Basis) -> None:
    report = power.budget(loaded.site, loaded.catalog, basis)
    index = {r.name: i for i, r in enumerate(loaded.site.racks)}
    weak_psus = _psu_not_n_plus_n(loaded)
    for rb in report.racks:
        i = index[rb.name]
        rack = loaded.site.racks[i]
        for f in rb.failures:
            if f.check == "power":
                fi = next(k for k, fd in enumerate(rack.feeds) if f"feed {fd.name}" == f.subject)
                path: KeyPath = ("racks", i, "feeds", fi)
                hint = "move load to another rack or provision a larger feed"
            elif f.check in ("cooling", "airflow"):
                path = ("racks", i, "cooling_kw")
                hint = "spread the load over more racks or add cooling"
            else:
                path = ("racks", i, "height_u")
                hint = "move equipment to another rack"
            emit(f"{f.check}-over-budget", path, f.message, hint, category=Category.BUDGET)
        if rack.redundancy == "2N":
            for pi, block in weak_psus.get(rack.name, ()):
                psu = block.psu
                assert psu is not None
                emit("psu-not-n-plus-n", ("placements", pi, "block"),
                     f"{block.name} PSUs are {psu.redundancy}: with feed A or B lost it runs on "
                     f"{psu.count // 2} of {psu.count} PSUs and needs {psu.needed} for full "
                     "power", "expect reduced performance on a feed loss, or wire PSUs for it",
                     severity=Severity.WARNING, category=Category.BUDGET)
    circuit_checks.check(loaded, emit, report)


def _psu_not_n_plus_n(loaded: LoadedSite) -> dict[str, list[tuple[int, BlockType]]]:
    """Per rack, the first placement of each block type whose PSUs are not N+N: on a 2N rack
    such a chassis loses capacity when one feed fails. One pass over the placements."""
    found: dict[str, list[tuple[int, BlockType]]] = {}
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(loaded.site.placements):
        block = loaded.catalog.get(p.block)
        if block is None or block.psu is None or (p.rack, block.name) in seen:
            continue
        if block.psu.count >= 2 and block.psu.count // 2 < block.psu.needed:
            seen.add((p.rack, block.name))
            found.setdefault(p.rack, []).append((i, block))
    return found
