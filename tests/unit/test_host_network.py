"""The host side of the networks: the model and validate (hostnet_checks), the plan the
renderer hands the host network role (hostnet.py), the role's netplan document and its
drift reading (roles/host_network/filter_plugins/netplan.py)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import yaml

from provisioner import hostnet, render
from provisioner.inventory import load
from provisioner.inventory.checks import check
from provisioner.inventory.findings import Severity
from provisioner.switches.live import host_ifname
from tests.conftest import EXAMPLE, ROOT

_spec = importlib.util.spec_from_file_location(
    "netplan_filter", ROOT / "roles/host_network/filter_plugins/netplan.py")
assert _spec is not None and _spec.loader is not None
netplan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(netplan)

DGX01 = ('macs: {mgmt: "52:54:00:00:00:21", roce: "52:54:00:00:01:21", '
         'storage: "52:54:00:00:02:21"}')
RAILS = """networks:
  - {name: mgmt, kind: management, cidr: 10.250.0.0/24, gateway: 10.250.0.1}
  - {name: oob, kind: oob, cidr: 10.250.1.0/24}
  - {name: roce, kind: roce, cidr: 10.250.2.0/24, mtu: 9000, vlan: 100}
  - {name: rail1, kind: roce, cidr: 10.251.1.0/24, mtu: 9000, gateway: 10.251.1.1,
     routes: [{to: 10.60.0.0/16, via: 10.251.1.254}]}
  - {name: storage, kind: storage, cidr: 10.250.3.0/24, mtu: 9000, vlan: 200, host_tagged: true}
