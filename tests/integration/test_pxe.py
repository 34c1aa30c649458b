"""Network-boot rendering checked by the real dnsmasq (`dnsmasq --test`), and the
autoinstall data parsed back."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml

from provisioner import boot
from provisioner.errors import ConfigError, RenderError
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.render import pxe
from tests.conftest import EXAMPLE, ROOT, requires_dnsmasq, requires_peer, requires_root

pytestmark = [pytest.mark.integration,
              requires_dnsmasq]
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


# ---------------------------------------------------------------- pxe serve, for real

CLIENT = r"""
import hashlib, http.client, socket, struct, sys, urllib.request, urllib.error
mac = bytes.fromhex(sys.argv[1].replace(":", ""))
pkt = struct.pack("!BBBBIHH4s4s4s4s16s64s128sI", 1, 1, 6, 0, 0x1234ABCD, 0, 0x8000,
                  b"\0" * 4, b"\0" * 4, b"\0" * 4, b"\0" * 4, mac.ljust(16, b"\0"),
                  b"\0" * 64, b"\0" * 128, 0x63825363) + bytes([53, 1, 1, 255])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 68))
s.settimeout(3)
offer = None
for _ in range(5):
    s.sendto(pkt, ("255.255.255.255", 67))
    try:
        data, _ = s.recvfrom(2048)
    except socket.timeout:
        continue
    if data[4:8] == pkt[4:8]:
        offer = socket.inet_ntoa(data[16:20])
        break
print("offer", offer)
for path in ("/ipxe/dgx01.ipxe", "/dnsmasq.conf", "/autoinstall/dgx01/user-data",
             "/hostkeys/dgx01/ssh_host_ed25519_key"):
    try:
        with urllib.request.urlopen("http://10.250.0.1:8080" + path, timeout=5) as r:
            print("http", path, r.status, r.read().decode().splitlines()[0])
    except urllib.error.HTTPError as e:
        print("http", path, e.code)
# What the iPXE script names, fetched as iPXE would: kernel, initrd, the ISO for url=.
script = urllib.request.urlopen("http://10.250.0.1:8080/ipxe/dgx01.ipxe", timeout=5).read()
for line in script.decode().splitlines():
    words = line.split()
    urls = [w for w in words if w.startswith(("http://", "url=http://"))]
    if words and words[0] in ("kernel", "initrd"):
        for url in urls:
            url = url.removeprefix("url=")
            with urllib.request.urlopen(url, timeout=5) as r:
                print("fetched", url, hashlib.sha256(r.read()).hexdigest())
# TFTP (RFC 1350), as firmware without iPXE does: the iPXE loader dnsmasq offers.
t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t.settimeout(5)
t.sendto(b"\0\1undionly.kpxe\0octet\0", ("10.250.0.1", 69))
got, expect = b"", 1
while True:
    data, peer = t.recvfrom(4 + 512)
    op, block = struct.unpack("!HH", data[:4])
    if op != 3:
        print("tftp error", data[4:].decode(errors="replace"))
        break
    if block == expect:
        got += data[4:]
        expect += 1
    t.sendto(struct.pack("!HH", 4, block), peer)
    if len(data) < 4 + 512:
        print("tftp undionly.kpxe", hashlib.sha256(got).hexdigest())
        break
# The node's own address (the DHCP reservation) gets its autoinstall data.
conn = http.client.HTTPConnection("10.250.0.1", 8080, timeout=5,
                                  source_address=("10.250.0.21", 0))
