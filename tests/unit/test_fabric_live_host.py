"""`fabric check --live`, the host side (switches/live.py): the host's own link MTU read from
sysfs, with or without mlnx_qos, and compared with both the switch port and the inventory.
Before, the check compared the inventory's MTU with itself. The script runs here in a real
shell against this machine's own interfaces."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from provisioner.fabric.base import SwitchQos
from provisioner.switches.live import (
    HostRead,
    gid_mismatches,
    host_script,
    mtu_mismatches,
    parse_host_read,
)
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


ROCE_V2 = "0000:0000:0000:0000:0000:ffff:0afa:0215"  # ::ffff:10.250.2.21


def test_the_rdma_devices_and_gids_behind_the_nic_are_read_beside_the_qos():
    text = ("9000\nrdma mlx5_0\n"
            f"gid {ROCE_V2} RoCE v2\ngid {ROCE_V2} IB/RoCE v1\n"
            "gid fe80:0000:0000:0000:ba3f:d2ff:fe00:0021 RoCE v2\n" + MLNX_QOS_PFC3)
    got = parse_host_read("dgx01", "roce", text, 0)
    assert isinstance(got, HostRead) and got.rdma_devices == ("mlx5_0",)
    assert got.gids[0] == (ROCE_V2, "RoCE v2") and len(got.gids) == 3
    assert not isinstance(got.qos, str) and got.qos.pfc_priorities == frozenset({3})
    assert gid_mismatches("dgx01", "roce", "10.250.2.21", got, "leaf01", "swp1s0") == []


def test_a_nic_without_the_roce_v2_gid_of_its_address_is_a_mismatch():
    """An address set on another port (or none), or a RoCE v1 GID only: NCCL would fall back
    to a link-local GID that does not cross an L3 leaf."""
    v1_only = parse_host_read("dgx01", "roce", f"9000\nrdma mlx5_0\ngid {ROCE_V2} "
                              "IB/RoCE v1\n", 127)
    assert isinstance(v1_only, HostRead)
    found = gid_mismatches("dgx01", "roce", "10.250.2.21", v1_only, "leaf01", "swp1s0")
    assert [m.format() for m in found] == [
        "dgx01 roce <-> leaf01 swp1s0: gid: host no RoCE v2 GID for 10.250.2.21 on mlx5_0 "
        "(IPv4 GIDs: 10.250.2.21 (IB/RoCE v1)), switch RDMA-CM and NCCL need it: set the "
        "address on the RoCE NIC"]
    none = parse_host_read("dgx01", "roce", "9000\nrdma mlx5_0\n", 127)
    assert isinstance(none, HostRead)
    assert "(IPv4 GIDs: none)" in gid_mismatches("dgx01", "roce", "10.250.2.21", none,
                                                 "leaf01", "swp1s0")[0].format()
    # no RDMA device behind the NIC (a plain Ethernet port), or no address in the inventory:
    # nothing to judge
    plain = parse_host_read("here", "lo", "65536\n", 127)
    assert isinstance(plain, HostRead) and plain.rdma_devices == ()
    assert gid_mismatches("here", "lo", "10.250.2.21", plain, "leaf01", "swp1s0") == []
    assert gid_mismatches("dgx01", "roce", None, none, "leaf01", "swp1s0") == []


def test_the_script_reads_no_rdma_device_where_the_nic_has_none():
    text, code = _run_here("lo")
    got = parse_host_read("here", "lo", text, code)
    assert isinstance(got, HostRead) and got.rdma_devices == () and got.gids == ()


def test_the_script_lists_each_gid_with_a_type_and_skips_the_unused_ones(tmp_path):
    """The script's own loop, on a sysfs tree built here (the real one has no RDMA device):
    GID 0 a link-local RoCE v2 one, GID 1 the address's, GID 2 unused (no type reads), GID
    3 on another netdev (the storage port), found by each GID's netdev (gid_attrs/ndevs)."""
    net, ib = tmp_path / "class/net", tmp_path / "class/infiniband"
    port = ib / "mlx5_0/ports/1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    (net / "roce").mkdir(parents=True)
    (net / "roce/mtu").write_text("9000\n")
    for i, gid, kind, ndev in (
            (0, "fe80:0000:0000:0000:ba3f:d2ff:fe00:0021", "RoCE v2", "roce"),
            (1, ROCE_V2, "RoCE v2", "roce"), (2, "0000:" * 7 + "0000", None, None),
            (3, "0000:0000:0000:0000:0000:ffff:0afa:0315", "RoCE v2", "storage")):
        (port / "gids" / str(i)).write_text(gid + "\n")
        if kind is not None:
            (port / "gid_attrs/types" / str(i)).write_text(kind + "\n")
        if ndev is not None:
            (port / "gid_attrs/ndevs" / str(i)).write_text(ndev + "\n")
    script = host_script("roce").replace("/sys/class/net", str(net)).replace(
        "/sys/class/infiniband", str(ib))
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False,
                          timeout=30, env={"PATH": "/usr/bin:/bin"})
    got = parse_host_read("dgx01", "roce", proc.stdout, proc.returncode)
    assert isinstance(got, HostRead) and got.mtu_bytes == 9000
    assert got.rdma_devices == ("mlx5_0",)
    assert got.gids == (("fe80:0000:0000:0000:ba3f:d2ff:fe00:0021", "RoCE v2"),
                        (ROCE_V2, "RoCE v2"))
    assert gid_mismatches("dgx01", "roce", "10.250.2.21", got, "leaf01", "swp1s0") == []
    assert gid_mismatches("dgx01", "roce", "10.250.2.99", got, "leaf01", "swp1s0")
