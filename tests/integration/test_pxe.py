"""Network-boot rendering checked by the real dnsmasq (`dnsmasq --test`), and the
autoinstall data parsed back."""

from __future__ import annotations

import shutil
import subprocess
from ipaddress import IPv4Address

import pytest
import yaml

from provisioner.errors import RenderError
from provisioner.inventory import load
from provisioner.render import pxe
from tests.conftest import EXAMPLE

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("dnsmasq") is None,
                                 reason="dnsmasq not installed (scripts/bootstrap.sh does it)")]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTestsOnly0000000000000000000000 lab@test"


def test_rendered_dnsmasq_config_passes_dnsmasq_test(tmp_path):
    written, missing = pxe.render_pxe(load(EXAMPLE), tmp_path, server=IPv4Address("10.250.0.1"),
                                      ssh_public_key=KEY)
    conf = tmp_path / "dnsmasq.conf"
    proc = subprocess.run(["dnsmasq", "--test", "-C", str(conf)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "syntax check OK" in proc.stderr
    text = conf.read_text()
    for host, mac, ip in (("dgx01", "52:54:00:00:00:21", "10.250.0.21"),
                          ("stor01", "52:54:00:00:00:31", "10.250.0.31")):
        assert f"dhcp-host={mac},{ip},{host},infinite" in text
    assert missing == []  # every server of the example has a MAC on mgmt
    assert "leaf01" not in text  # switches do not network-boot
    assert {p.name for p in written if p.parent.name == "ipxe"} == {
        f"{h}.ipxe" for h in ("cp01", "cp02", "cp03", "dgx01", "dgx02", "stor01")}


def test_a_broken_config_is_caught_by_dnsmasq(tmp_path):
    """The check above can fail: dnsmasq rejects a malformed reservation."""
    bad = tmp_path / "bad.conf"
    bad.write_text("dhcp-host=52:54:00:zz:00:21,10.250.0.21\n")
    proc = subprocess.run(["dnsmasq", "--test", "-C", str(bad)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode != 0


def test_autoinstall_and_ipxe_per_node(tmp_path):
    pxe.render_pxe(load(EXAMPLE), tmp_path, server=IPv4Address("10.250.0.1"),
                   ssh_public_key=KEY)
    raw = (tmp_path / "autoinstall/dgx01/user-data").read_text()
    assert raw.startswith("#cloud-config\n")
    auto = yaml.safe_load(raw)["autoinstall"]
    assert auto["version"] == 1 and auto["user-data"]["hostname"] == "dgx01"
    assert auto["network"]["ethernets"]["boot"]["match"]["macaddress"] == "52:54:00:00:00:21"
    assert auto["network"]["ethernets"]["boot"]["addresses"] == ["10.250.0.21/24"]
    assert any(KEY in c for c in auto["late-commands"])  # the tool's key for root
    assert auto["ssh"]["allow-pw"] is False
    ipxe = (tmp_path / "ipxe/dgx01.ipxe").read_text()
    assert ipxe.startswith("#!ipxe") and "autoinstall/dgx01/" in ipxe


def test_refuses_a_private_key_and_an_outside_server(tmp_path):
    with pytest.raises(RenderError, match="public key"):
        pxe.render_pxe(load(EXAMPLE), tmp_path, server=IPv4Address("10.250.0.1"),
                       ssh_public_key="-----BEGIN OPENSSH PRIVATE KEY-----")
    with pytest.raises(RenderError, match="outside"):
        pxe.render_pxe(load(EXAMPLE), tmp_path, server=IPv4Address("192.0.2.1"))