"""


def _site(tmp_path: Path, site_edit: tuple[str, str] | None = None,
          placement_edit: tuple[str, str] | None = None) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    for name, edit in (("site.yaml", site_edit), ("placements.yaml", placement_edit)):
        if edit is not None:
            text = (site / name).read_text()
            assert edit[0] in text, edit[0]
            (site / name).write_text(text.replace(edit[0], edit[1], 1))
    return site


def _rails(tmp_path: Path, dgx01_extra: str = "", link_mtu: str = "") -> Path:
    """The example with a second RoCE rail on dgx01, cabled to the leaf's port 3, and
    storage tagged at the hosts."""
    text = (EXAMPLE / "site.yaml").read_text()
    start, end = text.index("networks:"), text.index("\nsoftware:")
    link = ("cabling:\n  links:\n    - {node: dgx01, nic: rail1, switch: leaf01, "
            f"switch_port: swp3s0{link_mtu}}}\n  rules:\n")
    text = text[:start] + RAILS.rstrip("\n") + text[end:]
    text = text.replace("cabling:\n  rules:\n", link)
    site = _site(tmp_path, ((EXAMPLE / "site.yaml").read_text(), text),
                 (DGX01, DGX01[:-1] + ', rail1: "52:54:00:00:03:21"}' + dgx01_extra))
    placements = site / "placements.yaml"
    placements.write_text(placements.read_text().replace(
        "addresses: {mgmt: 10.250.0.21, roce: 10.250.2.21, storage: 10.250.3.21}",
        "addresses: {mgmt: 10.250.0.21, roce: 10.250.2.21, rail1: 10.251.1.21, "
        "storage: 10.250.3.21}"))
    return site


def _codes(site: Path) -> list[tuple[str, str]]:
    return [(f.code, f.severity.value) for f in check(load(site))]


def test_the_example_plans_each_data_network_on_its_mac_and_warns_of_unused_rails():
    loaded = load(EXAMPLE)
    node = next(n for p in loaded.site.placements for n in p.nodes if n.hostname == "dgx01")
    plan = hostnet.plan(loaded.site, node)
    assert [(h.network, h.name, h.mac, h.address, h.mtu, h.table) for h in plan] == [
        ("roce", "roce", "52:54:00:00:01:21", "10.250.2.21/24", 9000, None),
        ("storage", "storage", "52:54:00:00:02:21", "10.250.3.21/24", 9000, None)]
    found = [f for f in check(loaded) if f.code == "roce-rails-fewer-than-ports"]
    assert [f.severity for f in found] == [Severity.WARNING] * 2
    assert "dgx01 uses 1 of its block's 8 RoCE ports" in found[0].message
    assert found[0].location is not None and found[0].location.file.endswith("placements.yaml")


def test_two_rails_get_a_table_each_and_a_tagged_network_a_vlan(tmp_path):
    site = _rails(tmp_path)
    assert not [c for c in _codes(site) if c[1] == "error"]
    out = render.render(load(site), tmp_path / "out").out
    hv = yaml.safe_load((out / "inventory/host_vars/dgx01.yml").read_text())
    ifs = {i["network"]: i for i in hv["host_network_interfaces"]}
    assert (ifs["roce"]["table"], ifs["rail1"]["table"]) == (101, 102)
    assert ifs["roce"]["sysctl"] == {"arp_ignore": 1, "arp_announce": 2, "rp_filter": 2}
    assert ifs["storage"]["sysctl"] == {}
    assert (ifs["storage"]["name"], ifs["storage"]["port"], ifs["storage"]["vlan"]) == (
        "storage.200", "storage", 200)
    assert ifs["roce"]["vlan"] == 0  # not tagged at the host: the switch port's access VLAN
    doc = netplan.netplan_document(hv["host_network_interfaces"])["network"]
    assert doc["renderer"] == "networkd"
    rail = doc["ethernets"]["rail1"]
    assert rail["match"] == {"macaddress": "52:54:00:00:03:21"} and rail["set-name"] == "rail1"
    assert rail["routing-policy"] == [{"from": "10.251.1.21", "table": 102}]
    assert {"to": "10.251.1.0/24", "scope": "link", "table": 102} in rail["routes"]
    assert {"to": "default", "via": "10.251.1.1", "table": 102} in rail["routes"]
    assert {"to": "10.60.0.0/16", "via": "10.251.1.254"} in rail["routes"]
    # the tagged network: the port carries the MTU only, the VLAN the address
    assert doc["ethernets"]["storage"] == {"match": {"macaddress": "52:54:00:00:02:21"},
                                           "set-name": "storage", "dhcp4": False, "mtu": 9000}
    assert doc["vlans"]["storage.200"]["id"] == 200
    assert doc["vlans"]["storage.200"]["addresses"] == ["10.250.3.21/24"]
    # one rail alone (cp01 has none, dgx02 one) gets no table
    hv2 = yaml.safe_load((out / "inventory/host_vars/dgx02.yml").read_text())
    assert [i["table"] for i in hv2["host_network_interfaces"] if i["kind"] == "roce"] == [0]


def test_a_bond_takes_its_members_by_mac(tmp_path):
    site = _site(tmp_path, placement_edit=(
        'macs: {mgmt: "52:54:00:00:00:31", storage: "52:54:00:00:02:31"}',
        'macs: {mgmt: "52:54:00:00:00:31"}\n        interfaces: {storage: {bond: '
        '{members: ["52:54:00:00:04:31", "52:54:00:00:05:31"]}}}'))
    assert not [c for c in _codes(site) if c[1] == "error"]
    out = render.render(load(site), tmp_path / "out").out
    hv = yaml.safe_load((out / "inventory/host_vars/stor01.yml").read_text())
    doc = netplan.netplan_document(hv["host_network_interfaces"])["network"]
    assert doc["bonds"]["storage"]["interfaces"] == ["storage-p0", "storage-p1"]
    assert doc["bonds"]["storage"]["parameters"]["mode"] == "802.3ad"
    assert doc["bonds"]["storage"]["addresses"] == ["10.250.3.31/24"]
    assert doc["ethernets"]["storage-p1"]["match"] == {"macaddress": "52:54:00:00:05:31"}


def test_validate_refuses_what_the_role_could_not_configure(tmp_path):
    # more rails than the block has RoCE ports
    many = "".join(f", r{k}: 10.251.{k}.21" for k in range(8))
    nets = "".join(f"\n  - {{name: r{k}, kind: roce, cidr: 10.251.{k}.0/24, mtu: 9000}}"
                   for k in range(8))
    site = _site(tmp_path / "a", ("\nsoftware:", nets + "\n\nsoftware:"),
                 ("roce: 10.250.2.21, storage: 10.250.3.21}",
                  "roce: 10.250.2.21, storage: 10.250.3.21" + many + "}"))
    assert ("roce-rails-exceed-ports", "error") in _codes(site)
    # a host-tagged network without a VLAN; a route whose next hop is elsewhere
    site = _site(tmp_path / "b", ("{name: roce, kind: roce, cidr: 10.250.2.0/24, mtu: 9000, "
                                  "vlan: 100}", "{name: roce, kind: roce, cidr: 10.250.2.0/24, "
                                  "mtu: 9000, host_tagged: true, routes: [{to: 10.9.0.0/16, "
                                  "via: 10.250.3.1}]}"))
    codes = _codes(site)
    assert ("vlan-missing", "error") in codes and ("address-outside-cidr", "error") in codes
    # interfaces for a network the node has no address on, or that does not exist; a bond
    # member that is another node's MAC; two networks on one interface name
    site = _site(tmp_path / "c", placement_edit=(
        'macs: {mgmt: "52:54:00:00:00:31", storage: "52:54:00:00:02:31"}',
        'macs: {mgmt: "52:54:00:00:00:31", storage: "52:54:00:00:02:31"}\n'
        '        interfaces: {roce: {name: x}, nope: {name: y}}'))
    codes = _codes(site)
    assert ("nic-without-address", "error") in codes and ("unknown-network", "error") in codes
    site = _site(tmp_path / "d", placement_edit=(
        'macs: {mgmt: "52:54:00:00:00:31", storage: "52:54:00:00:02:31"}',
        'macs: {mgmt: "52:54:00:00:00:31"}\n        interfaces: {storage: {bond: '
        '{members: ["52:54:00:00:01:21", "52:54:00:00:05:31"]}}}'))
    assert ("duplicate-mac", "error") in _codes(site)
    site = _site(tmp_path / "e", placement_edit=(
        DGX01, DGX01 + "\n        interfaces: {storage: {name: roce}}"))
    found = [f for f in check(load(site)) if f.code == "interface-name-clash"]
    assert found and "roce and storage both get the interface name roce" in found[0].message


def test_a_data_network_without_a_nic_is_said_and_left_out(tmp_path):
    site = _site(tmp_path, placement_edit=(DGX01, 'macs: {mgmt: "52:54:00:00:00:21"}'))
    found = [f for f in check(load(site)) if f.code == "nic-unbound"]
    assert [f.severity for f in found] == [Severity.WARNING] * 2
    assert "no NIC is named for network roce" in found[0].message
    loaded = load(site)
    node = next(n for p in loaded.site.placements for n in p.nodes if n.hostname == "dgx01")
    assert hostnet.plan(loaded.site, node) == []


def test_a_rail_whose_mtu_is_above_its_switch_port_is_refused(tmp_path):
    """Each rail's link is held to its own network's MTU, not the node's smallest."""
    assert not [f for f in check(load(_rails(tmp_path / "a"))) if f.code == "mtu-mismatch"]
    site = _rails(tmp_path / "b", link_mtu=", mtu_bytes: 1500")
    found = [f for f in check(load(site)) if f.code == "mtu-mismatch"]
    assert len(found) == 1 and "dgx01 rail1 MTU 9000" in found[0].message


