"""Every inventory value a connection is opened to is one validated host (or URL) type;
credentials that slip into a message are redacted wherever it leaves the tool; and an
unreachable switch reads as one clean line, with no library's traceback on stderr."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app, configure_logging
from provisioner.console import Console
from provisioner.errors import FabricError, InventoryError, redact
from provisioner.inventory import load
from provisioner.state import StateStore
from tests.conftest import EXAMPLE, ROOT

SECRET = "hunter2"
LEAF = "management: {os: cumulus, credentials: switch}"
BMC = "bmc: {protocol: redfish, address: 10.250.1.21, credentials: bmc}"
VIP = "vip: 10.250.0.250"
ISO = "iso_url: http://10.250.0.1/ubuntu/22.04/ubuntu-22.04.5-live-server-amd64.iso"
SOFTWARE = "software:\n  os: ubuntu-22.04\n"
PROVISIONING = "provisioning:\n"


def _example(tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of the example site (no lab state) with `old` in `file` replaced by `new`."""
    site = tmp_path / "site"
    if not site.exists():
        shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    path = site / file
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return site


# (file, old, a template with {} for the value, the key path the finding names)
FIELDS = {
    "switch management.address": (
        "placements.yaml", LEAF,
        "management: {{os: cumulus, credentials: switch, address: '{}'}}",
        "management.address"),
    "bmc.address": (
        "placements.yaml", BMC,
        "bmc: {{protocol: redfish, address: '{}', credentials: bmc}}", "bmc.address"),
    "execution node address": (
        "site.yaml", PROVISIONING,
        "provisioning:\n  execution: {{nodes: [{{name: ex1, address: '{}'}}]}}\n",
        "execution.nodes[0].address"),
    "ntp server": (
        "site.yaml", SOFTWARE, SOFTWARE + "  sources: {{ntp_servers: ['{}']}}\n",
        "sources.ntp_servers[0]"),
    "kubernetes load balancer": (
        "site.yaml", VIP, "load_balancer: '{}'", "kubernetes.load_balancer"),
}

# Refused by every host field: a login, a shell command, an option, a path, a second word,
# a number that is no IPv4 address, an IPv6 zone (unusable in a Redfish URL).
BAD_HOSTS = [f"admin:{SECRET}@10.250.0.9", "10.250.0.9;reboot", "-oProxyCommand=sh",
             "leaf01/x", "$(id)", "leaf 01", "10.250.0.256", "fe80::1%eth0", "a..b"]


def _refused(site: Path, key_end: str) -> str:
    with pytest.raises(InventoryError) as exc:
        load(site)
    hits = [f for f in exc.value.findings if f.location and f.location.key_path.endswith(key_end)]
    assert hits, [f.format() for f in exc.value.findings]
    assert hits[0].location is not None and hits[0].location.line > 1
    return "\n".join(f.format() for f in exc.value.findings)


@pytest.mark.parametrize("bad", BAD_HOSTS)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_every_connection_field_refuses_what_is_no_host(tmp_path: Path, field: str,
                                                        bad: str) -> None:
    file, old, template, key_end = FIELDS[field]
    shown = _refused(_example(tmp_path, file, old, template.format(bad)), key_end)
    assert SECRET not in shown  # the refusal never repeats the value


@pytest.mark.parametrize("good", ["10.250.0.9", "fd00::9", "leaf01.mgmt.example.com", "LEAF01"])
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_addresses_and_names_pass(tmp_path: Path, field: str, good: str) -> None:
    file, old, template, _ = FIELDS[field]
    if field == "kubernetes load balancer" and ":" in good:
        good = f"[{good}]:6443"  # an IPv6 endpoint is bracketed, with its port
    load(_example(tmp_path, file, old, template.format(good)))


@pytest.mark.parametrize("bad", ["lb.example:0", "lb.example:99999", "[fd00::1]", "fd00::1",
                                 f"admin:{SECRET}@lb.example:6443"])
def test_load_balancer_port_is_checked(tmp_path: Path, bad: str) -> None:
    _refused(_example(tmp_path, "site.yaml", VIP, f"load_balancer: '{bad}'"),
             "kubernetes.load_balancer")


