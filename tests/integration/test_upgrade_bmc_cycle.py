"""The upgrade's reboot when the OS does not come back: the reboot playbook fails on the
node (nothing answers SSH at its address), so the installer power cycles it through its
BMC, a real sushy-tools Redfish emulator, then waits for the OS (which still does not
answer: the node fails with that reason). The emulator's own change notifications (its
fake driver PUTs the system to EXTERNAL_NOTIFICATION_URL on every change) show the cycle
reached it; the run's event log records both steps. The emulator and a closed SSH port on
127.0.0.1, started here.

The second test has the node's OS come back after the cycle: a lab host (systemd, sshd)
booted at the node's address once the emulator reports the cycle, as the node's hardware
would; the node then passes the reboot step."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from provisioner.lab import hosts, rootfs
from provisioner.lab.emulators import write_sushy_config
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.workflows.engine import Journal
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import requires_ssh_hosts, scratch_lab_network

pytestmark = pytest.mark.integration
SYSTEM = "0b1c2d3e-0000-4000-8000-000000000042"
PASSWORD = "cycle-pass-1"  # a test value; never in notes or reasons
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc a@b"


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Notifications(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]]

    def do_PUT(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self.seen.append(json.loads(self.rfile.read(n)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """sushy-tools (fake driver) with one system, powered on, notifying a local receiver."""
    seen: list[dict[str, Any]] = []
    rx = ThreadingHTTPServer(("127.0.0.1", 0), type("N", (Notifications,), {"seen": seen}))
    threading.Thread(target=rx.serve_forever, daemon=True).start()
    rdir = tmp_path / "emu"
    rdir.mkdir()
    conf = tmp_path / "emu.conf"
    write_sushy_config(rdir, conf, PASSWORD, [{"uuid": SYSTEM, "name": "gpu01",
                                               "power_state": "On", "nics": [],
                                               "external_notifier": True}], "admin")
    with conf.open("a") as f:
        f.write(f"EXTERNAL_NOTIFICATION_URL = 'http://127.0.0.1:{rx.server_address[1]}/'\n")
    port = free_port()
    with (tmp_path / "emu.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sushy_tools.emulator.main",
                                 "--config", str(conf), "-i", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        while proc.poll() is None:  # until it listens (or dies: the test then fails)
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "emu.log").read_text()[-2000:]
        yield port, seen
    finally:
        proc.terminate()
        proc.wait(30)
        rx.shutdown()
        rx.server_close()


def write_site(tmp_path: Path, port: int, ssh: str, cidr: str, address: str) -> Path:
    """A one-node site: gpu01 at `address`, its BMC the emulator on `port`."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "site.yaml").write_text(f"""\
site:
  name: bmccycle
  ssh: {ssh}
provisioning: {{os_timeout_s: 1}}
credentials:
  bmc: {{username: admin, password: {{env: CYCLE_BMC_PW}}}}
networks:
  - {{name: mgmt, kind: management, cidr: {cidr}}}
racks:
  - {{name: r01, feeds: [{{name: A, phase: single, voltage_v: 230, breaker_a: 16}}],
     cooling_kw: 10}}
placements:
  - rack: r01
    u: 1
    block: vgpu-1u
    nodes:
      - hostname: gpu01
        addresses: {{mgmt: {address}}}
        bmc: {{protocol: redfish, address: 127.0.0.1, port: {port}, scheme: http,
               credentials: bmc, system_id: {SYSTEM}}}
