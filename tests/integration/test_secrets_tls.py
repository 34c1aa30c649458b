"""Secrets never leak (logs, exceptions, --json, process list); TLS verifies by default and
pins a fingerprint for a self-signed BMC."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from provisioner import bmc
from provisioner.bmc.base import BmcTarget, PowerState
from provisioner.bmc.probe import redfish_root
from provisioner.errors import BmcError, BmcUnreachable
from provisioner.inventory.models import Tls
from provisioner.secrets import Secret, write_private
from tests.conftest import ROOT
from tests.integration.conftest import requires_ipmi_sim

pytestmark = pytest.mark.integration


def _cmdlines() -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                out.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace"))
            except OSError:
                continue
    return out


@requires_ipmi_sim
def test_no_password_in_logs_exceptions_json_or_process_list(lab, caplog):
    password = Path(lab.site.credentials["lab-bmc"].password.file).read_text().strip()
    assert len(password) >= 12
    caplog.set_level(logging.DEBUG)

    # 1. in-process, including failures: every error message and repr is clean
    targets = bmc.targets(lab, os.environ)
    good = bmc.run_many(targets, lambda d: d.hardware_facts(), bmc.make_driver)
    dead = [replace(t, port=1, request_timeout_s=1) for t in targets[:2]]
    bad = bmc.run_many(dead, lambda d: d.get_power_state(), bmc.make_driver, node_timeout_s=20)
    assert all(r.ok for r in good) and not any(r.ok for r in bad)
    texts = [repr(r) for r in good + bad] + [repr(t) for t in targets] + [caplog.text]
    for t in targets[:1]:
        try:
            bmc.make_driver(replace(t, port=1, request_timeout_s=1)).get_power_state()
        except BmcError as exc:
            texts += [str(exc), repr(exc), repr(exc.__dict__)]
    assert not [t for t in texts if password in t]

    # 2. the real CLI with --json and --debug, while watching every process's command line
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.extend(c for c in _cmdlines() if password in c)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        outs = []
        for args in (["bmc", "status", str(lab.root), "--json"],
                     ["--debug", "bmc", "inventory", str(lab.root), "--json"],
                     ["bmc", "pxe", str(lab.root)]):
            proc = subprocess.run([sys.executable, "-m", "provisioner", *args], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120, check=False)
            outs.append(proc.stdout + proc.stderr)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        json.loads(outs[0])
    finally:
        stop.set()
        watcher.join()
    assert seen == []
    assert not [o for o in outs if password in o]
    # the lab's own processes get the password through 0600 files, not argv
    lab_files = [p for p in (lab.root / ".provision/lab").rglob("*")
                 if p.is_file() and password.encode() in p.read_bytes()]
    assert lab_files and all(p.stat().st_mode & 0o077 == 0 for p in lab_files)


# ---------------------------------------------------------------- TLS


def _self_signed(tmp: Path) -> tuple[Path, Path, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bmc.lab")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    crt, pem_key = tmp / "bmc.crt", tmp / "bmc.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_private(pem_key, key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode())
    der = cert.public_bytes(serialization.Encoding.DER)
    fp = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    return crt, pem_key, fp


@pytest.fixture
def tls_bmc(tmp_path):
    """sushy-tools over HTTPS with a self-signed certificate, basic auth."""
    import bcrypt

    crt, key, fp = _self_signed(tmp_path)
    htpasswd = tmp_path / "htpasswd"
    write_private(htpasswd, "admin:" + bcrypt.hashpw(b"tls-pass-1", bcrypt.gensalt(4)).decode())
    conf = tmp_path / "emu.conf"
    conf.write_text("SUSHY_EMULATOR_FAKE_DRIVER = True\n"
                    f"SUSHY_EMULATOR_STATE_DIR = {str(tmp_path / 'state')!r}\n"
                    f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
                    "SUSHY_EMULATOR_FAKE_SYSTEMS = [{'uuid': '0b1c2d3e-0000-4000-8000-"
                    "000000000001', 'name': 'tls01', 'power_state': 'On', 'nics': []}]\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "sushy_tools.emulator.main", "--config",
                             str(conf), "-i", "127.0.0.1", "-p", str(port),
                             "--ssl-certificate", str(crt), "--ssl-key", str(key)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield BmcTarget(node="tls01", protocol="redfish", address="127.0.0.1", port=port,
                        username="admin", password=Secret("tls-pass-1"),
                        system_id="0b1c2d3e-0000-4000-8000-000000000001",
                        request_timeout_s=5), crt, fp
    finally:
        proc.terminate()
        proc.wait(10)


def test_tls_verifies_by_default_and_refuses_a_self_signed_bmc(tls_bmc):
    target, _, _ = tls_bmc
    with pytest.raises(BmcUnreachable) as exc:
        bmc.make_driver(target).get_power_state()
    assert "TLS verification" in str(exc.value) and "fingerprint_sha256" in str(exc.value)
    assert not exc.value.transient  # a bad certificate is not retried


def test_tls_pinned_fingerprint_and_ca_bundle(tls_bmc):
    target, crt, fp = tls_bmc
    pinned = replace(target, tls=Tls(fingerprint_sha256=fp))
    assert bmc.make_driver(pinned).get_power_state() is PowerState.ON
    wrong = replace(target, tls=Tls(fingerprint_sha256=fp[:-2] + ("00" if fp[-2:] != "00"
                                                                      else "11")))
    with pytest.raises(BmcUnreachable, match="TLS verification"):
        bmc.make_driver(wrong).get_power_state()
    bundle = replace(target, tls=Tls(ca_bundle=str(crt)))
    assert bmc.make_driver(bundle).get_power_state() is PowerState.ON


def test_an_environment_proxy_never_carries_a_bmc_login(tls_bmc, monkeypatch):
    """A controller's HTTPS_PROXY (set for its internet egress) is not used for BMCs:
    through it, requests' proxy pool would skip the pinned fingerprint and send the login to
    an unverified endpoint. The proxy here listens nowhere: a request sent to it fails."""
    target, _, fp = tls_bmc
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed when the block ends: nothing listens there
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{dead}")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    pinned = replace(target, tls=Tls(fingerprint_sha256=fp))
    assert bmc.make_driver(pinned).get_power_state() is PowerState.ON  # direct, pinned
    wrong = replace(target, tls=Tls(fingerprint_sha256="00" * 32))
    with pytest.raises(BmcUnreachable, match="TLS verification"):
        bmc.make_driver(wrong).get_power_state()
    # discovery's probe of the service root goes direct too
    root = redfish_root("127.0.0.1", target.port, "https", 5)
    assert root is not None and root.version


def test_debug_does_not_silence_the_tls_warning(tls_bmc, tmp_path):
    """tls.verify false: validate warns, and the run itself still prints urllib3's
    InsecureRequestWarning, with --debug too."""
    target, _, _ = tls_bmc
    site = tmp_path / "site.yaml"
    site.write_text(
        "site: {name: tlswarn, ssh: {authorized_keys: ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA"
        "IGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc admin@example']}}\n"
        "credentials:\n  bmc: {username: admin, password: {env: TLS_BMC_PW}}\n"
        "software: {nvidia_driver: {branch: '570'}}\n"  # a valid site: every command checks
        "racks:\n  - {name: r01, feeds: [{name: A, phase: single, voltage_v: 230,"
        " breaker_a: 16}], cooling_kw: 10}\n"
        "placements:\n  - rack: r01\n    u: 1\n    block: vgpu-1u\n    nodes:\n"
        "      - hostname: tls01\n"
        f"        bmc: {{protocol: redfish, address: 127.0.0.1, port: {target.port},"
        f" credentials: bmc, system_id: {target.system_id}, tls: {{verify: false}}}}\n")
    env = {**os.environ, "TLS_BMC_PW": "tls-pass-1"}
    env.pop("PROVISION_SITE", None)
    cmd = [sys.executable, "-m", "provisioner"]
    val = subprocess.run([*cmd, "validate", str(site), "--json"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=60)
    codes = [w["code"] for w in json.loads(val.stdout)["warnings"]]
    assert "bmc-tls-unverified" in codes
    for extra in ([], ["--debug"]):
        r = subprocess.run([*cmd, *extra, "bmc", "status", str(site)], capture_output=True,
                           text=True, env=env, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr[-800:]
        assert "InsecureRequestWarning" in r.stderr, (extra, r.stderr[-800:])
        assert "tls-pass-1" not in r.stdout + r.stderr
