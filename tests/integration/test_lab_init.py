"""A lab host boots a real init: systemd is PID 1 of its own PID namespace, sshd is one of
its units, and `down` ends every process of the host and its cgroup sub-tree.

One host on 10.250.<n>.0/24 under a random tag (no running lab uses it), the real
debootstrap'd root (lab/hosts.py), real ssh into it.
"""

from __future__ import annotations

import secrets
import subprocess
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from provisioner.lab import hosts, orphans
from tests.conftest import requires_root

pytestmark = requires_root


def on_host(host: hosts.SshHost, key: Path, command: str) -> str:
    return subprocess.run(
        ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
         f"root@{host.address}", command],
        capture_output=True, text=True, check=False, timeout=60).stdout.strip()


def test_a_lab_host_runs_systemd_and_down_ends_all_of_it(tmp_path):
    tag = secrets.token_hex(4)
    third = secrets.randbelow(200) + 20
    network = IPv4Network(f"10.250.{third}.0/24")
    [host] = hosts.up([("init1", IPv4Address(f"10.250.{third}.5"))], network,
                      IPv4Address(f"10.250.{third}.1"), tmp_path, hosts.ensure_rootfs(), tag,
                      timeout_s=60)
    try:
        key = tmp_path / "id_ed25519"
        assert on_host(host, key, "cat /proc/1/comm") == "systemd"
        # "starting" while late units finish; never "offline" (no systemd) or "degraded"
        state = on_host(host, key, "systemctl is-system-running --wait")
        assert state == "running", on_host(host, key, "systemctl --failed --no-legend")
        active = on_host(host, key, "systemctl is-active lab-sshd chrony dbus "
                                    "systemd-journald").split()
        assert active == ["active"] * 4
        assert on_host(host, key, "systemctl is-enabled systemd-logind") == "masked"
        assert orphans.cgroup_of(host.netns).is_dir()
        listed = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True,
                                text=True, check=True).stdout.split()
        assert len(listed) > 3  # systemd, journald, dbus, chrony, sshd ...
    finally:
        hosts.down([host], tag)
    assert hosts.start_ticks(host.pid) is None
    assert not any(hosts.start_ticks(int(p)) for p in listed)
    assert not orphans.cgroup_of(host.netns).exists()
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert host.netns not in spaces