""")
    return site


def installer(site: Path, *, lab: bool) -> tuple[Any, StateStore]:
    loaded = load(site)
    profile = for_site(loaded, lab=lab)
    store = StateStore(profile.state_path)
    store.enroll(["gpu01"])
    journal = Journal(store, store.start_run("upgrade apply (test)"), None)
    return apply_mod.ansible_installer(loaded, profile, {"CYCLE_BMC_PW": PASSWORD}, "next",
                                       journal), store


def power_states(seen: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(s["power_state"], (s.get("pending_power") or {}).get("power_state"))
            for s in seen]


def cycled(states: list[tuple[str, str | None]]) -> bool:
    """The emulator went off, then on again."""
    off = ("Off", None)
    return off in states and ("On", None) in states[states.index(off):]


def assert_cycle_noted(store: StateStore, out: dict[str, str | None]) -> None:
    """Two notes on gpu01 (the OS reboot failed; the BMC power cycle), no password."""
    notes = [e.detail["note"] for e in store.events() if e.kind == "note"]
    assert len(notes) == 2 and all(e.hostname == "gpu01" for e in store.events()
                                   if e.kind == "note"), notes
    assert notes[0].startswith("reboot through the OS failed (upgrade_reboot.yml: ")
    assert notes[0].endswith("; power cycle through the BMC")
    assert notes[1].startswith("power cycled through the BMC (redfish); power is on")
    assert PASSWORD not in json.dumps([e.detail for e in store.events()]) + str(out)


@pytest.mark.beside_the_lab  # loopback only: the emulator and a closed port
def test_os_not_back_after_reboot_power_cycles_through_the_bmc(bmc: Any,
                                                               tmp_path: Path) -> None:
    port, seen = bmc
    site = write_site(tmp_path, port, f"{{port: {free_port()}, authorized_keys: ['{KEY}']}}",
                      "127.0.0.0/8", "127.0.0.1")
    inst, store = installer(site, lab=False)
    out = inst.reboot(["gpu01"])

    # The OS still does not answer after the cycle: the node fails, saying so.
    assert "no OS answered on 127.0.0.1 1 s after the BMC power cycle" in (out["gpu01"] or "")
    # The cycle reached the emulator: off, then on (the driver saw each before the next
    # request, and the OS wait began after the last).
    states = power_states(seen)
    assert cycled(states) and states[-1] == ("On", None), states
    assert_cycle_noted(store, out)


@requires_ssh_hosts
def test_the_os_comes_back_after_the_bmc_cycle(bmc: Any, tmp_path: Path) -> None:
    """The node is off when the reboot step runs (nothing answers at its address: the
    playbook fails); once the emulator reports the cycle, its "hardware" boots: a lab host
    (systemd, sshd, the install marker; lab/hosts.py) at the node's address. The installer
    power cycles through the BMC, waits, finds the OS and the node passes the step."""
    port, seen = bmc
    network, gateway, address = scratch_lab_network()
    work, tag = tmp_path / "hosts", secrets.token_hex(4)
    work.mkdir()
    key = work / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    site = write_site(tmp_path, port, f"{{user: root, private_key_file: {key}, "
                      f"authorized_keys: ['{KEY}']}}", str(network), str(address))
    assert hosts.up([], network, gateway, work, rootfs.ensure_rootfs(), tag) == []  # bridge
    booted: list[hosts.SshHost] = []
    stop = threading.Event()

    def reset_done() -> bool:
        return cycled(power_states(seen))

    def hardware() -> None:
        """Powers the node's OS on once the BMC's cycle has reached the emulator."""
        while not reset_done():
            if stop.wait(0.1):
                return
        booted.append(hosts.add_host("gpu01", address, network, gateway, work,
                                     rootfs.ensure_rootfs(), tag, 0, timeout_s=60))

    machine = threading.Thread(target=hardware, daemon=True)
    machine.start()
    try:
        inst, store = installer(site, lab=True)
        out = inst.reboot(["gpu01"])
        assert booted, "the emulator never reported the node on after a cycle"
        assert out == {"gpu01": None}, out  # the OS came back: the step passed
        states = power_states(seen)
        assert cycled(states) and states[-1] == ("On", None), states
        assert_cycle_noted(store, out)
    finally:
        stop.set()
        machine.join(60)
        hosts.down(booted, tag)
