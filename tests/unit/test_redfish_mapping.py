"""Redfish payloads of four vendors mapped onto the neutral vocabulary, and the quirk table.

The JSON fixtures are shaped after public captures of Dell iDRAC, HPE iLO, Supermicro and
Lenovo XCC responses (tests/fixtures/redfish/).
"""

from __future__ import annotations

import json

import pytest

from provisioner.bmc import quirks as quirks_mod
from provisioner.bmc import redfish_map as redfish
from provisioner.bmc.base import BootDevice, BootMode, BootSetting, PowerAction, PowerState
from provisioner.bmc.quirks import Quirks, quirks_for
from provisioner.errors import BmcUnsupported
from tests.conftest import FIXTURES

RF = FIXTURES / "redfish"


def fx(name: str):
    return json.loads((RF / name).read_text())


@pytest.mark.parametrize(("name", "state"), [
    ("dell_system.json", PowerState.ON), ("hpe_system.json", PowerState.OFF),
    ("supermicro_system.json", PowerState.POWERING_ON), ("lenovo_system.json", PowerState.ON)])
def test_power_state(name, state):
    assert redfish.power_state(fx(name)) is state


def test_reset_type_choice_follows_allowable_values():
    dell, hpe, smc = fx("dell_system.json"), fx("hpe_system.json"), fx("supermicro_system.json")
    assert redfish.choose_reset_type(PowerAction.RESET, redfish.allowed_reset_types(dell)) \
        == "ForceRestart"
    assert redfish.choose_reset_type(PowerAction.OFF, redfish.allowed_reset_types(hpe)) \
        == "ForceOff"
    assert redfish.choose_reset_type(PowerAction.ON, redfish.allowed_reset_types(smc)) == "On"
    assert redfish.reset_target(dell).endswith("/System.Embedded.1/Actions/ComputerSystem.Reset")
    with pytest.raises(BmcUnsupported, match="allows only"):
        redfish.choose_reset_type(PowerAction.SOFT_OFF, ["On", "ForceOff"])


def test_boot_settings_read():
    assert redfish.boot_setting(fx("dell_system.json")) == BootSetting(
        BootDevice.PXE, persistent=False, mode=BootMode.UEFI)
    assert redfish.boot_setting(fx("hpe_system.json")).device is BootDevice.NONE
    # Supermicro override disabled: no override even though the target still says Pxe
    smc = redfish.boot_setting(fx("supermicro_system.json"))
    assert smc.device is BootDevice.NONE and smc.mode is BootMode.LEGACY
    assert redfish.boot_setting(fx("lenovo_system.json")) == BootSetting(
        BootDevice.DISK, persistent=True, mode=BootMode.UEFI)


def test_quirk_rows_by_manufacturer():
    smc = quirks_for(fx("supermicro_system.json")["Manufacturer"])
    hpe = quirks_for(fx("hpe_system.json")["Manufacturer"])
    dell = quirks_for(fx("dell_system.json")["Manufacturer"])
    lenovo = quirks_for(fx("lenovo_system.json")["Manufacturer"])
    assert smc.send_boot_mode and smc.boot_patch_attempts == 3
    assert not hpe.send_boot_mode and 400 in hpe.boot_patch_busy_statuses
    assert dell.power_on_conflict_retries == 4 and dell.default_system_id == "System.Embedded.1"
    assert lenovo.virtual_media_via_patch
    assert quirks_for("Sushy Emulator").reports_override_enabled is False
    assert quirks_for("Some New Vendor") == Quirks()


def test_every_quirk_row_names_evidence_and_known_fields():
    valid = set(Quirks.__dataclass_fields__)
    for row in quirks_mod.QUIRKS:
        assert len(row.evidence) > 30, row.vendor
        assert set(row.changes) <= valid


def test_firmware_condition():
    row = quirks_mod.QuirkRow(vendor="lenovo", changes={"virtual_media_via_patch": True},
                              evidence="test row", firmware_below="2.50")
    assert row.matches("Lenovo", "SR630 V2", "XCC 1.89")
    assert not row.matches("Lenovo", "SR630 V2", "XCC 2.94")
    assert not row.matches("Lenovo", "SR630 V2", "unknown")


UEFI_NOW = {"BootSourceOverrideMode": "UEFI"}


def test_boot_patch_body_per_vendor():
    smc = redfish.boot_patch_body(BootDevice.PXE, False, BootMode.UEFI, quirks_for("Supermicro"),
                                  UEFI_NOW)
    assert smc == {"Boot": {"BootSourceOverrideTarget": "Pxe",
                            "BootSourceOverrideEnabled": "Once",
                            "BootSourceOverrideMode": "UEFI"}}  # every time: else it reverts
    hpe = redfish.boot_patch_body(BootDevice.PXE, False, BootMode.UEFI, quirks_for("HPE"),
                                  {"BootSourceOverrideMode": "Legacy"})
    assert "BootSourceOverrideMode" not in hpe["Boot"]  # iLO rejects the field
    persist = redfish.boot_patch_body(BootDevice.DISK, True, BootMode.LEGACY, Quirks(), UEFI_NOW)
    assert persist["Boot"]["BootSourceOverrideEnabled"] == "Continuous"
    assert persist["Boot"]["BootSourceOverrideMode"] == "Legacy"  # a change: sent


