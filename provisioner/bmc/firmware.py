"""Firmware components as a BMC reports them: pure mapping, no I/O.

Redfish: the UpdateService's FirmwareInventory, one SoftwareInventory resource per
component (Id, Name, Version, Updateable; DMTF DSP0268, "SoftwareInventory"). Where a BMC
serves no inventory (sushy-tools links one it does not serve; older BMCs have no
UpdateService), the versions the ComputerSystem (BiosVersion) and each Manager
(FirmwareVersion) carry. IPMI: the BMC's own firmware revision from Get Device ID (IPMI
v2.0, 20.1: byte 3 bits 6:0 the major revision, byte 4 the minor revision in BCD).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from provisioner.bmc.base import FirmwareFact

JSON = dict[str, Any]


def from_redfish(inventory: Iterable[JSON], system: JSON,
                 managers: Iterable[JSON] = ()) -> tuple[FirmwareFact, ...]:
    """Every inventoried component with a version; else the system's BIOS and each
    manager's firmware."""
    found = tuple(
        FirmwareFact(str(item.get("Id") or item.get("Name")), str(item.get("Name") or
                                                                 item.get("Id")),
                     str(item["Version"]), _bool(item.get("Updateable")),
                     "FirmwareInventory")
        for item in inventory if item.get("Version") and (item.get("Id") or item.get("Name")))
    if found:
        return found
    out = []
    if system.get("BiosVersion"):
        out.append(FirmwareFact("BIOS", "BIOS", str(system["BiosVersion"]), None,
                                "System.BiosVersion"))
    versioned = [m for m in managers if m.get("FirmwareVersion")]
    for m in versioned:  # "BMC", or "BMC <manager id>" where the system has several
        ident = "BMC" if len(versioned) == 1 else f"BMC {m.get('Id') or versioned.index(m)}"
        out.append(FirmwareFact(ident, str(m.get("Name") or "BMC"), str(m["FirmwareVersion"]),
                                None, "Manager.FirmwareVersion"))
    return tuple(out)


def versions(facts: Iterable[FirmwareFact]) -> dict[str, str]:
    """Component -> version: what the state store records of a read."""
    return {f.id: f.version for f in facts}


def from_device_id(data: Sequence[int]) -> FirmwareFact | None:
    """The BMC's firmware revision from Get Device ID's response data (completion code
    stripped, as pyghmi's raw_command gives it), as major.minor ("9.08")."""
    if len(data) < 4:
        return None
    major, minor = data[2] & 0x7F, data[3]
    return FirmwareFact("BMC", "BMC", f"{major}.{minor >> 4}{minor & 0x0F}", None,
                        "IPMI Get Device ID")


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None