conn.request("GET", "/autoinstall/dgx01/user-data")
resp = conn.getresponse()
print("own", resp.status, resp.read().decode().splitlines()[0])
"""


requires_xorriso = requires_peer(shutil.which("xorriso"), "xorriso not installed "
                                 "(scripts/bootstrap.sh installs it)")
requires_ipxe = requires_peer(any((d / "undionly.kpxe").is_file() for d in boot.IPXE_DIRS),
                              "the ipxe package (iPXE loaders) is not installed "
                              "(scripts/bootstrap.sh installs it)")


def _live_iso(tmp_path: Path, info: str) -> tuple[Path, dict[str, str]]:
    """An ISO 9660 image (Rock Ridge + Joliet, written by xorriso) laid out as an Ubuntu
    live-server ISO: .disk/info, casper/vmlinuz, casper/initrd (random bytes: nothing boots
    them here, the test checks they are served as they are). Returns it and their sha256."""
    tree = tmp_path / "isotree"
    (tree / "casper").mkdir(parents=True)
    (tree / ".disk").mkdir()
    (tree / ".disk/info").write_text(info)
    sums = {}
    for name, size in (("vmlinuz", 300_000), ("initrd", 700_000)):
        data = os.urandom(size)
        (tree / "casper" / name).write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    iso = tmp_path / "live-server.iso"
    subprocess.run(["xorriso", "-as", "mkisofs", "-R", "-J", "-V", "Ubuntu-Server",
                    "-o", str(iso), str(tree)], check=True, capture_output=True, timeout=60)
    return iso, sums


@contextmanager
def _boot_network() -> Iterator[tuple[str, str]]:
    """Two namespaces of this test's own on a veth pair: the boot server's at 10.250.0.1
    and a client's holding 10.250.0.200 (no node's) and 10.250.0.21 (dgx01's
    reservation), with dgx01's MAC. Yields their names; both are deleted after."""
    tag = f"{os.getpid() % 10000:04d}"
    srv, cli = f"pvxs{tag}", f"pvxc{tag}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, timeout=30)

    ip("netns", "add", srv)
    ip("netns", "add", cli)
    try:
        ip("-n", srv, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
           "netns", cli)
        ip("-n", cli, "link", "set", "eth0", "address", "52:54:00:00:00:21")
        ip("-n", srv, "addr", "add", "10.250.0.1/24", "dev", "eth0")
        ip("-n", cli, "addr", "add", "10.250.0.200/24", "dev", "eth0")
        ip("-n", cli, "addr", "add", "10.250.0.21/24", "dev", "eth0")  # its reservation
        for ns in (srv, cli):
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", cli, "route", "add", "default", "dev", "eth0")  # for the DHCP broadcast
        yield srv, cli
    finally:
        subprocess.run(["ip", "netns", "del", srv], check=False, timeout=30)
        subprocess.run(["ip", "netns", "del", cli], check=False, timeout=30)


@requires_xorriso
def test_stage_iso_takes_the_installer_of_the_right_release_only(tmp_path):
    iso, sums = _live_iso(tmp_path, 'Ubuntu-Server 24.04.1 LTS "Noble Numbat" - amd64')
    with pytest.raises(ConfigError, match=r"not Ubuntu 22\.04"):
        boot.stage_iso(iso, tmp_path / "jammy", "22.04")
    info = boot.stage_iso(iso, tmp_path / "noble", "24.04")
    assert info.startswith("Ubuntu-Server 24.04.1")
    for name, digest in sums.items():
        assert hashlib.sha256((tmp_path / "noble" / name).read_bytes()).hexdigest() == digest
    assert (tmp_path / "noble/installer.iso").resolve() == iso.resolve()
    (tmp_path / "not.iso").write_bytes(b"\0" * 70_000)
    with pytest.raises(ConfigError, match="not an ISO 9660 image"):
        boot.stage_iso(tmp_path / "not.iso", tmp_path / "x", "24.04")