def _addr(name: str, mtu: int, *addrs: str) -> dict[str, Any]:
    return {"ifname": name, "mtu": mtu, "addr_info": [
        {"family": "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1])}
        for a in addrs]}


def test_drift_names_each_difference_from_the_running_host():
    plan = [{"network": "roce", "name": "roce", "address": "10.250.2.21/24", "mtu": 9000,
             "table": 101},
            {"network": "storage", "name": "storage", "address": "10.250.3.21/24",
             "mtu": 9000, "table": 0}]
    live = [_addr("roce", 9000, "10.250.2.21/24"), _addr("storage", 9000, "10.250.3.21/24")]
    rules = [{"priority": 0, "src": "10.250.2.21", "table": "101"}]
    assert netplan.netplan_drift(plan, live, rules) == []
    assert netplan.netplan_drift(plan, [_addr("roce", 1500, "10.250.2.21/24")], []) == [
        "roce (roce): MTU 1500, not 9000",
        "roce (roce): no rule from 10.250.2.21 lookup 101",
        "storage (storage): no such interface"]
    assert netplan.netplan_drift(plan[1:], [_addr("storage", 9000, "10.250.3.99/24")], []) == [
        "storage (storage): no address 10.250.3.21/24 (has 10.250.3.99/24)"]


def test_fabric_check_live_reads_the_interface_the_role_made(tmp_path):
    """`fabric check --live` reads a link's MTU and GIDs on the interface the host network
    role gives its network: a tagged network's VLAN sub-interface, a name the inventory
    sets; a NIC the site names itself (software.roce.interfaces) as written."""
    loaded = load(_rails(tmp_path, "\n        interfaces: {rail1: {name: ens7f0np0}}"))
    node = next(n for p in loaded.site.placements for n in p.nodes if n.hostname == "dgx01")
    assert host_ifname(loaded.site, node, "roce") == "roce"
    assert host_ifname(loaded.site, node, "rail1") == "ens7f0np0"
    assert host_ifname(loaded.site, node, "storage") == "storage.200"
    assert host_ifname(loaded.site, node, "enp1s0f0") == "enp1s0f0"


_lspec = importlib.util.spec_from_file_location(
    "host_network_links", ROOT / "roles/host_network/library/host_network_links.py")
assert _lspec is not None and _lspec.loader is not None
links = importlib.util.module_from_spec(_lspec)
_lspec.loader.exec_module(links)


def test_the_apply_module_renames_ports_by_permanent_mac_and_leaves_the_rest():
    """A bond member is found by its permanent MAC (an enslaved port shows its bond's),
    a VLAN or bond sharing a MAC is no port, a port already named is left as it is."""
    planned = [{"name": "storage", "port": "storage", "mac": None,
                "members": ["52:54:00:00:04:31", "52:54:00:00:05:31"]},
               {"name": "roce.100", "port": "roce", "mac": "52:54:00:00:01:21", "members": []}]
    ip_link = [
        {"ifname": "eth0", "link_type": "ether", "address": "52:54:00:00:00:31"},
        {"ifname": "ens4", "link_type": "ether", "address": "52:54:00:00:09:99",
         "permaddr": "52:54:00:00:04:31"},
        {"ifname": "storage-p1", "link_type": "ether", "address": "52:54:00:00:09:99",
         "permaddr": "52:54:00:00:05:31"},
        {"ifname": "storage", "link_type": "ether", "address": "52:54:00:00:04:31",
         "linkinfo": {"info_kind": "bond"}},
        {"ifname": "ens6", "link_type": "ether", "address": "52:54:00:00:01:21"},
        {"ifname": "roce.100", "link_type": "ether", "address": "52:54:00:00:01:21",
         "linkinfo": {"info_kind": "vlan"}},
        {"ifname": "lo", "link_type": "loopback", "address": "00:00:00:00:00:00"}]
    assert links.renames(planned, ip_link) == [("ens6", "roce"), ("ens4", "storage-p0")]
    assert links.all_names(planned) == ["storage-p0", "storage-p1", "storage", "roce",
                                        "roce.100"]
    assert links.member_name("storage", 1) == hostnet.member_name("storage", 1)
