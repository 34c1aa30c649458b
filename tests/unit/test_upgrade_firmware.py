"""Firmware in a bundle: `upgrade plan` lists each node's move from the versions its BMC
reported at its last inspection (recorded by `up`), BMC before BIOS; refuses a downgrade not
allowed and a block the site has not; `upgrade apply` refuses to pretend it flashed any."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from provisioner.bmc.base import FirmwareFact, HardwareFacts
from provisioner.errors import InventoryError, UpgradeRefused
from provisioner.inventory import load
from provisioner.inventory.valid import site_findings
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.results.upgrade import plan_report
from provisioner.state import StateStore
from provisioner.upgrade import firmware
from provisioner.upgrade.plan import PlanOptions
from provisioner.workflows import report
from provisioner.workflows.steps.bmc import record_firmware
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import EXAMPLE
from tests.unit.test_upgrade_plan import GOOD

SHA = "ab" * 32
PINS = f"""\
firmware:
  dgx-h100:
    BIOS: {{version: "1.1.0", image: "http://mirror.example/fw/bios-1.1.0.bin", sha256: {SHA}}}
    BMC: {{version: "24.09", image: "http://mirror.example/fw/bmc.bin", sha256: {SHA},
           reset: bmc_reset}}
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    return dest


def _inspected(site: Path, host: str, firmware: dict[str, str]) -> None:
    """What `up`'s inspect step records: the transition to inspected, with the versions."""
    store = StateStore(for_site(load(site)).state_path)
    store.enroll([host])
    store.transition(host, Phase.INSPECTED, detail={"firmware": firmware})


def _plan(site: Path, text: str):  # type: ignore[no-untyped-def]
    (site / "bundles" / "next.yaml").write_text(text)
    loaded = load(site)
    return apply_mod.plan(loaded, "next", PlanOptions(), None, for_site(loaded))[0]


def test_each_node_s_firmware_moves_from_what_its_bmc_reported(site: Path) -> None:
    _inspected(site, "dgx01", {"BMC": "24.01", "BIOS": "1.0.0", "CPLD": "3"})
    p = _plan(site, GOOD + PINS)
    assert p.ok, p.refusals
    assert [(m.hostname, m.component, m.old, m.new, m.reset, m.direction)
            for m in p.firmware] == [
        ("dgx01", "BMC", "24.01", "24.09", "bmc_reset", "upgrade"),
        ("dgx01", "BIOS", "1.0.0", "1.1.0", "power_cycle", "upgrade"),
        ("dgx02", "BMC", None, "24.09", "bmc_reset", "change"),
        ("dgx02", "BIOS", None, "1.1.0", "power_cycle", "change")]
    assert any(w.startswith("dgx02: no firmware versions recorded") for w in p.warnings)
    report = plan_report(p)
    assert report.firmware[0].model_dump()["old"] == "24.01"
    # a node already at the pin moves nothing
    _inspected(site, "dgx02", {"BMC": "24.09", "BIOS": "1.1.0"})
    assert {m.hostname for m in _plan(site, GOOD + PINS).firmware} == {"dgx01"}


def test_a_downgrade_is_refused_and_an_unknown_block_said(site: Path) -> None:
    _inspected(site, "dgx01", {"BMC": "24.10", "BIOS": "1.0.0"})
    p = _plan(site, GOOD + PINS + f"""\
  sn9999:
    BIOS: {{version: "2", image: "http://mirror.example/x.bin", sha256: {SHA}}}
""")
    assert [(r.code, r.message) for r in p.refusals] == [
        ("firmware-downgrade", "dgx01: BMC firmware would go back from 24.10 to 24.09")]
    assert "the bundle pins firmware for block 'sn9999', which the site has no node of: " \
        "nothing of it is planned" in p.warnings
    allowed = _plan(site, GOOD + PINS.replace("reset: bmc_reset", "reset: bmc_reset, "
                                                                  "downgrade: true"))
    assert allowed.ok and allowed.firmware[0].direction == "downgrade"


