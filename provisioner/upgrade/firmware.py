"""Firmware moves of an upgrade plan: each selected node's pinned components (the bundle's
`firmware`, per block) against the versions its BMC reported at its last inspection
(recorded in the state store). Pure: no I/O.

Order within a node: BMC first, then BIOS, then the rest, as vendors sequence their
bundles (a new BIOS may need the newer BMC that flashes it). A downgrade is refused unless
its pin says `downgrade: true`; a node whose versions were never recorded is planned from
"unknown" and said so. Versions are those of the node's last read: `up`'s inspection, or
`bmc inventory` (after a firmware update done by other means).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from provisioner.inventory.bundle_models import Bundle
from provisioner.inventory.topology import HostPlan
from provisioner.lifecycle import Phase
from provisioner.state import Event
from provisioner.upgrade.plan import FirmwareMove, Refusal

FIRST = ("BMC", "BIOS")  # the rest after these, by name
SEEN = "firmware_seen"  # the event `bmc inventory` records for an enrolled node


def recorded(events: Iterable[Event], hosts: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each node's firmware versions from the last read that recorded any: `up`'s inspection
    or `bmc inventory` (an event of kind SEEN)."""
    out: dict[str, dict[str, str]] = {}
    wanted = set(hosts)
    for ev in events:
        read = ev.kind == SEEN or (ev.kind == "transition"
                                   and ev.to_phase == Phase.INSPECTED.value)
        if (read and ev.hostname in wanted
                and isinstance(ev.detail.get("firmware"), dict) and ev.detail["firmware"]):
            out[ev.hostname] = {str(k): str(v) for k, v in ev.detail["firmware"].items()}
    return out


def _order(component: str) -> tuple[int, str]:
    return (FIRST.index(component) if component in FIRST else len(FIRST), component)


_DOTTED = re.compile(r"^v?\d+(\.\d+)*$")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def same(old: str | None, new: str) -> bool:
    """One version written two ways: equal, or dotted numbers equal number by number (IPMI's
    BCD minor "9.08" and a pin's "9.8")."""
    return old == new or (old is not None and bool(_DOTTED.match(old)) and
                          bool(_DOTTED.match(new)) and _numbers(old) == _numbers(new))


def way(old: str | None, new: str) -> str:
    """upgrade or downgrade where both versions' numbers order them, else change (a version
    never recorded, or one with the same numbers and other letters)."""
    a, b = _numbers(old or ""), _numbers(new)
    if old is None or not a or not b or a == b or old[:1].isdigit() != new[:1].isdigit():
        return "change"
    return "upgrade" if b > a else "downgrade"


def moves(hosts: Sequence[HostPlan], bundle: Bundle, blocks: Iterable[str],
          versions: Mapping[str, Mapping[str, str]]
          ) -> tuple[list[FirmwareMove], list[Refusal], list[str]]:
    """The moves, the refusals (a downgrade not allowed) and the warnings (a block the site
    has not, nodes or components planned without a recorded version)."""
    known = set(blocks)
    refusals: list[Refusal] = []
    out: list[FirmwareMove] = []
    unknown: list[str] = []
    unreported: list[str] = []
    for hp in hosts:
        pins = bundle.firmware.get(hp.placement.block, {})
        have = versions.get(hp.hostname)
        if pins and have is None:
            unknown.append(hp.hostname)
        for comp in sorted(pins, key=_order):
            pin = pins[comp]
            old = (have or {}).get(comp)
            if same(old, pin.version):
                continue
            if have is not None and old is None:
                unreported.append(f"{hp.hostname} {comp}")
            move = way(old, pin.version)
            if move == "downgrade" and not pin.downgrade:
                refusals.append(Refusal(
                    "firmware-downgrade", f"{hp.hostname}: {comp} firmware would go back "
                    f"from {old} to {pin.version}",
                    f"set downgrade: true under firmware.{hp.placement.block}.{comp} if that is "
                    "meant (vendors forbid some downgrades outright)"))
            out.append(FirmwareMove(hp.hostname, comp, old, pin.version, pin.reset, move))
    warnings = [f"the bundle pins firmware for block {name!r}, which the site has no node "
                "of: nothing of it is planned" for name in sorted(bundle.firmware)
                if name not in known]
    warnings += ([f"{', '.join(unknown)}: no firmware versions recorded (neither `up`'s "
                 "inspection nor `bmc inventory` has read them): planned from unknown"]
                if unknown else [])
    warnings += ([f"{', '.join(unreported)}: the BMC reports no such component (pin it as "
                  "`bmc inventory` names it): planned from unknown"] if unreported else [])
    return out, refusals, warnings
