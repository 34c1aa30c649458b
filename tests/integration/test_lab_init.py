"""A lab host boots a real init: systemd is PID 1 of its own PID namespace, sshd is one of
its units, `shutdown -r` (what Ansible's reboot module runs) reboots it on the same disk, a
host that reboots at every boot is left off, and `down` ends every process of the host and
its cgroup sub-tree.

One host on 10.250.<n>.0/24 under a random tag (no running lab uses it), the real
debootstrap'd root (lab/hosts.py), real ssh into it.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

from provisioner import pids
from provisioner.lab import hosts, orphans, rootfs
from tests.conftest import requires_root, scratch_lab_network

pytestmark = requires_root


def on_host(host: hosts.SshHost, key: Path, command: str) -> str:
    return subprocess.run(
        ["ssh", "-n", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
         f"root@{host.address}", command],
        capture_output=True, text=True, check=False, timeout=60).stdout.strip()


def test_a_lab_host_runs_systemd_and_down_ends_all_of_it(tmp_path):
    tag = secrets.token_hex(4)
    network, gateway, address = scratch_lab_network()
    workdir = tmp_path / "a lab dir"  # the launcher quotes every path it is given
    [host] = hosts.up([("init1", address)], network, gateway, workdir, rootfs.ensure_rootfs(),
                      tag, timeout_s=60)
    try:
        key = workdir / "id_ed25519"
        assert on_host(host, key, "cat /proc/1/comm") == "systemd"
        # "starting" while late units finish; never "offline" (no systemd) or "degraded"
        state = on_host(host, key, "systemctl is-system-running --wait")
        assert state == "running", on_host(host, key, "systemctl --failed --no-legend")
        active = on_host(host, key, "systemctl is-active lab-sshd chrony dbus "
                                    "systemd-journald systemd-logind").split()
        assert active == ["active"] * 5
        assert_reboots(host, key)
        assert orphans.cgroup_of(host.netns).is_dir()
        listed = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True,
                                text=True, check=True).stdout.split()
        assert len(listed) > 3  # systemd, journald, dbus, chrony, sshd ...
        assert_boot_loop_left_off(host, key)
    finally:
        hosts.down([host], tag)
    assert pids.start_ticks(host.pid) is None
    assert not any(pids.start_ticks(int(p)) for p in listed)
    assert not orphans.cgroup_of(host.netns).exists()
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert host.netns not in spaces


def boot_id(host: hosts.SshHost, key: Path) -> str:
    return on_host(host, key, "cat /proc/sys/kernel/random/boot_id")


def assert_reboots(host: hosts.SshHost, key: Path) -> None:
    """Ansible's reboot module: `shutdown -r 0`, then a new boot id and `whoami` answering."""
    before = boot_id(host, key)
    kernel = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert before and before != kernel  # the host's own, not the real machine's
    on_host(host, key, "echo kept > /root/disk && echo gone > /run/volatile && "
                       "shutdown -r 0 'lab reboot test'")
    after = ""
    for _ in range(600):  # until it answers again (no time limit asserted)
        after = boot_id(host, key)
        if after and after != before:
            break
        time.sleep(0.1)
    assert after and after != before
    assert pids.start_ticks(host.pid) == host.start_ticks  # the same launcher booted it
    assert Path("/proc/sys/kernel/random/boot_id").read_text().strip() == kernel
    assert on_host(host, key, "cat /root/disk; cat /run/volatile 2>&1") == (
        "kept\ncat: /run/volatile: No such file or directory")
    assert on_host(host, key, "systemctl is-system-running --wait") == "running"
    assert "lab host init1: reboot" in (Path(host.upper).parent / "host.log").read_text()


def assert_boot_loop_left_off(host: hosts.SshHost, key: Path) -> None:
    """A unit that reboots at every boot: after BOOT_LOOP_BOOTS quick reboots in a row the
    launcher leaves the host off and says why, instead of booting it without end."""
    on_host(host, key, "printf '[Unit]\\nAfter=multi-user.target\\n[Service]\\n"
                       "ExecStart=/usr/bin/systemctl reboot\\n[Install]\\n"
                       "WantedBy=multi-user.target\\n' > /etc/systemd/system/loop.service && "
                       "systemctl enable loop.service && systemctl reboot")
    log = Path(host.upper).parent / "host.log"
    for _ in range(1200):  # until the launcher ends (no time limit asserted)
        if pids.start_ticks(host.pid) != host.start_ticks:
            break
        time.sleep(0.1)
    assert pids.start_ticks(host.pid) != host.start_ticks, log.read_text()[-2000:]
    text = log.read_text()
    assert (f"lab host init1: {hosts.BOOT_LOOP_BOOTS} reboots within {hosts.BOOT_LOOP_S} s "
            "of boot: boot loop, left off") in text
    # booted again after each quick reboot but the last (the earlier test reboots may count)
    assert text.count("lab host init1: reboot\n") >= hosts.BOOT_LOOP_BOOTS - 1
    assert text.rstrip().endswith("boot loop, left off")