# (file, old, template, key path) of the URL fields; each takes http(s) only but the apt
# mirror and the manifests base, which may also be file:///.
URLS = {
    "iso_url": ("site.yaml", ISO, "iso_url: '{}'", "provisioning.iso_url"),
    "registry_mirror": ("site.yaml", SOFTWARE,
                        SOFTWARE + "  sources: {{registry_mirror: '{}'}}\n",
                        "sources.registry_mirror"),
    "helm_repo": ("site.yaml", SOFTWARE, SOFTWARE + "  sources: {{helm_repo: '{}'}}\n",
                  "sources.helm_repo"),
    "mirror": ("site.yaml", SOFTWARE, SOFTWARE + "  mirror: '{}'\n", "software.mirror"),
}
BAD_URLS = [f"http://admin:{SECRET}@10.250.0.1/x", f"https://{SECRET}@m.example/x",
            "http://-x.example/", "http://m.example:99999/", "http:///x", "ftp://m.example/x",
            "http://m.example;reboot/x"]


@pytest.mark.parametrize("bad", BAD_URLS)
@pytest.mark.parametrize("field", sorted(URLS))
def test_url_fields_take_no_login_and_a_real_host(tmp_path: Path, field: str, bad: str) -> None:
    file, old, template, key_end = URLS[field]
    shown = _refused(_example(tmp_path, file, old, template.format(bad)), key_end)
    assert SECRET not in shown


@pytest.mark.parametrize("field", ["iso_url", "registry_mirror", "helm_repo"])
def test_what_a_daemon_or_bmc_fetches_is_http(tmp_path: Path, field: str) -> None:
    file, old, template, key_end = URLS[field]
    _refused(_example(tmp_path, file, old, template.format("file:///srv/x")), key_end)


def test_urls_that_name_a_host_pass(tmp_path: Path) -> None:
    site = _example(tmp_path, "site.yaml", SOFTWARE, SOFTWARE + (
        "  mirror: 'file:///srv/mirror'\n  sources: {registry_mirror: 'https://[fd00::5]:5000',"
        " helm_repo: 'http://Charts.example:8080/charts'}\n"))
    sources = load(site).site.software.sources
    assert sources.registry_mirror == "https://[fd00::5]:5000"


# ---------------------------------------------------------------- redaction


