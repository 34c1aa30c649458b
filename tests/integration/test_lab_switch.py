"""The lab's switch stand-in (lab/switch.py) on its own: zebra in a namespace of its own with
a veth per cabled port, vtysh over SSH taking a real push; and the namespace a killed lab
left behind is reclaimed by the next start instead of failing it. Run under the lab lock
(it creates network namespaces), though it uses no fixed address."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from provisioner.lab import switch
from provisioner.pids import start_ticks
from provisioner.secrets import Secret, write_private
from provisioner.switches.base import Endpoint
from provisioner.switches.ops import _switch
from tests.conftest import requires_peer, requires_root

pytestmark = [pytest.mark.integration, requires_root,
              requires_peer(switch.FRR_DIR.joinpath("zebra").exists() and shutil.which("vtysh"),
                            "FRRouting is not installed (apt-get install frr)")]


def _links(netns: str) -> str:
    return subprocess.run(["ip", "-n", netns, "-o", "link"], capture_output=True, text=True,
                          check=True, timeout=30).stdout


def test_stand_in_takes_a_push_and_a_killed_labs_namespace_is_reclaimed(tmp_path: Path) -> None:
    from provisioner.switches.netmiko_driver import NetmikoDriver

    pw = tmp_path / "pw"
    write_private(pw, "lab-pw\n")
    tag = f"t{os.getpid():x}"[:8]
    started = [switch.start_one("leaf01", ["swp1s0", "Ethernet1/1"], tmp_path / "w", tag, pw,
                                30.0)]
    try:
        first = started[0]
        links = _links(first.netns)
        assert "swp1s0@" in links and "Ethernet1/1" not in links  # not a Linux name: no veth
        drv = NetmikoDriver(Endpoint("leaf01", "cisco_ios", "127.0.0.1", first.port, "admin",
                                     Secret("lab-pw"), 20.0))
        try:
            out = _switch(drv, "leaf01", "cisco_ios",
                          "interface swp1s0\n description dgx01 roce\n", push=True)
        finally:
            drv.close()
        assert out.status == "pushed", out.error
        assert "description dgx01 roce" in (Path(first.conf_dir) / "frr.conf").read_text()

        # the lab is killed: its SSH server goes, zebra stays in the namespace, no `lab down`
        os.kill(first.ssh_pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(first.ssh_pid, 0)
        again = switch.start_one("leaf01", ["swp1s0"], tmp_path / "w", tag, pw, 30.0)
        started.append(again)
        assert again.netns == first.netns
        assert start_ticks(first.zebra_pid) != first.zebra_ticks  # the old zebra is gone
        assert start_ticks(again.zebra_pid) == again.zebra_ticks
    finally:
        switch.down(started[-1:])
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=True, timeout=30).stdout
    assert started[0].netns not in listed
