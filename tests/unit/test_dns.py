"""The installed nodes' resolvers (software.sources.dns_servers, dns_search): an installed
node has a static address, so what autoinstall's netplan and the boot server's DHCP carry
is all the DNS it has; validate refuses a site whose nodes must reach servers by name
with none set."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest
import yaml

from provisioner.errors import InventoryError
from provisioner.inventory import load
from provisioner.inventory.valid import load_valid, refusing, site_findings
from provisioner.render import pxe
from tests.conftest import edited_example

SERVER = IPv4Address("10.250.0.1")
ANCHOR = "  doca: \"2.9.1\"\n"
MIRROR = "  mirror: http://mirror.corp.example/ubuntu\n"
DNS = "  sources: {dns_servers: [10.250.0.53, 10.250.0.54], dns_search: [corp.example]}\n"


def _codes(site) -> dict[str, str]:
    return {f.code: f.message for f in refusing(site_findings(load(site)))}


def test_servers_named_by_host_name_without_dns_are_refused(tmp_path):
    site = edited_example(tmp_path, ANCHOR, ANCHOR + MIRROR
                          + "  sources: {ntp_servers: [ntp1.corp.example, 10.250.0.9]}\n")
    codes = _codes(site)
    assert "names-without-dns" in codes, codes
    said = codes["names-without-dns"]
    assert "mirror.corp.example (software.mirror)" in said
    assert "ntp1.corp.example (software.sources.ntp_servers)" in said
    assert "10.250.0.9" not in said  # an address needs no resolver
    with pytest.raises(InventoryError, match=r"site\.yaml:\d+:\d+: software\.sources: error: "
                       r".*software\.sources\.dns_servers is empty"):
        load_valid(site)  # every command's entry point: file, line and key


def test_servers_named_by_address_or_with_resolvers_pass(tmp_path):
    by_address = edited_example(tmp_path, ANCHOR, ANCHOR
                                + "  mirror: http://10.250.0.1:8080/ubuntu\n", name="ip")
    assert "names-without-dns" not in _codes(by_address)
    with_dns = edited_example(tmp_path, ANCHOR, ANCHOR + MIRROR + DNS, name="dns")
    assert "names-without-dns" not in _codes(with_dns)


@pytest.mark.parametrize("sources, said", [
    ("{dns_servers: [10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4]}", "at most 3"),
    ("{dns_servers: [dns.corp.example]}", "dns_servers"),
    ("{dns_search: ['corp.example;reboot']}", "dns_search"),
])
def test_bad_resolver_settings_are_refused_naming_the_key(tmp_path, sources, said):
    site = edited_example(tmp_path, ANCHOR, ANCHOR + f"  sources: {sources}\n")
    with pytest.raises(InventoryError) as exc:
        load(site)
    assert said in str(exc.value), str(exc.value)


def test_autoinstall_and_dhcp_carry_the_resolvers(tmp_path):
    site = edited_example(tmp_path, ANCHOR, ANCHOR + MIRROR + DNS)
    out = tmp_path / "pxe"
    pxe.render_pxe(load(site), out, server=SERVER)
    doc = yaml.safe_load((out / "autoinstall/dgx01/user-data").read_text())["autoinstall"]
    assert doc["network"]["ethernets"]["boot"]["nameservers"] == {
        "addresses": ["10.250.0.53", "10.250.0.54"], "search": ["corp.example"]}
    conf = (out / "dnsmasq.conf").read_text()
    assert "dhcp-option=option:dns-server,10.250.0.53,10.250.0.54\n" in conf
    assert "dhcp-option=option:domain-search,corp.example\n" in conf
    assert "port=0\n" in conf  # dnsmasq still answers no DNS itself


def test_without_resolvers_nothing_is_made_up(tmp_path):
    site = edited_example(tmp_path, "a", "a")  # the example as it is: no sources.dns_*
    out = tmp_path / "pxe"
    pxe.render_pxe(load(site), out, server=SERVER)
    doc = yaml.safe_load((out / "autoinstall/dgx01/user-data").read_text())["autoinstall"]
    assert "nameservers" not in doc["network"]["ethernets"]["boot"]
    assert "dns-server" not in (out / "dnsmasq.conf").read_text()


PROV = "  - {name: prov, kind: provisioning, cidr: 10.249.0.0/24}\n"
NETS = "  - {name: oob, kind: oob, cidr: 10.250.1.0/24}\n"


@pytest.mark.parametrize("macs, nics", [
    ('prov: "52:54:00:00:09:21", mgmt: "52:54:00:00:00:21",', ["boot", "mgmt"]),
    ('prov: "52:54:00:00:00:21",', ["boot"])])  # no management MAC: the boot NIC's
def test_a_node_booted_from_a_provisioning_network_comes_up_on_management_too(
        tmp_path, macs, nics):
    """Ansible reaches an installed node on its management address: booted from another
    network, the installer's netplan brings that address up too (on its own NIC, or on the
    boot NIC when the inventory names no other), with the default route by the management
    gateway and the resolvers there."""
    site = edited_example(tmp_path, NETS, NETS + PROV)
    placements = site / "placements.yaml"
    placements.write_text(placements.read_text().replace(
        "addresses: {mgmt: 10.250.0.21,", "addresses: {prov: 10.249.0.21, mgmt: 10.250.0.21,"
    ).replace('macs: {mgmt: "52:54:00:00:00:21",', "macs: {" + macs))
    site_yaml = site / "site.yaml"
    site_yaml.write_text(site_yaml.read_text().replace(ANCHOR, ANCHOR + DNS, 1))
    assert not [f for f in refusing(site_findings(load(site)))]
    out = tmp_path / "pxe"
    pxe.render_pxe(load(site), out, server=IPv4Address("10.249.0.1"))
    eths = yaml.safe_load((out / "autoinstall/dgx01/user-data").read_text())[
        "autoinstall"]["network"]["ethernets"]
    assert sorted(eths) == sorted(nics)
    mgmt = eths[nics[-1]]
    assert mgmt["match"] == {"macaddress": "52:54:00:00:00:21"}
    assert "10.250.0.21/24" in mgmt["addresses"]
    assert mgmt["routes"] == [{"to": "default", "via": "10.250.0.1"}]
    assert mgmt["nameservers"]["addresses"] == ["10.250.0.53", "10.250.0.54"]
    assert "10.249.0.21/24" in eths["boot"]["addresses"]
    if nics == ["boot", "mgmt"]:
        assert eths["boot"]["match"] == {"macaddress": "52:54:00:00:09:21"}
        assert "routes" not in eths["boot"]  # one default route
