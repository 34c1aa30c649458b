"""Vendor quirks as data: one table, keyed by vendor (and model/firmware where needed).

Drivers read `quirks_for(vendor, model, firmware)`; they never branch on a vendor name.
Every row names its evidence: the vendor's or the client project's issue or pull request
(DMTF/Redfishtool, community.general, bmc-toolbox/bmclib, lenovo/python-redfish-lenovo,
stmcginnis/gofish), or the emulator's own behaviour as observed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from provisioner.inventory.compat import version_tuple


@dataclass(frozen=True)
class Quirks:
    """What a driver must do differently. Defaults are plain DMTF Redfish behaviour."""

    # Send BootSourceOverrideMode in the boot PATCH when it differs from the BMC's. Others
    # reject the field outright.
    send_boot_mode: bool = True
    # Send it in every boot PATCH, even when it is already the one asked: some BMCs revert
    # without it. Not the default: iDRAC queues a BIOS job (an extra reboot) for each Mode
    # written, changed or not (ironcore-dev/metal-operator #81).
    boot_mode_every_patch: bool = False
    # The boot target for virtual media where the BMC allows it ("Cd" otherwise).
    cd_boot_target: str = "Cd"
    # How many times to PATCH the boot override when the read-back shows it did not take.
    boot_patch_attempts: int = 2
    # Whether the BMC reports BootSourceOverrideEnabled truthfully (Once vs Continuous).
    reports_override_enabled: bool = True
    # Extra retries for a power-on answered with 409 Conflict.
    power_on_conflict_retries: int = 0
    # HTTP statuses on a boot PATCH meaning "busy now, try later" (e.g. during POST).
    boot_patch_busy_statuses: frozenset[int] = frozenset({409})
    # System id to use when the Systems collection has several members.
    default_system_id: str | None = None
    # Mount virtual media by PATCHing the VirtualMedia resource instead of InsertMedia.
    virtual_media_via_patch: bool = False


@dataclass(frozen=True)
class QuirkRow:
    vendor: str  # regex, matched case-insensitively against Manufacturer / Vendor
    changes: dict[str, object]
    evidence: str
    model: str | None = None  # regex
    firmware_below: str | None = None  # applies when firmware < this version

    def matches(self, vendor: str, model: str, firmware: str) -> bool:
        if not re.search(self.vendor, vendor, re.IGNORECASE):
            return False
        if self.model and not re.search(self.model, model, re.IGNORECASE):
            return False
        if self.firmware_below:
            try:
                return version_tuple(_numeric(firmware)) < version_tuple(self.firmware_below)
            except ValueError:
                return False
        return True


def _numeric(firmware: str) -> str:
    m = re.search(r"\d+(\.\d+)*", firmware)
    if not m:
        raise ValueError(firmware)
    return m.group(0)


QUIRKS: tuple[QuirkRow, ...] = (
    QuirkRow(
        vendor=r"supermicro",
        changes={"boot_mode_every_patch": True, "boot_patch_attempts": 3,
                 "cd_boot_target": "UsbCd"},
        evidence="DMTF/Redfishtool PR #106 (Mode needed on every boot PATCH, else it reverts); "
                 "bmc-toolbox/bmclib PR #459 (AS-1015CS: PATCH Pxe/Once/UEFI answered 200, "
                 "then silently reverted to Legacy/Disabled: verify by re-GET); sushy "
                 "resources/system/system.py (X11/X12 boot virtual media only as UsbCd, 'Cd' "
                 "fails even with the media inserted)",
    ),
    QuirkRow(
        vendor=r"^hpe?$|hewlett",
        changes={"send_boot_mode": False, "boot_patch_busy_statuses": frozenset({400, 409})},
        evidence="community.general #3509 / PR #3581 (iLO: BootSourceOverrideMode not writable, "
                 "including it fails the PATCH); bmclib #459 (DL160 Gen10 rejects the full "
                 "field set); iLO refuses boot changes while the server is in POST",
    ),
    QuirkRow(
        vendor=r"dell",
        changes={"power_on_conflict_retries": 4, "default_system_id": "System.Embedded.1"},
        evidence="iDRAC answers 409 to a power-on while a job runs (retry); system id "
                 "System.Embedded.1",
    ),
    QuirkRow(
        vendor=r"lenovo",
        changes={"virtual_media_via_patch": True},
        evidence="lenovo/python-redfish-lenovo #9, #21; stmcginnis/gofish #529/PR #530 (XCC "
                 "mounts virtual media by PATCH on an EXT member; no InsertMedia action on some "
                 "firmware, e.g. SR630 V2 XCC 1.89)",
    ),
    QuirkRow(
        vendor=r"sushy emulator",
        changes={"reports_override_enabled": False},
        evidence="sushy-tools 2.2 emulator (fake driver), as observed: stores Target and "
                 "Mode but always reports BootSourceOverrideEnabled=Continuous",
    ),
)


def quirks_for(vendor: str | None, model: str | None = None,
               firmware: str | None = None) -> Quirks:
    """Defaults with every matching row applied in table order."""
    result = Quirks()
    valid = {f.name for f in fields(Quirks)}
    for row in QUIRKS:
        if row.matches(vendor or "", model or "", firmware or ""):
            unknown = set(row.changes) - valid
            if unknown:  # pragma: no cover - guarded by a unit test
                raise KeyError(f"quirk row names unknown fields {unknown}")
            result = replace(result, **row.changes)  # type: ignore[arg-type]
    return result
