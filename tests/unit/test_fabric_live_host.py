"""`fabric check --live`, the host side (switches/live.py): the host's own link MTU read from
sysfs, with or without mlnx_qos, and compared with both the switch port and the inventory.
Before, the check compared the inventory's MTU with itself. The script runs here in a real
shell against this machine's own interfaces."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from provisioner.fabric.base import SwitchQos
from provisioner.switches.live import HostRead, host_script, mtu_mismatches, parse_host_read
from tests.unit.test_fabric_live import MLNX_QOS_PFC3


def _run_here(nic: str) -> tuple[str, int]:
    proc = subprocess.run(["sh", "-c", host_script(nic)], capture_output=True, text=True,
                          check=False, timeout=30)
    return proc.stdout, proc.returncode


def test_the_mtu_is_read_from_the_host_whether_or_not_mlnx_qos_is_there():
    text, code = _run_here("lo")
    mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    got = parse_host_read("here", "lo", text, code)
    assert isinstance(got, HostRead) and got.mtu_bytes == mtu
    if shutil.which("mlnx_qos") is None:
        assert code == 127 and isinstance(got.qos, str)
        assert "mlnx_qos is not installed" in got.qos


def test_a_nic_the_host_lacks_is_said_by_name():
    text, code = _run_here("roce9")
    assert parse_host_read("dgx01", "roce9", text, code) == \
        "dgx01 has no interface roce9 (/sys/class/net/roce9)"


def test_mlnx_qos_output_after_the_mtu_is_parsed():
    got = parse_host_read("dgx01", "eth2", "9000\n" + MLNX_QOS_PFC3, 0)
    assert isinstance(got, HostRead) and got.mtu_bytes == 9000
    assert not isinstance(got.qos, str) and got.qos.pfc_priorities == frozenset({3})


def _switch(port_mtu: int | None) -> SwitchQos:
    return SwitchQos(frozenset({3}), {26: 3, 48: 6},
                     {} if port_mtu is None else {"swp1s0": port_mtu}, True)


def test_a_host_left_at_1500_is_reported_with_both_ends():
    found = mtu_mismatches("dgx01", "roce", 1500, 9000, "leaf01", "swp1s0", 9216,
                           _switch(9216))
    assert [m.format() for m in found] == [
        "dgx01 roce <-> leaf01 swp1s0: mtu: host 1500 (read; the inventory declares 9000), "
        "switch 9216"]


def test_a_host_above_its_switch_port_is_reported():
    found = mtu_mismatches("dgx01", "roce", 9216, 9000, "leaf01", "swp1s0", 9216,
                           _switch(9000))
    assert [(m.host_value, m.switch_value) for m in found] == [
        ("9216 (read)", "9000: frames above it are dropped")]


def test_without_a_switch_read_the_inventorys_port_mtu_is_used_and_said():
    found = mtu_mismatches("dgx01", "roce", 1500, 9000, "leaf01", "swp1s0", 9216, None)
    assert len(found) == 1
    assert found[0].switch_value == "9216 (inventory; not read from the switch)"


def test_a_host_as_declared_and_within_its_port_agrees():
    assert mtu_mismatches("dgx01", "roce", 9000, 9000, "leaf01", "swp1s0", 9216,
                          _switch(9216)) == []
