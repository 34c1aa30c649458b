"""A killed lab's namespaces and bridge: named as leftovers, pruned, and nothing else is.

Real namespaces, veths and a bridge, made here with iproute2 the way lab/hosts.py makes
them, under names no running lab uses (a random tag), all removed at the end.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
from ipaddress import IPv4Address, IPv4Network

import pytest

from provisioner.errors import ConfigError
from provisioner.lab import hosts, orphans
from tests.conftest import requires_root

pytestmark = requires_root


def ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


@pytest.fixture
def killed_lab():
    """Two namespaces on a lab bridge holding 10.249.<n>.1/24; a process in the second."""
    tag = secrets.token_hex(3)
    bridge = hosts.bridge_name(tag + "-test")
    spaces = [f"pv-{tag}0", f"pv-{tag}1"]
    third = secrets.randbelow(200) + 20
    ip("link", "add", bridge, "type", "bridge")
    ip("addr", "add", f"10.249.{third}.1/24", "dev", bridge)
    for i, ns in enumerate(spaces):
        ip("netns", "add", ns)
        ip("link", "add", f"pvt{tag}{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", f"pvt{tag}{i}", "master", bridge, "up")
    sleeper = subprocess.Popen(["ip", "netns", "exec", spaces[1], "sleep", "600"])
    try:
        yield bridge, spaces, sleeper, third
    finally:
        with contextlib.suppress(ProcessLookupError):
            sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
        for ns in spaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


def test_a_busy_namespace_keeps_itself_and_its_bridge(killed_lab):
    bridge, spaces, _, _ = killed_lab
    left = orphans.find()
    assert spaces[0] in left.namespaces and spaces[1] not in left.namespaces
    assert bridge not in left.bridges  # a port still leads to a running process


def test_prune_removes_the_leftovers_and_unblocks_the_gateway(killed_lab, tmp_path):
    bridge, spaces, sleeper, third = killed_lab
    gateway = IPv4Address(f"10.249.{third}.1")
    sleeper.send_signal(signal.SIGKILL)
    sleeper.wait()
    with pytest.raises(ConfigError) as refused:
        hosts.up([("n1", IPv4Address(f"10.249.{third}.5"))], IPv4Network(f"10.249.{third}.0/24"),
                 gateway, tmp_path, tmp_path / "no-rootfs", "0000aaaa")
    assert f"{gateway} is still on {bridge}" in str(refused.value)
    assert "provision lab prune" in str(refused.value)
    gone = orphans.prune()
    assert set(spaces) <= set(gone.namespaces) and bridge in gone.bridges
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in spaces)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert bridge not in links
