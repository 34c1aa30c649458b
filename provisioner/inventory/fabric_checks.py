"""Fabric checks: every RoCE NIC cabled once, no switch port used twice, ports within the
switch's count and breakout, MTU fits end to end, leaf uplink oversubscription reported.

No I/O; findings carry key paths that the loader's SourceMap turns into file:line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from provisioner.inventory.cabling import (
    Endpoint,
    ResolvedLink,
    endpoints,
    is_roce_switch,
    is_switch,
    parse_port,
    rack_leaves,
    resolve,
    roce_nics,
)
from provisioner.inventory.fabric_models import Uplink
from provisioner.inventory.findings import Severity
from provisioner.inventory.loader import KeyPath, LoadedSite
from provisioner.roce import SONIC_LOSSLESS_DEFAULT

Emit = Callable[..., None]

# What each switch OS renderer (provisioner/fabric/) can set of software.roce; the renderers
# refuse (fabric.base.require_expressible) and validate refuses (_expressible) by this one
# table. NVUE's `nv set qos roce` (Cumulus Linux 5.14, "RDMA over Converged Ethernet - RoCE")
# and Onyx's `roce lossless` (Onyx 3.10.4100, "RoCE Commands") program NVIDIA's classes,
# DSCP 26 on priority 3 and CNP DSCP 48 on priority 6, whatever else is set. SONiC and EOS
# render the DSCP map and PFC as given; IOS renders no RoCE QoS (`fabric check` says so).
NVIDIA_ROCE_CLASSES = (26, 3, 48, 6)  # RoCE DSCP, RoCE priority, CNP DSCP, CNP priority
FIXED_CLASS_RENDERERS = {"cumulus": "NVUE", "onyx": "Onyx"}


def cannot_express(nos: str, classes: tuple[int, int, int, int]) -> str | None:
    """Why the renderer of switch OS `nos` cannot set these RoCE classes (RoCE DSCP and
    priority, CNP DSCP and priority); None when it can."""
    renderer = FIXED_CLASS_RENDERERS.get(nos)
    if renderer is None or classes == NVIDIA_ROCE_CLASSES:
        return None
    return (f"the {renderer} renderer sets NVIDIA's default RoCE classes only (DSCP 26 -> "
            "priority 3, CNP DSCP 48 -> priority 6)")


def check(loaded: LoadedSite, emit: Emit) -> None:
    site = loaded.site
    eps = endpoints(site, loaded.catalog)
    _sonic_lossless(loaded, eps, emit)
    if not (site.cabling.links or site.cabling.rules):
        _not_cabled(loaded, eps, emit)
        _expressible(loaded, eps, [], emit)  # uplinks alone are rendered too
        _ports(eps, [], site.cabling.uplinks, emit)
        return
    _eos_queue(eps, emit)
    links = list(resolve(site, loaded.catalog))
    _rules_have_leaves(loaded, eps, emit)
    _cabled_once(loaded, eps, links, emit)
    _expressible(loaded, eps, links, emit)
    _ports(eps, links, site.cabling.uplinks, emit)
    _mtu(links, emit)
    _switch_gateways(loaded, eps, links, emit)
    _oversubscription(loaded, eps, links, emit)


def _sonic_lossless(loaded: LoadedSite, eps: dict[str, Endpoint], emit: Emit) -> None:
    """SONiC gives priorities 3 and 4 lossless buffers (PFC headroom) by itself, in both of
    its buffer models (NVIDIA SONiC 202012, "QoS and Buffers", BUFFER_PG table); a lossless
    RoCE priority outside them would get PFC with no headroom, and drop under incast."""

    roce = loaded.site.software.roce
    if roce.mode != "lossless" or roce.priority in SONIC_LOSSLESS_DEFAULT:
        return
    sonic = sorted(name for name, ep in eps.items() if is_switch(ep) and ep.node.management
                   and ep.node.management.os == "sonic")
    if sonic:
        emit("sonic-lossless-priority", ("software", "roce", "priority"),
             f"lossless RoCE on priority {roce.priority}: SONiC ({', '.join(sonic[:3])}) "
             "gives lossless buffers to priorities 3 and 4 only",
             "use priority 3 or 4 (a DSCP from 24 to 39), or give the SONiC switches a "
             "lossless buffer profile for this priority yourself", at_key=True)


def _eos_queue(eps: dict[str, Endpoint], emit: Emit) -> None:
    """The EOS renderer sets ECN under `tx-queue N`, a command of Jericho-based switches
    only; on a Trident or Tomahawk one EOS refuses it and the push's session aborts, so an
    EOS switch says which it is (models.SwitchAccess.eos_queue)."""
    for ep in eps.values():
        mgmt = ep.node.management
        if mgmt is None or not is_roce_switch(ep):
            continue  # no RoCE config is rendered for it
        where = (*ep.path[:-1], "management")
        if mgmt.os == "eos" and mgmt.eos_queue is None:
            emit("eos-queue-unset", (*where, "os"),
                 f"{ep.node.hostname}: EOS switch without management.eos_queue; ECN is "
                 "rendered under `tx-queue` (7280R/7500R/7800R)",
                 "set eos_queue: uc-tx-queue on a 7050X/7060X/7260X/7388X, or tx-queue to "
                 "confirm", severity=Severity.WARNING)
        elif mgmt.os != "eos" and mgmt.eos_queue is not None:
            emit("eos-queue-not-eos", (*where, "eos_queue"),
                 f"{ep.node.hostname}: eos_queue is for EOS switches; this one runs {mgmt.os}",
                 "remove eos_queue", severity=Severity.WARNING)


def _expressible(loaded: LoadedSite, eps: dict[str, Endpoint], links: list[ResolvedLink],
                 emit: Emit) -> None:
    """The switches a config is rendered for (cabled ports or uplinks, and management)
    whose OS renderer cannot set the site's RoCE classes: every fabric command, and `up`'s
    fabric step, would stop at them."""
    roce = loaded.site.software.roce
    classes = (roce.dscp, roce.priority, roce.cnp_dscp, roce.cnp_priority)
    cabled = {link.switch for link in links} | {u.switch for u in loaded.site.cabling.uplinks}
    by_nos: dict[str, list[str]] = {}
    for name, ep in eps.items():
        if name in cabled and is_switch(ep) and ep.node.management is not None:
            by_nos.setdefault(ep.node.management.os, []).append(name)
    changed = next((key for key, value, default in zip(
        ("dscp", "priority", "cnp_dscp", "cnp_priority"), classes, NVIDIA_ROCE_CLASSES,
        strict=True) if value != default), "dscp")
    for nos, names in by_nos.items():
        why = cannot_express(nos, classes)
        if why is not None:
            emit("roce-classes-not-expressible", ("software", "roce", changed),
                 f"software.roce DSCP {roce.dscp} -> priority {roce.priority}, CNP DSCP "
                 f"{roce.cnp_dscp} -> priority {roce.cnp_priority}: {why} "
                 f"({', '.join(names[:3])} run {nos})",
                 "use the default software.roce classes (dscp 26, priority 3, cnp_dscp 48, "
                 f"cnp_priority 6) on a site with {nos} switches")


def _not_cabled(loaded: LoadedSite, eps: dict[str, Endpoint], emit: Emit) -> None:
    """A site without `cabling:` (written before it existed) is valid: one warning only."""
    roce = [ep for ep in eps.values() if not is_switch(ep) and roce_nics(loaded.site, ep.node)]
    if roce:
        emit("fabric-not-cabled", roce[0].path,
             f"{len(roce)} node(s) have RoCE ports but the site has no cabling: switch "
             "configs are not rendered, checked or pushed",
             "add cabling: rules (rack_leaf) or links; see docs/fabric.md",
             severity=Severity.WARNING)


def _rules_have_leaves(loaded: LoadedSite, eps: dict[str, Endpoint], emit: Emit) -> None:
    if not loaded.site.cabling.rules:
        return
    racks = {ep.rack for ep in eps.values() if roce_nics(loaded.site, ep.node)}
    leaves = rack_leaves(eps)
    for rack in sorted(racks):
        if rack not in leaves:
            emit("no-rack-leaf", ("cabling", "rules", 0),
                 f"rule rack_leaf: rack {rack} has RoCE nodes but no RoCE switch",
                 "place a switch block with switch_role: roce and management in that rack")


def _cabled_once(loaded: LoadedSite, eps: dict[str, Endpoint], links: list[ResolvedLink],
                 emit: Emit) -> None:
    seen: dict[tuple[str, str], ResolvedLink] = {}
    for link in links:
        ep, sw = eps.get(link.node), eps.get(link.switch)
        if ep is None or is_switch(ep):
            emit("cabling-unknown-node", (*link.path, "node"),
                 f"cabling names '{link.node}', which is not a server in the placements")
            continue
        if sw is None or not is_switch(sw):
            emit("cabling-unknown-switch", (*link.path, "switch"),
                 f"cabling names switch '{link.switch}', which is not a switch with management")
            continue
        if link.nic not in roce_nics(loaded.site, ep.node):
            emit("cabling-unknown-nic", (*link.path, "nic"),
                 f"{link.node} has no RoCE port '{link.nic}'",
                 f"RoCE ports of {link.node}: {', '.join(roce_nics(loaded.site, ep.node)) or '-'}")
        key = (link.node, link.nic)
        if key in seen:
            emit("nic-cabled-twice", link.path,
                 f"{link.node} {link.nic} is cabled twice ({seen[key].switch} "
                 f"{seen[key].switch_port} and {link.switch} {link.switch_port})")
        seen.setdefault(key, link)
    for name, ep in eps.items():
        if is_switch(ep):
            continue
        for nic in roce_nics(loaded.site, ep.node):
            if (name, nic) not in seen:
                emit("roce-nic-uncabled", ep.path,
                     f"RoCE port {nic} of {name} is not cabled to any switch",
                     "add a cabling link or a rack_leaf rule for this nic")


def _ports(eps: dict[str, Endpoint], links: list[ResolvedLink], uplinks: Sequence[Uplink],
           emit: Emit) -> None:
    """Every switch port a host link or an uplink takes: a real port of that switch, a
    sub-port only where its catalog block breaks ports out, and each port used once (whole,
    or broken out, never both). An uplink is a port like any other."""
    used: dict[tuple[str, str], str] = {}
    whole: dict[tuple[str, int], str] = {}
    subs: dict[tuple[str, int], str] = {}

    def take(switch: str, port_name: str, user: str, where: KeyPath) -> float | None:
        """The port's speed, or None when it was refused (said)."""
        sw = eps.get(switch)
        if sw is None or sw.node.management is None:
            return None
        key = (switch, port_name)
        if key in used:
            emit("switch-port-reused", where,
                 f"{switch} port {port_name} is used twice ({used[key]} and {user})")
            return None
        used[key] = user
        nos = sw.node.management.os
        port = parse_port(nos, port_name)
        if port is None:
            emit("switch-port-name", where, f"'{port_name}' is not a port name on {nos} ({switch})")
            return None
        nic = sw.block.nics[0] if sw.block.nics else None
        if nic is None:
            return None
        if nos != "sonic" and not 1 <= port.number <= nic.ports:
            emit("switch-port-range", where,
                 f"{switch} ({sw.block.name}) has ports 1-{nic.ports}; "
                 f"{port_name} is port {port.number}")
            return None
        speed = nic.speed_gbps
        if port.sub is not None:
            if not nic.breakout:
                emit("switch-breakout", where,
                     f"{port_name} is a breakout sub-port, but {sw.block.name} ports do not "
                     "break out (no breakout in its catalog block)",
                     f"use the whole port, or give {sw.block.name} its breakout: [2, 4] in "
                     "the catalog")
                return None
            ways = max(nic.breakout)
            if port.sub >= ways:
                emit("switch-breakout", where,
                     f"{port_name}: {sw.block.name} ports split into at most {ways} "
                     f"(catalog breakout {list(nic.breakout)})")
                return None
            speed = nic.speed_gbps / ways
            subs.setdefault((switch, port.number), user)
        else:
            whole.setdefault((switch, port.number), user)
        if (switch, port.number) in whole and (switch, port.number) in subs:
            emit("switch-port-reused", where,
                 f"{switch} port {port.number} is used whole "
                 f"({whole[(switch, port.number)]}) and broken out "
                 f"({subs[(switch, port.number)]})")
        return speed

    for link in links:
        user = f"{link.node} {link.nic}"
        speed = take(link.switch, link.switch_port, user, (*link.path, "switch_port"))
        if speed is not None and link.host_speed_gbps and link.host_speed_gbps > speed:
            emit("link-speed", (*link.path, "switch_port"),
                 f"{user} is {link.host_speed_gbps:g} Gb/s but {link.switch} "
                 f"{link.switch_port} gives {speed:g} Gb/s", severity=Severity.WARNING)
    for i, uplink in enumerate(uplinks):
        take(uplink.switch, uplink.switch_port, "an uplink",
             ("cabling", "uplinks", i, "switch_port"))