@requires_root
@requires_xorriso
@requires_ipxe
def test_pxe_serve_answers_dhcp_by_mac_and_serves_the_installer(tmp_path):
    """`provision pxe serve --iso` in a namespace of its own; a second namespace plays the
    node with dgx01's MAC: dnsmasq offers dgx01's reserved address and the iPXE loader over
    TFTP; the HTTP server hands out its iPXE script, the kernel and initrd taken from the ISO
    and the ISO itself (what the script names), its autoinstall data to its own address
    only, and nothing outside the boot files."""
    iso, sums = _live_iso(tmp_path, 'Ubuntu-Server 22.04.5 LTS "Jammy Jellyfish" - amd64')
    serve = None
    with _boot_network() as (srv, cli):
        try:
            serve = subprocess.Popen(
                ["ip", "netns", "exec", srv, sys.executable, "-m", "provisioner", "pxe", "serve",
                 str(EXAMPLE), "--out", str(tmp_path / "pxe"), "--server", "10.250.0.1",
                 "--interface", "eth0", "--http-port", "8080", "--iso", str(iso)],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 30
            log = tmp_path / "pxe" / "dnsmasq.log"
            while time.monotonic() < deadline and not (log.exists() and "DHCP" in log.read_text()):
                assert serve.poll() is None, serve.stdout.read() if serve.stdout else ""
                time.sleep(0.1)
            proc = subprocess.run(["ip", "netns", "exec", cli, sys.executable, "-c", CLIENT,
                                   "52:54:00:00:00:21"], capture_output=True, text=True,
                                  timeout=60, check=False)
            assert "offer 10.250.0.21" in proc.stdout, proc.stdout + proc.stderr + log.read_text()
            assert "http /ipxe/dgx01.ipxe 200 #!ipxe" in proc.stdout
            assert "http /dnsmasq.conf 404" in proc.stdout
            assert "http /hostkeys/dgx01/ssh_host_ed25519_key 404" in proc.stdout
            assert "http /autoinstall/dgx01/user-data 403" in proc.stdout  # from .200
            assert "own 200 #cloud-config" in proc.stdout  # from .21, dgx01's address
            root = "http://10.250.0.1:8080/ubuntu/jammy"
            assert f"fetched {root}/vmlinuz {sums['vmlinuz']}" in proc.stdout
            assert f"fetched {root}/initrd {sums['initrd']}" in proc.stdout
            loader = next(d / "undionly.kpxe" for d in boot.IPXE_DIRS
                          if (d / "undionly.kpxe").is_file())
            assert f"tftp undionly.kpxe {hashlib.sha256(loader.read_bytes()).hexdigest()}" \
                in proc.stdout, proc.stdout + log.read_text()[-2000:]
            iso_sum = hashlib.sha256(iso.read_bytes()).hexdigest()
            assert f"fetched {root}/installer.iso {iso_sum}" in proc.stdout
            pid = int((tmp_path / "pxe" / "dnsmasq.pid").read_text())
            serve.send_signal(signal.SIGTERM)
            out, _ = serve.communicate(timeout=30)
            assert serve.returncode == 0, out
            assert "serving boot files at http://10.250.0.1:8080/ipxe/" in out and "stopped" in out
            assert not Path(f"/proc/{pid}").exists()  # dnsmasq stopped with it
        finally:
            if serve is not None and serve.poll() is None:
                serve.kill()
                serve.wait(timeout=10)


HOSTILE = r"""
import http.client, sys, time
source, paths = sys.argv[1], sys.argv[2:]
for _ in range(100):  # until the server in the other namespace listens
    try:
        http.client.HTTPConnection("10.250.0.1", 8080, timeout=2).connect()
        break
    except OSError:
        time.sleep(0.1)
for path in paths:
    conn = http.client.HTTPConnection("10.250.0.1", 8080, timeout=5,
                                      source_address=(source, 0))
    conn.putrequest("GET", path, skip_accept_encoding=True)  # sent as written, not cleaned
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    leaks = [w for w in (b"PRIVATE KEY", b"#cloud-config", b"Directory listing", b"dhcp-host")
             if w in body]
    said = ",".join(w.decode().replace(" ", "_") for w in leaks) or "-"
    print("got", source, path, resp.status, said)
"""

# Requests that named another node's secrets through the decoded path while the owner check
# read the raw one (`..` percent-encoded), listed directories, or left the served prefixes.
CLIMBS = ("/ipxe/%2e%2e/autoinstall/dgx01/user-data",
          "/ipxe/%2E%2E/hostkeys/dgx01/ssh_host_ed25519_key",
          "/ipxe/%2e%2e/", "/ipxe/", "/autoinstall/", "/autoinstall/dgx01/",
          "/ipxe/..%2fautoinstall/dgx02/user-data", "/ubuntu/%2e%2e/dnsmasq.conf",
          "/ipxe/%2e%2e/hostkeys/", "//autoinstall/dgx01/user-data")


@requires_root
def test_boot_server_gives_no_secret_to_a_hostile_client(tmp_path):
    """`pxe serve --no-dhcp` in a namespace; from another namespace, an address that is no
    node's sends the climbing requests, and dgx01's own address asks for dgx02's data
    through an encoded `..`: every one is refused and no body carries a key, autoinstall
    data, a directory listing or the DHCP config. dgx01 still gets its own data."""
    serve = None
    with _boot_network() as (srv, cli):
        try:
            serve = subprocess.Popen(
                ["ip", "netns", "exec", srv, sys.executable, "-m", "provisioner", "pxe",
                 "serve", str(EXAMPLE), "--out", str(tmp_path / "pxe"), "--server",
                 "10.250.0.1", "--interface", "eth0", "--http-port", "8080", "--no-dhcp"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

            def ask(source: str, *paths: str) -> list[list[str]]:
                proc = subprocess.run(["ip", "netns", "exec", cli, sys.executable, "-c",
                                       HOSTILE, source, *paths], capture_output=True,
                                      text=True, timeout=120, check=False)
                assert proc.returncode == 0, proc.stdout + proc.stderr
                return [line.split() for line in proc.stdout.splitlines()]

            stranger = ask("10.250.0.200", *CLIMBS, "/autoinstall/dgx01/user-data")
            assert [r[2] for r in stranger] == [*CLIMBS, "/autoinstall/dgx01/user-data"]
            # http.server itself folds a leading "//" to "/": that one meets the owner check
            assert [r[3] for r in stranger] == ["404"] * (len(CLIMBS) - 1) + ["403", "403"], \
                stranger
            assert all(r[4] == "-" for r in stranger), stranger
            own = ask("10.250.0.21", "/autoinstall/dgx01/%2e%2e/dgx02/user-data",
                      "/autoinstall/dgx01/user-data", "/ipxe/dgx01.ipxe")
            assert [r[3:] for r in own] == [["404", "-"], ["200", "PRIVATE_KEY,#cloud-config"],
                                            ["200", "-"]], own  # its own key, to it alone
            assert (tmp_path / "pxe" / "hostkeys" / "dgx01").is_dir()  # the secrets exist
        finally:
            if serve is not None and serve.poll() is None:
                serve.send_signal(signal.SIGTERM)
                serve.wait(timeout=30)