def test_boot_mode_is_written_only_when_it_changes():
    """iDRAC queues a BIOS job, an extra reboot, for every Mode written (metal-operator #81);
    a BMC without the property is not sent it."""
    dell = quirks_for("Dell Inc.")
    same = redfish.boot_patch_body(BootDevice.PXE, False, BootMode.UEFI, dell, UEFI_NOW)
    assert "BootSourceOverrideMode" not in same["Boot"]
    legacy = redfish.boot_patch_body(BootDevice.PXE, False, BootMode.UEFI, dell,
                                     {"BootSourceOverrideMode": "Legacy"})
    assert legacy["Boot"]["BootSourceOverrideMode"] == "UEFI"
    absent = redfish.boot_patch_body(BootDevice.PXE, False, BootMode.UEFI, dell, {})
    assert "BootSourceOverrideMode" not in absent["Boot"]


def test_supermicro_boots_virtual_media_as_usbcd_where_allowed():
    smc = quirks_for("Supermicro")
    both = {**UEFI_NOW, "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd", "UsbCd"]}
    body = redfish.boot_patch_body(BootDevice.CD, False, BootMode.UEFI, smc, both)
    assert body["Boot"]["BootSourceOverrideTarget"] == "UsbCd"
    only_cd = {**UEFI_NOW, "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd"]}
    body = redfish.boot_patch_body(BootDevice.CD, False, BootMode.UEFI, smc, only_cd)
    assert body["Boot"]["BootSourceOverrideTarget"] == "Cd"
    other = redfish.boot_patch_body(BootDevice.CD, False, BootMode.UEFI, Quirks(), both)
    assert other["Boot"]["BootSourceOverrideTarget"] == "Cd"
    assert redfish.boot_setting({"Boot": {"BootSourceOverrideEnabled": "Once",
                                          "BootSourceOverrideTarget": "UsbCd"}}).device \
        is BootDevice.CD


def test_supermicro_silent_revert_is_not_accepted():
    q = quirks_for("Supermicro")
    sent = redfish.boot_patch_body(BootDevice.PXE, False, BootMode.UEFI, q, UEFI_NOW)
    # bmclib #459: answered 200, then reverted Mode to Legacy and Enabled to Disabled
    reverted = redfish.boot_setting(fx("supermicro_system.json"))
    assert not redfish.boot_took(reverted, sent, q, device=BootDevice.PXE, persistent=False,
                                 mode=BootMode.UEFI)
    ok = BootSetting(BootDevice.PXE, persistent=False, mode=BootMode.UEFI)
    assert redfish.boot_took(ok, sent, q, device=BootDevice.PXE, persistent=False,
                             mode=BootMode.UEFI)


def test_emulator_continuous_is_tolerated_only_for_the_emulator():
    got = BootSetting(BootDevice.PXE, persistent=True, mode=BootMode.UEFI)
    for vendor, expected in (("Sushy Emulator", True), ("Dell Inc.", False)):
        q = quirks_for(vendor)
        sent = redfish.boot_patch_body(BootDevice.PXE, False, BootMode.UEFI, q, UEFI_NOW)
        assert redfish.boot_took(got, sent, q, device=BootDevice.PXE, persistent=False,
                                 mode=BootMode.UEFI) is expected


def test_dell_facts_gpus_from_pcie_and_psus():
    facts = redfish.facts_from(fx("dell_system.json"), processors=[],
                               interfaces=fx("dell_nics.json"),
                               pcie_devices=fx("dell_pcie_devices.json"),
                               psus=redfish.psu_facts(fx("dell_power.json")))
    assert (facts.vendor, facts.model, facts.serial) == ("Dell Inc.", "PowerEdge XE9680",
                                                        "CN7016361A0042")
    assert facts.cpu_count == 2 and facts.memory_gib == 2048
    assert facts.gpu_count == 8 and facts.gpus[0].model == "NVIDIA H100 80GB HBM3"
    assert facts.macs == ("b0:7b:25:de:1a:10", "b0:7b:25:de:1a:11")
    assert len(facts.psus) == 6 and facts.psus[0].capacity_w == 2800


def test_supermicro_gpus_from_processors_skip_absent():
    facts = redfish.facts_from(fx("supermicro_system.json"),
                               processors=fx("supermicro_processors.json"))
    # 8 GPU processors, one Absent: a DGX/HGX slot that reports 7 is a finding for `up`
    assert facts.gpu_count == 7
    assert facts.cpu_model == "Intel(R) Xeon(R) processor"


def test_hpe_psu_health_and_legacy_power_reading():
    psus = redfish.psu_facts(fx("hpe_power.json"))
    assert [p.healthy for p in psus] == [True, False]
    assert redfish.power_watts(legacy_power=fx("hpe_power.json")) == 590.0


def test_power_reading_prefers_environment_metrics_then_psu_sum():
    env = fx("supermicro_environment_metrics.json")
    assert redfish.power_watts(environment=env, legacy_power=fx("hpe_power.json")) == 6840.5
    assert redfish.power_watts(psu_metrics=fx("supermicro_psu_metrics.json")) == 6840.0
    assert redfish.power_watts() is None


def test_lenovo_vmedia_member_is_a_cd():
    media = fx("lenovo_virtual_media_ext1.json")
    assert "CD" in media["MediaTypes"] and "Actions" not in media
    assert quirks_for("Lenovo").virtual_media_via_patch


def test_mounted_virtual_media_read_back():
    url = "http://10.0.0.1/iso/ubuntu-24.04.iso"
    assert redfish.mounted({"Inserted": True, "Image": url}, url)
    assert redfish.mounted({"Inserted": True, "Image": "ubuntu-24.04.iso"}, url)  # name only
    assert redfish.mounted({"Inserted": True}, url)  # no Image reported
    assert redfish.mounted({"Image": url}, url)  # no Inserted reported
    assert not redfish.mounted({"Inserted": False, "Image": url}, url)
    assert not redfish.mounted({"Inserted": True, "Image": "http://x/other.iso"}, url)
    assert not redfish.mounted({}, url)
