"""The switch side of the host networks: each host port in its network's VLAN (an access
port, or a trunk where the hosts tag it) and, where the leaf routes a network (an L3 rail,
`switch_gateway`), the gateway on an SVI of that VLAN; validate refuses what no renderer
would put on a switch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from provisioner import fabric, roce
from provisioner.fabric import Svi
from provisioner.inventory import check, load
from provisioner.inventory.findings import Severity
from provisioner.inventory.models import Roce

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example"
ROCE = "  - {name: roce, kind: roce, cidr: 10.250.2.0/24, mtu: 9000, vlan: 100}"
RULE = '    - {rule: rack_leaf, nic: roce, port_pattern: "swp{n}s0"}'


def _copy(tmp_path: Path, *edits: tuple[str, str, str]) -> Path:
    for f in EXAMPLE.glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    for name, old, new in edits:
        text = (tmp_path / name).read_text()
        assert old in text, (name, old)
        (tmp_path / name).write_text(text.replace(old, new, 1))
    return tmp_path


def _errors(site: Path) -> list[tuple[str, str, str]]:
    return [(f.code, f.message, str(f.location)) for f in check(load(site))
            if f.severity is Severity.ERROR]


def _leaf(site: Path) -> fabric.SwitchSpec:
    return next(s for s in fabric.switch_specs(load(site)) if s.hostname == "leaf01")


def test_each_host_port_is_in_its_network_s_vlan_and_a_routed_rail_has_its_gateway(
        tmp_path: Path) -> None:
    # the example as written: RoCE on VLAN 100, untagged at the hosts, routed elsewhere
    leaf = _leaf(EXAMPLE)
    assert [(p.name, p.vlan, p.tagged) for p in leaf.ports] == [
        ("swp1s0", 100, False), ("swp2s0", 100, False)]
    assert leaf.svis == () and leaf.vlans == (100,)
    # the leaf routes the rail, whose hosts tag it
    site = _copy(tmp_path, ("site.yaml", ROCE, ROCE.replace(
        "vlan: 100}", "vlan: 100, gateway: 10.250.2.1, switch_gateway: true, "
        "host_tagged: true}")))
    assert _errors(site) == []
    leaf = _leaf(site)
    assert [(p.name, p.vlan, p.tagged) for p in leaf.ports] == [
        ("swp1s0", 100, True), ("swp2s0", 100, True)]
    assert leaf.svis == (Svi("roce", 100, "10.250.2.1/24", 9000),)
    # as NVUE takes it: the bridge's VLAN, each port tagged in it, the SVI with the gateway
    rendered = next(r for r in fabric.render_all(load(site)) if r.spec.hostname == "leaf01")
    conf = yaml.safe_load(rendered.text)[0]["set"]
    assert conf["bridge"]["domain"]["br_default"]["vlan"] == {"100": {}}
    assert conf["interface"]["swp1s0"]["bridge"]["domain"]["br_default"] == {
        "untagged": "none", "vlan": {"100": {}}}
    assert conf["interface"]["vlan100"] == {
        "type": "svi", "vlan": 100, "description": "roce gateway", "link": {"mtu": 9000},
        "ip": {"address": {"10.250.2.1/24": {}}}}
    # the same spec on SONiC: VLAN, members and the interface address in config_db
    db = json.loads(fabric.RENDERERS["sonic"].render(
        fabric.SwitchSpec("leaf01", "sonic", leaf.policy, (), svis=leaf.svis)))
    assert db["VLAN_INTERFACE"] == {"Vlan100": {}, "Vlan100|10.250.2.1/24": {}}


def test_a_switch_gateway_needs_an_address_one_leaf_and_an_svi_renderer(
        tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    no_gateway = _copy(tmp_path / "a",
                       ("site.yaml", ROCE, ROCE.replace("}", ", switch_gateway: true}")))
    found = _errors(no_gateway)
    assert [(c, m) for c, m, _ in found] == [
        ("switch-gateway-incomplete", "network roce is routed by its switch but has no "
                                      "gateway")]
    assert "site.yaml:28" in found[0][2]
    # dgx02's RoCE port on the IOS-style management switch: two switches, one of them
    # without an SVI renderer
    (tmp_path / "b").mkdir()
    split = _copy(tmp_path / "b", ("site.yaml", ROCE, ROCE.replace(
        "}", ", gateway: 10.250.2.1, switch_gateway: true}")), ("site.yaml", RULE, "    []\n"
        "  links:\n    - {node: dgx01, nic: roce, switch: leaf01, switch_port: swp1s0}\n"
        "    - {node: dgx02, nic: roce, switch: mgmt01, switch_port: GigabitEthernet0/1}"))
    codes = {c: m for c, m, _ in _errors(split)}
    assert codes["switch-gateway-on-several-switches"].startswith(
        "network roce's hosts are cabled to leaf01, mgmt01: one gateway on several switches")
    assert codes["switch-gateway-unsupported"] == (
        "mgmt01 runs cisco_ios, whose rendering carries port descriptions only: no SVI "
        "would hold roce's gateway 10.250.2.1")
    # a host given the address the leaf's SVI holds; where the gateway is elsewhere (a
    # server may be the router, as a head node doing NAT is) nothing is said
    (tmp_path / "c").mkdir()
    clash = _copy(tmp_path / "c", ("site.yaml", ROCE, ROCE.replace(
        "}", ", gateway: 10.250.2.21, switch_gateway: true}")))
    assert [(c, m) for c, m, _ in _errors(clash)] == [
        ("duplicate-ip", "dgx01: 10.250.2.21 is network roce's gateway")]
    (tmp_path / "d").mkdir()
    router = _copy(tmp_path / "d", ("site.yaml", ROCE, ROCE.replace(
        "}", ", gateway: 10.250.2.21}")))
    assert _errors(router) == []


@pytest.mark.parametrize("nos", ["cumulus", "onyx", "sonic", "eos"])
def test_each_dialect_reads_back_the_vlans_it_renders(nos: str) -> None:
    """The port VLANs parsed from each rendering are the spec's: what `fabric check` and
    `--live` (the switch's running config, read by the same parser) compare."""
    names = {"cumulus": ("swp1", "swp2", "swp3"), "onyx": ("Eth1/1", "Eth1/2", "Eth1/3"),
             "sonic": ("Ethernet0", "Ethernet8", "Ethernet16"),
             "eos": ("Ethernet1", "Ethernet2", "Ethernet3")}[nos]
    ports = (fabric.PortSpec(names[0], "dgx01 roce", 9216, vlan=100),
             fabric.PortSpec(names[1], "dgx01 storage", 9216, vlan=200, tagged=True),
             fabric.PortSpec(names[2], "uplink", 9216))
    r = fabric.RENDERERS[nos]
    spec = fabric.SwitchSpec("leaf01", nos, roce.policy(Roce(), nos), ports,
                             svis=(Svi("roce", 100, "10.250.2.1/24", 9000),))
    qos = r.parse(r.render(spec))
    assert qos.port_vlans == {names[0]: (100, False), names[1]: (200, True)}
    # a port in another VLAN than its network's is a mismatch naming both; the uplink,
    # whose network has none, is not compared
    assert [m.format() for m in fabric.vlan_mismatches(
        "dgx01", "roce", (300, False), "leaf01", names[0], qos)] == [
        f"dgx01 roce <-> leaf01 {names[0]}: vlan: host VLAN 300 untagged, switch VLAN 100 "
        "untagged"]
    assert fabric.vlan_mismatches("dgx01", "roce", None, "leaf01", names[2], qos) == []
    assert fabric.vlan_mismatches("dgx01", "x", (100, False), "leaf01", names[2], qos)[
        0].switch_value == "no VLAN"


def test_fabric_check_of_the_example_compares_the_vlans_and_agrees() -> None:
    report = fabric.check(load(EXAMPLE))
    assert report.ok and report.links_checked == 2
    # the IOS-style dialect is not read for VLANs: nothing to compare there
    assert fabric.RENDERERS["cisco_ios"].parse("interface Gi0/1\n description x\n"
                                              ).port_vlans is None
