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
