"""Switch configuration for the RoCE fabric: one renderer per switch OS behind SwitchRenderer,
fed from the same RocePolicy the hosts get (provisioner/roce.py) and the resolved cabling."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from provisioner import roce
from provisioner.errors import RenderError
from provisioner.fabric.base import (
    Mismatch,
    PortSpec,
    Svi,
    SwitchQos,
    SwitchRenderer,
    SwitchSpec,
    compare,
    vlan_mismatches,
)
from provisioner.fabric.eos import EosRenderer
from provisioner.fabric.ios import IosRenderer
from provisioner.fabric.nvue import NvueRenderer
from provisioner.fabric.onyx import OnyxRenderer
from provisioner.fabric.sonic import SonicRenderer
from provisioner.inventory.cabling import (
    Endpoint,
    ResolvedLink,
    endpoints,
    is_switch,
    parse_port,
    resolve,
)
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import Network

__all__ = ["RENDERERS", "Mismatch", "PortSpec", "RenderedSwitch", "Svi", "SwitchQos",
           "SwitchRenderer", "SwitchSpec", "check", "compare", "link_vlan", "render_all",
           "switch_specs", "vlan_mismatches"]

RENDERERS: dict[str, SwitchRenderer] = {
    r.nos: r for r in (NvueRenderer(), OnyxRenderer(), SonicRenderer(), EosRenderer(),
                       IosRenderer())
}


@dataclass(frozen=True, slots=True)
class RenderedSwitch:
    spec: SwitchSpec
    renderer: SwitchRenderer
    text: str


def _breakout(ep: Endpoint | None, port: str) -> int | None:
    """The ways a sub-port's parent is split (swp1s0 of an SN5600's 2x400G 800G port: 2), read
    from the switch block's catalog as `validate` reads it (inventory/fabric_checks._ports:
    the largest of the block's `breakout`, the ways its sub-port speed is worked out by).
    None for a whole port, a switch without management, or a block that lists no breakout."""
    if ep is None or ep.node.management is None or not ep.block.nics:
        return None
    name = parse_port(ep.node.management.os, port)
    ways = ep.block.nics[0].breakout
    return max(ways) if name is not None and name.sub is not None and ways else None


def link_vlan(nets: Mapping[str, Network], link: ResolvedLink) -> tuple[int, bool] | None:
    """The VLAN of the network a link's `nic` names, and whether the hosts tag it."""
    net = nets.get(link.nic)
    if net is None or net.vlan is None:
        return None
    return net.vlan, net.host_tagged


def switch_specs(loaded: LoadedSite, nodes: Collection[str] | None = None) -> list[SwitchSpec]:
    """One spec per managed switch that has cabled ports, in placement order. With `nodes`,
    only the ports cabled to those nodes (no uplink): what adding them needs."""
    site = loaded.site
    eps = endpoints(site, loaded.catalog)
    nets = {n.name: n for n in site.networks}
    ports: dict[str, list[PortSpec]] = {}
    svis: dict[str, dict[str, Svi]] = {}
    for link in resolve(site, loaded.catalog):
        if nodes is not None and link.node not in nodes:
            continue
        net = nets.get(link.nic)
        if net is not None and net.switch_gateway and net.gateway and net.vlan:
            svis.setdefault(link.switch, {})[net.name] = Svi(
                net.name, net.vlan, f"{net.gateway}/{net.cidr.prefixlen}", net.mtu)
        vlan = link_vlan(nets, link)
        ports.setdefault(link.switch, []).append(
            PortSpec(link.switch_port, f"{link.node} {link.nic}", link.switch_mtu_bytes,
                     _breakout(eps.get(link.switch), link.switch_port),
                     vlan[0] if vlan else None, bool(vlan and vlan[1])))
    for up in site.cabling.uplinks if nodes is None else ():
        ports.setdefault(up.switch, []).append(
            PortSpec(up.switch_port, "uplink", site.cabling.switch_mtu_bytes,
                     _breakout(eps.get(up.switch), up.switch_port)))
    specs = []
    for name, ep in eps.items():
        if not is_switch(ep) or name not in ports or ep.node.management is None:
            continue
        nos = ep.node.management.os
        pol = roce.policy(site.software.roce, nos, mtu_bytes=site.cabling.switch_mtu_bytes)
        specs.append(SwitchSpec(name, nos, pol, tuple(ports[name]),
                                ep.node.management.eos_queue or "tx-queue",
                                tuple(svis.get(name, {}).values())))
    return specs


def render_all(loaded: LoadedSite,
               nodes: Collection[str] | None = None) -> list[RenderedSwitch]:
    out = []
    for spec in switch_specs(loaded, nodes):
        renderer = RENDERERS.get(spec.nos)
        if renderer is None:
            raise RenderError(f"{spec.hostname}: no switch renderer for '{spec.nos}'")
        out.append(RenderedSwitch(spec, renderer, renderer.render(spec)))
    return out


@dataclass(frozen=True, slots=True)
class FabricReport:
    links_checked: int
    mismatches: tuple[Mismatch, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches


def check(loaded: LoadedSite) -> FabricReport:
    """Host side (the policy roles/roce_host gets) vs each switch config parsed back."""
    host_policy = roce.policy(loaded.site.software.roce)
    parsed = {r.spec.hostname: r.renderer.parse(r.text) for r in render_all(loaded)}
    nets = {n.name: n for n in loaded.site.networks}
    found: list[Mismatch] = []
    count = 0
    for link in resolve(loaded.site, loaded.catalog):
        qos = parsed.get(link.switch)
        if qos is None:
            continue
        count += 1
        found += compare(link.node, link.nic, host_policy, link.host_mtu_bytes,
                         link.switch, link.switch_port, qos)
        found += vlan_mismatches(link.node, link.nic, link_vlan(nets, link), link.switch,
                                 link.switch_port, qos)
    return FabricReport(count, tuple(found))