def _mtu(links: list[ResolvedLink], emit: Emit) -> None:
    for link in links:
        if link.host_mtu_bytes > link.switch_mtu_bytes:
            emit("mtu-mismatch", link.path,
                 f"{link.node} {link.nic} MTU {link.host_mtu_bytes} is larger than "
                 f"{link.switch} {link.switch_port} MTU {link.switch_mtu_bytes}: "
                 "jumbo RoCE frames would be dropped",
                 "raise switch_mtu_bytes (9216 on Spectrum) or lower the network mtu")


# The switch OSes whose renderers (provisioner/fabric/) put a network's VLAN on its host
# ports and its gateway on an SVI; the IOS-style dialect renders port descriptions only.
SVI_RENDERERS = frozenset({"cumulus", "onyx", "sonic", "eos"})


def _switch_gateways(loaded: LoadedSite, eps: dict[str, Endpoint],
                     links: list[ResolvedLink], emit: Emit) -> None:
    """A network its leaf routes (an L3 rail): a gateway and a VLAN for the SVI, the hosts'
    ports on one switch (one gateway address on several leaves is an anycast gateway,
    VRR or EVPN, which is not rendered), and a switch OS whose renderer writes an SVI."""
    for i, n in enumerate(loaded.site.networks):
        if not n.switch_gateway:
            continue
        where = ("networks", i, "switch_gateway")
        if n.gateway is None or n.vlan is None:
            missing = "gateway" if n.gateway is None else "vlan"
            emit("switch-gateway-incomplete", where,
                 f"network {n.name} is routed by its switch but has no {missing}",
                 "give gateway: <the leaf's address on it> and vlan: <id>, "
                 "or drop switch_gateway")
            continue
        switches = sorted({link.switch for link in links if link.nic == n.name})
        if len(switches) > 1:
            emit("switch-gateway-on-several-switches", where,
                 f"network {n.name}'s hosts are cabled to {', '.join(switches)}: one "
                 "gateway on several switches needs an anycast gateway (VRR, EVPN), "
                 "which is not rendered", "give each leaf its own network (a rail per "
                 "leaf), or drop switch_gateway and route it elsewhere")
        for name in switches:
            ep = eps.get(name)
            nos = ep.node.management.os if ep is not None and ep.node.management else None
            if nos is not None and nos not in SVI_RENDERERS:
                emit("switch-gateway-unsupported", where,
                     f"{name} runs {nos}, whose rendering carries port descriptions only: "
                     f"no SVI would hold {n.name}'s gateway {n.gateway}",
                     f"use a switch OS with an SVI renderer ({', '.join(sorted(SVI_RENDERERS))})"
                     ", or drop switch_gateway")


