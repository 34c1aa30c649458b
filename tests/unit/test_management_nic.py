"""Which NIC is the management (PXE) NIC: the BMC's word (its network boot options, a
NetworkDeviceFunction set to PXE), else the discovery lease; never the sort order of the
MACs, and a refusal when nothing tells it. The HGX fixture's eight ConnectX-7 RoCE ports
(04:3f:72:...) sort before its onboard X710 (3c:ec:ef:...), the NIC that network-boots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from provisioner import profile
from provisioner.bmc import redfish_map as redfish
from provisioner.discover import add as add_mod
from provisioner.errors import ConfigError
from provisioner.inventory import load
from provisioner.lab import redfish_shape
from provisioner.lifecycle import Phase
from provisioner.state import StateStore
from tests.conftest import FIXTURES

RF = FIXTURES / "redfish"
SITE = FIXTURES / "sites" / "add_commented"
ONBOARD = "3c:ec:ef:6a:2b:40"
SYSTEM = {"Boot": {"BootOrder": ["Boot0003", "Boot0005", "Boot0006", "Boot0009"]}}


def fx(name: str) -> Any:
    return json.loads((RF / name).read_text())


def test_ports_are_physical_only_and_data_ports_sort_first() -> None:
    facts = redfish.facts_from({}, interfaces=fx("supermicro_hgx_nics.json"))
    # the host interface (ToManager) and the VLAN sub-interface are no ports
    assert len(facts.nics) == 9 and "b0:3a:f2:b6:05:9f" not in facts.macs
    assert facts.macs[0].startswith("04:3f:72")  # a RoCE port sorts first


def test_the_bmc_s_network_boot_option_names_the_management_nic() -> None:
    facts = redfish.facts_from(SYSTEM, interfaces=fx("supermicro_hgx_nics.json"),
                               boot_options=fx("supermicro_hgx_boot_options.json"))
    # IPv4 and IPv6 options of the same NIC; the ConnectX option is disabled
    assert facts.mgmt_mac == ONBOARD
    assert "network boot options" in (facts.mgmt_mac_how or "")


def test_a_pxe_network_device_function_names_it() -> None:
    nics = redfish.nic_facts(fx("supermicro_hgx_nics.json"))
    mac, how = redfish.management_nic(nics, pxe_functions=[ONBOARD])
    assert mac == ONBOARD and "PXE" in how
    function = {"BootMode": "PXE", "Ethernet": {"MACAddress": "3C:EC:EF:6A:2B:40"}}
    assert redfish.network_boot_function(function) == ONBOARD
    assert redfish.network_boot_function({**function, "BootMode": "Disabled"}) is None
    nic = {"Links": {"NetworkDeviceFunctions": [{"@odata.id": "/a/NDF/1"}]}}
    assert redfish.function_links(nic) == ["/a/NDF/1"]


def test_several_network_boot_nics_go_by_boot_order_or_are_refused() -> None:
    nics = redfish.nic_facts(fx("supermicro_hgx_nics.json"))
    port = "04:3f:72:c5:10:00"
    mac, _ = redfish.management_nic(nics, boot_macs=[(1, port), (2, ONBOARD)])
    assert mac == port  # the BootOrder puts that one first: the firmware boots it first
    mac, why = redfish.management_nic(nics, boot_macs=[(4, port), (4, ONBOARD)])
    assert mac is None and "does not rank one first" in why
    mac, why = redfish.management_nic(nics)
    assert mac is None and "names no network-boot NIC" in why


def test_the_lab_shape_reports_its_pxe_option_for_the_management_nic() -> None:
    loaded = load(SITE)
    shape = redfish_shape.shape(loaded.catalog["dgx-h100"], "lab/x", "52:54:00:fd:00:01")
    sid = "sys"
    options = [redfish_shape.served(sid, shape, f"/BootOptions/{ref}", chassis=False)
               for ref in redfish_shape.BOOT_ORDER]
    interfaces = redfish_shape.served(sid, shape, "/EthernetInterfaces", chassis=False)
    assert interfaces is not None
    members = [redfish_shape.served(sid, shape, m["@odata.id"][len(f"/redfish/v1/Systems/"
                                                                   f"{sid}"):], chassis=False)
               for m in interfaces["Members"]]
    facts = redfish.facts_from({"Boot": {"BootOrder": list(redfish_shape.BOOT_ORDER)}},
                               interfaces=[m for m in members if m],
                               boot_options=[o for o in options if o])
    assert facts.macs[0] != "52:54:00:fd:00:01"  # the data ports sort first here too
    assert facts.mgmt_mac == "52:54:00:fd:00:01"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    dest = tmp_path / "grow"
    shutil.copytree(SITE, dest)
    return dest


def _discovered(site: Path, facts: dict[str, Any], lease_mac: str | None = None
                ) -> StateStore:
    store = StateStore(profile.for_site(load(site)).state_path)
    run = store.start_run("discover")
    store.enroll(["disc-1"], run, phase=Phase.DISCOVERED)
    store.record("disc-1", "discovery", {
        "bmc": {"protocol": "redfish", "address": "10.20.1.40", "port": 443,
                "scheme": "https"},
        "lease_mac": lease_mac, "error": None,
        "facts": {"vendor": "NVIDIA", "model": "DGXH100", "serial": "1", "gpus": [["H100", 8]],
                  "nvswitch_count": 4, **facts},
        "block": "dgx-h100", "confidence": 0.93, "reasons": []}, run)
    store.end_run(run, "ok")
    return store


def _macs() -> list[str]:
    return sorted([f"04:3f:72:c5:10:{i:02x}" for i in range(8)] + [ONBOARD])


def test_add_records_the_management_nic_not_the_first_sorted_mac(site: Path) -> None:
    store = _discovered(site, {"macs": _macs(), "mgmt_mac": ONBOARD,
                               "mgmt_mac_how": "the only NIC among the network boot options"})
    source = add_mod.from_discovered(store, "disc-1", "bmc")
    result = add_mod.add(load(site), store, source)
    assert result.proposal.macs == {"mgmt": ONBOARD}
    assert ONBOARD in result.change.diff and "04:3f:72" not in result.change.diff


def test_add_takes_the_lease_when_the_bmc_does_not_say(site: Path) -> None:
    store = _discovered(site, {"macs": _macs(), "mgmt_mac": None,
                               "mgmt_mac_how": "the BMC names no network-boot NIC"},
                        lease_mac="3c:ec:ef:6a:2b:41")
    source = add_mod.from_discovered(store, "disc-1", "bmc")
    assert add_mod.add(load(site), store, source).proposal.macs == {
        "mgmt": "3c:ec:ef:6a:2b:41"}


def test_add_refuses_when_nothing_names_the_management_nic(site: Path) -> None:
    store = _discovered(site, {"macs": _macs(), "mgmt_mac": None,
                               "mgmt_mac_how": "the BMC names no network-boot NIC"})
    source = add_mod.from_discovered(store, "disc-1", "bmc")
    before = sorted((p.name, p.read_text()) for p in site.glob("*.yaml"))
    with pytest.raises(ConfigError, match=r"management \(PXE\) NIC.*names no network-boot"):
        add_mod.add(load(site), store, source, apply=True)
    assert sorted((p.name, p.read_text()) for p in site.glob("*.yaml")) == before
    assert store.node("disc-1").phase is Phase.DISCOVERED


def test_add_refuses_a_record_from_before_the_management_nic_was_read(site: Path) -> None:
    store = _discovered(site, {"macs": _macs()})  # no mgmt_mac key: an older discovery
    source = add_mod.from_discovered(store, "disc-1", "bmc")
    with pytest.raises(ConfigError, match="run `provision discover` again"):
        add_mod.add(load(site), store, source)
