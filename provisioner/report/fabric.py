"""The report's fabric section: each rack's switches, the ports the cabling uses on them
(node, NIC, MTU), uplinks, and the static host-vs-switch check (fabric.check), so a reviewer
sees the leaf per rack and any RoCE disagreement on the same page as the racks."""

from __future__ import annotations

from dataclasses import dataclass

from provisioner import fabric
from provisioner.errors import ProvisionerError
from provisioner.inventory.cabling import endpoints, is_switch, resolve
from provisioner.inventory.loader import LoadedSite


@dataclass(frozen=True)
class PortUse:
    port: str
    to: str  # "dgx01 roce" or "uplink"
    mtu_bytes: int


@dataclass(frozen=True)
class SwitchRow:
    name: str
    rack: str
    role: str  # roce, management, ...
    nos: str
    ports_total: int  # physical ports of the block (before breakout)
    used: tuple[PortUse, ...]


@dataclass(frozen=True)
class FabricView:
    switches: tuple[SwitchRow, ...]
    links_checked: int
    mismatches: tuple[str, ...]  # each names both ends
    check_error: str | None  # why the check could not run (e.g. no renderer for an OS)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.check_error is None


def build(loaded: LoadedSite) -> FabricView | None:
    """None when the site has no managed switch: nothing to draw."""
    site = loaded.site
    eps = endpoints(site, loaded.catalog)
    switches = {name: ep for name, ep in eps.items() if is_switch(ep)}
    if not switches:
        return None
    used: dict[str, list[PortUse]] = {}
    for link in resolve(site, loaded.catalog):
        used.setdefault(link.switch, []).append(
            PortUse(link.switch_port, f"{link.node} {link.nic}", link.switch_mtu_bytes))
    for up in site.cabling.uplinks:
        used.setdefault(up.switch, []).append(
            PortUse(up.switch_port, "uplink", site.cabling.switch_mtu_bytes))
    rows = tuple(
        SwitchRow(name, ep.rack, str(ep.block.switch_role or ""),
                  ep.node.management.os if ep.node.management else "",
                  sum(n.ports for n in ep.block.nics), tuple(used.get(name, ())))
        for name, ep in switches.items())
    try:
        report = fabric.check(loaded)
    except ProvisionerError as exc:
        return FabricView(rows, 0, (), str(exc))
    return FabricView(rows, report.links_checked,
                      tuple(m.format() for m in report.mismatches), None)