@pytest.mark.parametrize(("text", "shown"), [
    (f"cannot reach admin:{SECRET}@10.0.0.1:22", "cannot reach ***@10.0.0.1:22"),
    (f"GET http://u:{SECRET}@m.example/x failed", "GET http://***@m.example/x failed"),
    (f"clone https://{SECRET}@git.example/r", "clone https://***@git.example/r"),
    (f"password={SECRET} user=admin", "password=*** user=admin"),
    (f"ansible_become_pass='{SECRET} x' next", "ansible_become_pass='***' next"),
    (f'{{"bmc_password": "{SECRET}", "n": 1}}', '{"bmc_password": "***", "n": 1}'),
    (f"Authorization: Bearer {SECRET}", "Authorization: ***"),
    (f"run --password {SECRET} now", "run --password *** now"),
])
def test_redact_removes_logins_and_secret_pairs(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize("text", [
    "git@github.com:org/repo.git", "ssh admin@10.0.0.1", "[fd00::1]:6443",
    "export PROVISION_BMC_PASSWORD=... before running", "password: {env: X}",
    "http://10.0.0.5:8080/x", "the URL carries a login (user@ or user:password@), which",
])
def test_redact_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


def test_a_redacted_json_document_is_still_json() -> None:
    doc = {"error": f'token="{SECRET}\\"x" at http://a:{SECRET}@h/', "password": f'p"{SECRET}'}
    text = redact(json.dumps(doc))
    assert SECRET not in text
    assert json.loads(text)["password"] == "***"


def test_error_messages_and_hints_are_redacted_at_the_source() -> None:
    exc = FabricError(f"leaf01: cannot reach admin:{SECRET}@10.0.0.1",
                      hint=f"try http://admin:{SECRET}@10.0.0.1/")
    assert SECRET not in str(exc) and SECRET not in exc.message and SECRET not in (exc.hint or "")


def test_the_console_redacts_whatever_it_prints(capsys: pytest.CaptureFixture[str]) -> None:
    out = Console(no_color=True)
    out.out.print(f"leaf01: failed: cannot reach admin:{SECRET}@10.0.0.1:22")
    out.err.print(f"token={SECRET}")
    out.emit_json({"error": f"http://u:{SECRET}@m.example/"})
    got = capsys.readouterr()
    assert SECRET not in got.out + got.err
    assert "***@10.0.0.1:22" in got.out and "token=***" in got.err
    assert json.loads(got.out.split("\n", 1)[1])["error"] == "http://***@m.example/"


def test_the_state_store_keeps_no_login(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    store.record("leaf01", "fabric_push", {"error": f"cannot reach admin:{SECRET}@10.0.0.1"})
    raw = (tmp_path / "state.db").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("state.db-*"))
    assert store.events("leaf01")[-1].detail == {"error": "cannot reach ***@10.0.0.1"}
    assert SECRET.encode() not in raw


# ---------------------------------------------------------------- library loggers


def test_library_loggers_write_nothing_and_debug_redacts(
        capsys: pytest.CaptureFixture[str]) -> None:
    try:
        configure_logging(debug=False)
        logging.getLogger("paramiko.transport").error("Exception (client): banner")
        logging.getLogger("urllib3.connectionpool").warning("Retrying")
        assert capsys.readouterr().err == ""
        configure_logging(debug=True)
        logging.getLogger("paramiko.transport").error(f"auth password={SECRET}")
        err = capsys.readouterr().err
        assert "paramiko.transport: ERROR: auth password=***" in err and SECRET not in err
    finally:
        configure_logging(debug=False)


# ---------------------------------------------------------------- an unreachable switch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _hangs_up() -> Iterator[int]:
    """A loopback port that accepts and closes at once: no SSH server. paramiko logs the
    missing banner with a whole traceback."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = srv.accept()
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            srv.shutdown(socket.SHUT_RDWR)
        srv.close()
        t.join()


def _diff(tmp_path: Path, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    site = _example(tmp_path, "placements.yaml", LEAF, "management: {os: cumulus, credentials:"
                    f" switch, address: 127.0.0.1, port: {port}}}")
    env = {**os.environ, "PROVISION_SWITCH_PASSWORD": SECRET}
    env.pop("PROVISION_SITE", None)
    return subprocess.run([sys.executable, "-m", "provisioner", *extra, "fabric", "diff",
                           str(site), "--limit", "leaf01"],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def _assert_clean(r: subprocess.CompletedProcess[str], port: int, why: str) -> None:
    assert r.returncode == 10, r.stdout + r.stderr  # exit 10: a switch failed (fabric)
    assert "Traceback" not in r.stderr and "paramiko" not in r.stderr.lower(), r.stderr
    assert "SSHException" not in r.stdout + r.stderr and SECRET not in r.stdout + r.stderr
    assert f"leaf01 (cumulus): failed: leaf01: cannot reach 127.0.0.1:{port} over SSH: {why}" \
        in r.stdout, r.stdout


def test_a_switch_port_with_nothing_listening(tmp_path: Path) -> None:
    port = _free_port()
    _assert_clean(_diff(tmp_path, port), port, "connection refused")


def test_a_switch_port_without_ssh_prints_no_library_traceback(tmp_path: Path) -> None:
    with _hangs_up() as port:
        r = _diff(tmp_path, port)
    _assert_clean(r, port, "the peer closed the connection")


def test_debug_shows_library_records_redacted(tmp_path: Path) -> None:
    with _hangs_up() as port:
        r = _diff(tmp_path, port, "--debug")
    assert r.returncode == 10 and "paramiko.transport: " in r.stderr, r.stderr
    assert SECRET not in r.stdout + r.stderr


def test_validate_refuses_a_login_in_a_switch_address_and_never_prints_it(
        tmp_path: Path) -> None:
    site = _example(tmp_path, "placements.yaml", LEAF, "management: {os: cumulus, credentials:"
                    f" switch, address: 'admin:{SECRET}@10.250.0.2'}}")
    r = CliRunner().invoke(app, ["validate", str(site)])
    assert r.exit_code == 3, r.output
    assert "management.address" in r.output and SECRET not in r.output