def _oversubscription(loaded: LoadedSite, eps: dict[str, Endpoint],
                      links: list[ResolvedLink], emit: Emit) -> None:
    down_gbps: dict[str, float] = {}
    for link in links:
        down_gbps[link.switch] = down_gbps.get(link.switch, 0.0) + (link.host_speed_gbps or 0)
    up_gbps: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, uplink in enumerate(loaded.site.cabling.uplinks):
        sw = eps.get(uplink.switch)
        speed = 0.0
        if sw and sw.block.nics and sw.node.management:
            nic = sw.block.nics[0]
            port = parse_port(sw.node.management.os, uplink.switch_port)
            ways = max(nic.breakout, default=1) if port and port.sub is not None else 1
            speed = nic.speed_gbps / ways
        up_gbps[uplink.switch] = up_gbps.get(uplink.switch, 0.0) + speed
        first.setdefault(uplink.switch, i)
    for switch, up in up_gbps.items():
        ratio = down_gbps.get(switch, 0.0) / up if up else 0.0
        if ratio > 1.0:
            emit("leaf-oversubscribed", ("cabling", "uplinks", first[switch]),
                 f"{switch}: {down_gbps[switch]:g} Gb/s down, {up:g} Gb/s up = "
                 f"{ratio:.2f}:1 oversubscribed (RoCE training fabrics are built 1:1)",
                 severity=Severity.WARNING)
