"""Firmware versions from what a BMC answers (bmc/firmware.py): Redfish's FirmwareInventory,
the system's and managers' versions where a BMC serves none, IPMI's Get Device ID."""

from __future__ import annotations

from provisioner.bmc.base import FirmwareFact
from provisioner.bmc.firmware import from_device_id, from_redfish

# Members as DMTF's public-rackmount1 mockup and OpenBMC serve them (SoftwareInventory)
INVENTORY = [
    {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BMC", "Id": "BMC",
     "Name": "Contoso BMC Firmware", "Version": "1.45.455b66-rev4", "Updateable": True},
    {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BIOS", "Id": "BIOS",
     "Name": "Contoso BIOS Firmware", "Version": "P79 v1.45 (12/06/2017)",
     "Updateable": True},
    {"Id": "CPLD", "Name": "CPLD", "Updateable": False},  # no version: nothing to compare
]


def test_the_firmware_inventory_is_read_whole_and_preferred() -> None:
    system = {"BiosVersion": "P79 v1.40", "Links": {}}
    got = from_redfish(INVENTORY, system, [{"Id": "1", "FirmwareVersion": "1.00"}])
    assert got == (
        FirmwareFact("BMC", "Contoso BMC Firmware", "1.45.455b66-rev4", True,
                     "FirmwareInventory"),
        FirmwareFact("BIOS", "Contoso BIOS Firmware", "P79 v1.45 (12/06/2017)", True,
                     "FirmwareInventory"))


def test_without_an_inventory_the_system_and_managers_tell_their_versions() -> None:
    assert from_redfish([], {"BiosVersion": "1.2.0"}, [{"Id": "BMC", "Name": "Manager",
                                                        "FirmwareVersion": "1.00"}]) == (
        FirmwareFact("BIOS", "BIOS", "1.2.0", None, "System.BiosVersion"),
        FirmwareFact("BMC", "Manager", "1.00", None, "Manager.FirmwareVersion"))
    two = from_redfish([], {"BiosVersion": None}, [
        {"Id": "bmc0", "FirmwareVersion": "2.1"}, {"Id": "hgx", "FirmwareVersion": "24.01"},
        {"Id": "none"}])
    assert [(f.id, f.version) for f in two] == [("BMC bmc0", "2.1"), ("BMC hgx", "24.01")]
    assert from_redfish([], {}, []) == ()


def test_get_device_id_gives_major_and_bcd_minor() -> None:
    # device id, revision, firmware 1 (bit 7: device available, masked), firmware 2 (BCD),
    # IPMI version 0x02 (2.0), support, manufacturer, product
    assert from_device_id([0x20, 0x81, 0x89, 0x08, 0x02, 0x9F, 0x91, 0x12, 0x00, 0x02, 0x0F]
                          ) == FirmwareFact("BMC", "BMC", "9.08", None, "IPMI Get Device ID")
    assert from_device_id([0, 0, 3, 0x45]).version == "3.45"  # type: ignore[union-attr]
    assert from_device_id([0, 0, 3]) is None
