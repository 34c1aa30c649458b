"""Firmware moves of an upgrade plan: each selected node's pinned components (the bundle's
`firmware`, per block) against the versions its BMC reported at its last inspection
(recorded in the state store). Pure: no I/O.

Order within a node: BMC first, then BIOS, then the rest, as vendors sequence their
bundles (a new BIOS may need the newer BMC that flashes it). A downgrade is refused unless
its pin says `downgrade: true`; a node whose versions were never recorded is planned from
"unknown" and said so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from provisioner.inventory.bundle_models import Bundle
from provisioner.inventory.topology import HostPlan
from provisioner.lifecycle import Phase
from provisioner.state import Event
from provisioner.upgrade.plan import FirmwareMove, Refusal, direction

FIRST = ("BMC", "BIOS")  # the rest after these, by name


def recorded(events: Iterable[Event], hosts: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each node's firmware versions from its last inspection that recorded any."""
    out: dict[str, dict[str, str]] = {}
    wanted = set(hosts)
    for ev in events:
        if (ev.kind == "transition" and ev.hostname in wanted
                and ev.to_phase == Phase.INSPECTED.value
                and isinstance(ev.detail.get("firmware"), dict) and ev.detail["firmware"]):
            out[ev.hostname] = {str(k): str(v) for k, v in ev.detail["firmware"].items()}
    return out


def _order(component: str) -> tuple[int, str]:
    return (FIRST.index(component) if component in FIRST else len(FIRST), component)


def moves(hosts: Sequence[HostPlan], bundle: Bundle, blocks: Iterable[str],
          versions: Mapping[str, Mapping[str, str]]
          ) -> tuple[list[FirmwareMove], list[Refusal], list[str]]:
    """The moves, the refusals (a block the site has not, a downgrade not allowed) and the
    warnings (nodes planned without recorded versions)."""
    known = set(blocks)
    refusals = [Refusal("firmware-unknown-block",
                        f"the bundle pins firmware for block {name!r}, which the site has "
                        "no node of", "name a block of the site's catalog, as placements do")
                for name in sorted(bundle.firmware) if name not in known]
    out: list[FirmwareMove] = []
    unknown: list[str] = []
    for hp in hosts:
        pins = bundle.firmware.get(hp.placement.block, {})
        have = versions.get(hp.hostname)
        if pins and have is None:
            unknown.append(hp.hostname)
        for comp in sorted(pins, key=_order):
            pin = pins[comp]
            old = (have or {}).get(comp)
            if old == pin.version:
                continue
            way = direction(old, pin.version)  # "change" from an unknown version
            if way == "downgrade" and not pin.downgrade:
                refusals.append(Refusal(
                    "firmware-downgrade", f"{hp.hostname}: {comp} firmware would go back "
                    f"from {old} to {pin.version}",
                    f"set downgrade: true under firmware.{hp.placement.block}.{comp} if that is "
                    "meant (vendors forbid some downgrades outright)"))
            out.append(FirmwareMove(hp.hostname, comp, old, pin.version, pin.reset, way))
    warnings = ([f"{', '.join(unknown)}: no firmware versions recorded (not inspected by "
                 "`up` since the tool read them): planned from unknown"] if unknown else [])
    return out, refusals, warnings
