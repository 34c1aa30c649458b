"""Values that reach a command line, a URL or a rendered file are checked at load; each
refusal names file:line and the key."""

from __future__ import annotations

import pytest

from provisioner.errors import InventoryError
from provisioner.inventory import load
from tests.conftest import FIXTURES

VALID = (FIXTURES / "valid_small.yaml").read_text()
GPU01 = "      - hostname: gpu01\n"
BMC = "bmc: {protocol: redfish, address: 10.2.0.11, credentials: bmc}"
K8S = 'kubernetes: {version: "1.31.4"}'


def _site(labels: str = "", bmc: str = BMC, k8s: str = K8S, software: str = "") -> str:
    assert GPU01 in VALID and BMC in VALID and K8S in VALID
    text = VALID.replace(BMC, bmc).replace(K8S, k8s)
    if labels:
        text = text.replace(GPU01, GPU01 + f"        labels: {labels}\n")
    if software:
        text = text.replace("software:\n", f"software:\n  {software}\n")
    return text


def _refusal(write_site, text: str, key_end: str):
    with pytest.raises(InventoryError) as exc:
        load(write_site(text))
    f = exc.value.findings[0]
    assert f.location.key_path.endswith(key_end), f.format()
    assert f.location.file.endswith("site.yaml") and f.location.line > 1
    return f


@pytest.mark.parametrize("labels", [
    '{"example.com/tier": "gold"}', '{tier: ""}', '{a.b_c-d: "x.y-z_1"}',
    '{"k8s.io/x": "' + "v" * 63 + '"}', '{"' + "n" * 63 + '": v}',
])
def test_valid_labels(write_site, labels):
    load(write_site(_site(labels=labels)))


@pytest.mark.parametrize(("labels", "key_end"), [
    ('{"bad key": v}', "labels.bad key"),
    ('{"-x": v}', "labels.-x"),
    ('{"Example.com/x": v}', "labels.Example.com/x"),
    ('{"/x": v}', "labels./x"),
    ('{"' + "n" * 64 + '": v}', "labels." + "n" * 64),
    ('{tier: "gold; rm -rf /"}', "labels.tier"),
    ('{tier: "' + "v" * 64 + '"}', "labels.tier"),
    ("{tier: -x}", "labels.tier"),
    ("{tier: true}", "labels.tier"),
])
def test_invalid_labels_are_refused_with_file_line_and_key(write_site, labels, key_end):
    f = _refusal(write_site, _site(labels=labels), key_end)
    assert "label" in f.message or "text" in f.message
    assert f.location.line == _site(labels=labels).split("\n").index(
        f"        labels: {labels}") + 1


@pytest.mark.parametrize("version", ['"1.31"', '"1"', '"v1.31.4"', '"1.31.4.1"', "1.31",
                                     '"1.31.4 --x"'])
def test_kubernetes_version_is_x_y_z(write_site, version):
    f = _refusal(write_site, _site(k8s=f"kubernetes: {{version: {version}}}"),
                 "kubernetes.version")
    assert "Kubernetes version" in f.message


@pytest.mark.parametrize(("bmc", "key_end"), [
    ("{protocol: redfish, address: 'evil.example/x', credentials: bmc}", "bmc.address"),
    ("{protocol: redfish, address: 'user@evil.example', credentials: bmc}", "bmc.address"),
    ("{protocol: redfish, address: 10.2.0.11, credentials: bmc, system_id: ../x}",
     "bmc.system_id"),
    ("{protocol: redfish, address: 10.2.0.11, credentials: bmc, system_id: '..'}",
     "bmc.system_id"),
])
def test_bmc_url_parts(write_site, bmc, key_end):
    _refusal(write_site, _site(bmc=f"bmc: {bmc}"), key_end)


def test_bmc_ipv6_and_names_are_fine(write_site):
    for addr in ("'fd00::11'", "bmc-01.example.com", "'::1'"):
        load(write_site(_site(bmc=f"bmc: {{protocol: redfish, address: {addr}, "
                                  "credentials: bmc, system_id: System.Embedded.1}")))


@pytest.mark.parametrize(("software", "key_end"), [
    ("mirror: 'http://m.example/ubuntu jammy main'", "software.mirror"),
    ("mirror: 'ftp://m.example/ubuntu'", "software.mirror"),
])
def test_mirror_is_one_url(write_site, software, key_end):
    _refusal(write_site, _site(software=software), key_end)


def test_mirror_urls_accepted(write_site):
    for url in ("http://10.0.0.5/ubuntu", "https://m.example:8443/u?x=1", "file:///srv/mirror"):
        assert load(write_site(_site(software=f"mirror: '{url}'"))).site.software.mirror == url


def test_gpu_model_must_be_a_label_value(write_site):
    assert "catalog:" not in VALID
    text = VALID + ("catalog:\n  - {name: odd-gpu, kind: gpu_server, rack_units: 2, "
                    "max_power_w: 1000, typical_power_w: 800,\n"
                    "     gpu: {model: 'H100 SXM; reboot', count: 8, architecture: hopper}}\n")
    _refusal(write_site, text, "gpu.model")


def test_ssh_key_path_and_username(write_site):
    text = VALID.replace("ssh: {authorized_keys:", "ssh: {private_key_file: "
                         "'id key -oProxyCommand=x', authorized_keys:")
    assert text != VALID
    _refusal(write_site, text, "ssh.private_key_file")
    text = VALID.replace("username: admin", 'username: "ad\\nmin"')
    assert text != VALID
    _refusal(write_site, text, "username")