def test_a_pin_needs_a_checksum_and_an_image_url(site: Path) -> None:
    with pytest.raises(InventoryError) as err:
        _plan(site, GOOD + PINS.replace(f"sha256: {SHA}}}", "sha256: abc}", 1))
    assert "next.yaml:" in str(err.value) and "sha256" in str(err.value)


def test_apply_refuses_a_bundle_that_moves_firmware(site: Path) -> None:
    _inspected(site, "dgx01", {"BMC": "24.01", "BIOS": "1.0.0"})
    p = _plan(site, GOOD + PINS)
    with pytest.raises(UpgradeRefused) as err:
        apply_mod._refuse(p)
    assert [r.code for r in err.value.refusals] == ["firmware-not-applied"]
    assert "dgx01: BMC 24.01 -> 24.09" in str(err.value)


def test_status_shows_the_versions_recorded_at_inspection(site: Path) -> None:
    _inspected(site, "dgx01", {"BMC": "24.01", "BIOS": "1.0.0"})
    nodes = {n.hostname: n for n in report.status(load(site)).nodes}
    assert nodes["dgx01"].firmware == {"BMC": "24.01", "BIOS": "1.0.0"}


def test_validate_refuses_firmware_for_a_block_the_site_has_not(site: Path) -> None:
    (site / "bundles" / "next.yaml").write_text(GOOD + PINS.replace("dgx-h100", "sn9999"))
    found = [(f.code, f.message, str(f.location)) for f in site_findings(load(site))
             if f.code == "firmware-unknown-block"]
    assert [(c, m) for c, m, _ in found] == [
        ("firmware-unknown-block", "bundle next pins firmware for block 'sn9999', which the "
                                   "site has no node of: nothing of it is planned")]
    assert "next.yaml:9" in found[0][2], found


def test_one_version_written_two_ways_is_not_a_move_and_every_number_orders(
        site: Path) -> None:
    # IPMI's BCD minor "9.08" against a pin of "9.8": the same version; "1.45a" and "1.45b"
    # have the same numbers: a change, never a refused downgrade
    _inspected(site, "dgx01", {"BMC": "9.08", "BIOS": "1.45b"})
    p = _plan(site, GOOD + PINS.replace('"24.09"', '"9.8"').replace('"1.1.0"', '"1.45a"'))
    assert p.ok, p.refusals
    assert [(m.component, m.direction) for m in p.firmware if m.hostname == "dgx01"] == [
        ("BIOS", "change")]
    # a build number after a dash orders too (the upgrade plan's own rule ignored it); read
    # again by `bmc inventory` (the last read wins)
    StateStore(for_site(load(site)).state_path).record(
        "dgx01", firmware.SEEN, {"firmware": {"BMC": "24.09-2", "BIOS": "1.1.0"}})
    p = _plan(site, GOOD + PINS.replace('"24.09"', '"24.09-1"'))
    assert [r.message for r in p.refusals] == [
        "dgx01: BMC firmware would go back from 24.09-2 to 24.09-1"]


def test_a_component_the_bmc_does_not_report_is_said(site: Path) -> None:
    _inspected(site, "dgx01", {"BMC": "24.01"})  # an IPMI BMC: no BIOS version
    p = _plan(site, GOOD + PINS)
    assert ("dgx01 BIOS: the BMC reports no such component (pin it as `bmc inventory` "
            "names it): planned from unknown") in p.warnings


def test_bmc_inventory_records_the_versions_of_enrolled_nodes(site: Path) -> None:
    store = StateStore(for_site(load(site)).state_path)
    store.enroll(["dgx01"])
    facts = {h: HardwareFacts(firmware=(FirmwareFact("BMC", "BMC", "24.09"),))
             for h in ("dgx01", "dgx99")}
    assert record_firmware(store, facts) == ["dgx01"]  # dgx99: not enrolled, not recorded
    assert firmware.recorded(store.events(), ["dgx01"]) == {"dgx01": {"BMC": "24.09"}}
    # what `upgrade plan` then moves from: the pin is reached, nothing moves on dgx01
    assert {m.hostname for m in _plan(site, GOOD + PINS).firmware
            if m.component == "BMC"} == {"dgx02"}
