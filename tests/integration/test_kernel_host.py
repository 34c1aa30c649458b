"""The payload's kernel-bound steps for real, on a guest with a kernel of its own.

The lab's namespace hosts share this machine's kernel and skip every task tagged
needs_kernel (provisioner/profile.py). Here the roles' own task files run on a QEMU guest
with Debian's kernel (provisioner/lab/kernel_host.py): modules load, sysctls take, a real
swap device goes off, the initramfs is rebuilt with nouveau blacklisted, a check run before
them changes nothing, and a second run changes only what was set back by hand. Every task
the lab skips by that tag must run here, not be skipped.

The guest's work runs in a process of its own (kernel_host_job.py), so that however the
suite ends, the guest ends too; this test starts it, waits for it and judges what it
wrote. It once ran beside the other tests from the start of the session: the suite was no
faster for it, and an early BMC test failed once beside its emulated CPU.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from provisioner import profile
from provisioner.switches import live
from tests.conftest import IS_ROOT, ROOT, requires_peer

pytestmark = [pytest.mark.integration, requires_peer(
    IS_ROOT and shutil.which("debootstrap") and shutil.which("qemu-system-x86_64"),
    "the kernel host needs root, debootstrap and qemu-system-x86 (scripts/bootstrap.sh)")]

MODULES = ("overlay", "br_netfilter", "ib_umad")  # base_os's two, fabric manager's one
JOB_TIMEOUT_S = 3600  # a hung guest ends the wait; the figures are in the README


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("kernel-host")  # pytest keeps it: job.log, serial.log
    with (out / "job.log").open("w") as log:
        job = subprocess.Popen([sys.executable, "-m", "tests.integration.kernel_host_job",
                                str(out)], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        job.wait(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kernel host job still running after {JOB_TIMEOUT_S} s (see {out})")
    finally:
        if job.poll() is None:  # the guest ends with it (PR_SET_PDEATHSIG)
            job.terminate()
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
    log_tail = (out / "job.log").read_text()[-3000:]
    assert (out / "result.json").is_file(), f"no result.json in {out}: {log_tail}"
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    assert "error" not in result, f"{result['error']}\n{log_tail}\n(see {out})"
    return result


def test_the_guest_ran_under_kvm_where_kvm_runs_guests(found):
    """KVM where a guest runs under it on this machine, else TCG, and the job said which
    and why. On the CI machines nested KVM is unreliable: /dev/kvm opens, and a probe
    guest runs under it some of the time only, a kernel less often: TCG, saying so."""
    accel, note = found["accel"]
    assert accel in ("kvm", "tcg"), found["accel"]
    if accel == "tcg":  # why, said: /dev/kvm itself, or a kernel that printed nothing on it
        assert note.startswith("TCG, QEMU's CPU emulation: "), note
        assert "/dev/kvm" in note or "the kernel under KVM" in note, note
    else:
        assert note.startswith("KVM"), note


def test_a_check_run_passes_and_changes_nothing(found):
    """`provision run --check` on a fresh node: it predicts changes and makes none (the
    guest, observed after it, is still as it booted), and the sysctl check, which has no
    read to judge in check mode, is skipped rather than failing on the missing result."""
    check = found["check"]
    assert check["ok"], check["failures"]
    predicted = [t for _r, t, status in check["events"] if status == "changed"]
    assert "Kernel parameters for GPU and RDMA hosts" in predicted
    statuses = {t: status for _r, t, status in check["events"]}
    assert statuses["Check that every kernel parameter took"] == "skipped"
    before = found["before"]
    assert not set(MODULES) & set(before["modules"]), before["modules"]
    assert [line.split()[0] for line in before["swaps"]] == ["/dev/vdb"]
    assert before["sysctl"]["vm.max_map_count"] == ["65530"]  # the kernel's default
    assert "etc/modprobe.d/blacklist-nouveau.conf" not in before["initrd_files"]
    # nor a file written: the roles' own, and fstab's swap line
    assert not any(before["files"].values()), before["files"]
    assert "disabled by provisioner" not in before["fstab"]


def test_every_kernel_bound_task_ran_for_real(found):
    assert found["first"]["ok"], found["first"]["failures"]
    kernel_bound = {(r, n) for r, n, tags in profile.role_tasks(ROOT / "roles")
                    if "needs_kernel" in tags}
    assert len(kernel_bound) == profile.skipped_tasks(
        ROOT / "roles", profile.LAB_SKIP_TAGS)["needs_kernel"]
    ran = {(role, task) for role, task, status in found["first"]["events"]
           if status in ("ok", "changed")}
    assert kernel_bound <= ran, kernel_bound - ran


def test_modules_sysctls_swap_and_initramfs_took_effect(found):
    before, after = found["before"], found["after"]
    assert set(MODULES) <= set(after["modules"]), after["modules"]
    defaults = yaml.safe_load((ROOT / "roles/base_os/defaults/main.yml").read_text())
    for key, value in defaults["base_os_sysctl"].items():
        assert after["sysctl"][key] == str(value).split(), key
    assert after["swaps"] == []
    assert "# /dev/vdb none swap sw 0 0  # disabled by provisioner" in after["fstab"]
    assert after["initrd_mtime"] > before["initrd_mtime"]
    assert "etc/modprobe.d/blacklist-nouveau.conf" in after["initrd_files"]
    assert all(after["files"].values()), after["files"]


def test_a_second_run_puts_back_a_value_changed_by_hand_and_changes_nothing_else(found):
    """Between the runs vm.max_map_count was set back to the kernel's default by hand: the
    second run reads the running values, finds it, loads the modules and applies the files
    again, and every other task is unchanged (one run for both: each run costs a minute of
    emulated CPU)."""
    second = found["second"]
    assert second["ok"], second["failures"]
    changed = [t for _r, t, status in second["events"] if status == "changed"]
    # and the RoCE port's MTU, set to 1500 by hand on both guests, is put back; the one
    # change in the inventory (the storage network's MTU) is written and applied
    assert sorted(changed) == ["Apply kernel parameters", "Apply the netplan configuration",
                               "Load kernel modules", "Read the running kernel parameters",
                               "Write the data networks' netplan"]
    assert sorted(t for _r, t, status in second["peer_events"] if status == "changed") == [
        "Apply the netplan configuration", "Write the data networks' netplan"]
    defaults = yaml.safe_load((ROOT / "roles/base_os/defaults/main.yml").read_text())
    assert found["after_second"]["sysctl"]["vm.max_map_count"] == [
        str(defaults["base_os_sysctl"]["vm.max_map_count"])]
    # fabric manager's modules and the initramfs, whose files did not change, were left alone
    ran = {t for _r, t, status in second["events"] if status != "skipped"}
    assert not {"Load fabric manager's kernel modules", "Rebuild the initramfs"} & ran
    assert "Turn swap off now" not in ran  # no swap is on any more


def _links(net: list[Any]) -> dict[str, Any]:
    return {a["ifname"]: a for a in net[0]}


def _inet(link: dict[str, Any]) -> set[str]:
    return {f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
            if a["family"] == "inet"}


@pytest.mark.parametrize("node", ["dgx01", "dgx02"])
def test_every_data_network_is_on_its_nic_with_the_inventory_s_address_and_mtu(found, node):
    """Read inside each guest with `ip -j addr` (its own kernel): the port with the MAC the
    inventory gives for each data network has the name, address and MTU of the rendered
    plan; before the run it had none of it."""
    plan = found["plans"][node]
    assert {i["network"] for i in plan} == {"roce", "rail2", "storage"}
    before, after = _links(found["net_before"][node]), _links(found["net_after"][node])
    for i in plan:
        link = after[i["name"]]
        assert (link["address"], link["mtu"]) == (i["mac"], i["mtu"]), link
        assert i["address"] in _inet(link), link
        assert link["operstate"] in ("UP", "UNKNOWN"), link
        old = next(x for x in before.values() if x.get("address") == i["mac"])
        assert old["ifname"] != i["name"] and i["address"] not in _inet(old), old


@pytest.mark.parametrize("node", ["dgx01", "dgx02"])
def test_each_rail_routes_from_its_own_address_by_its_own_table(found, node):
    """Two RoCE rails (the example's roce and a second, rail2, each its own subnet and
    port): in each guest, `ip -j rule` has `from <rail address> lookup <table>` for each,
    and `ip -j route show table all` has the rail's subnet on its own port in that table,
    tables 101 and 102 as the plan says, so traffic sourced from a rail leaves by it."""
    plan = [i for i in found["plans"][node] if i["kind"] == "roce"]
    assert [(i["network"], i["table"]) for i in plan] == [("roce", 101), ("rail2", 102)]
    _addrs, rules, routes = found["net_after"][node]
    for i in plan:
        ip = ipaddress.IPv4Interface(i["address"])
        assert any(r.get("src") == str(ip.ip) and str(r.get("table")) == str(i["table"])
                   for r in rules), rules
        assert any(r.get("dst") == str(ip.network) and r.get("dev") == i["name"]
                   and str(r.get("table")) == str(i["table"]) for r in routes), routes
    before_rules = found["net_before"][node][1]
    assert not [r for r in before_rules if str(r.get("table")) in ("101", "102")]


@pytest.mark.parametrize("node", ["dgx01", "dgx02"])
def test_an_mtu_and_a_tag_changed_in_the_inventory_move_exactly_those_on_the_host(found, node):
    """Before the second run the storage network went from MTU 9000 to 4000 and to tagged
    at the hosts (`host_tagged`, VLAN 200) in the inventory (site.yaml): on each guest its
    address moved to a VLAN sub-interface storage.200 of the storage port, both at 4000,
    the port without an address; every other name, address and MTU is as the first run left
    it (the RoCE port's MTU, set to 1500 by hand meanwhile, is 9000 again)."""
    first, second = found["plans"][node], found["plans_second"][node]
    storage = next(i for i in second if i["network"] == "storage")
    assert (storage["name"], storage["port"], storage["vlan"], storage["mtu"]) == (
        "storage.200", "storage", 200, 4000)
    assert [i for i in second if i["network"] != "storage"] == [
        i for i in first if i["network"] != "storage"]
    after, again = _links(found["net_after"][node]), _links(found["net_after_second"][node])
    vlan = again["storage.200"]
    assert (vlan.get("link"), vlan["mtu"], _inet(vlan)) == ("storage", 4000,
                                                             {storage["address"]}), vlan
    assert (again["storage"]["mtu"], _inet(again["storage"])) == (4000, set()), again["storage"]
    assert set(again) == set(after) | {"storage.200"}
    for name, link in after.items():
        if name != "storage":
            assert (again[name]["mtu"], _inet(again[name]), again[name]["address"]) == (
                link["mtu"], _inet(link), link["address"]), (name, again[name])


def _mapped(gid: str) -> str | None:
    mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    return str(mapped) if mapped else None


def _report_mtu(text: str) -> int:
    m = re.search(r"Mtu\s*:\s*(\d+)\[B\]", text)
    assert m, text
    return int(m.group(1))


def _average_mb_s(text: str) -> float:
    m = re.search(r"^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)", text, re.MULTILINE)
    assert m, text
    return float(m.group(1))


def test_soft_roce_runs_rdma_over_the_configured_port_with_an_ipv4_gid_and_its_mtu(found):
    """Two guests, their RoCE ports wired to each other and configured by the host network
    role, each with the kernel's soft-RoCE (rdma_rxe) over that port: the RDMA device has a
    RoCE v2 GID of the address the role set (IPv4-mapped), rping and ib_write_bw run
    between them over RDMA-CM, at an active MTU of 4096 with the network's 9000. With the
    ports' MTU set back to 1500 by hand, the same test runs at 1024; the second run puts
    9000 back and the RDMA port follows."""
    rdma, plans = found["rdma"], found["plans"]
    for side, node in (("a", "dgx01"), ("b", "dgx02")):
        ip = next(i for i in plans[node] if i["kind"] == "roce")["address"].split("/")[0]
        v2 = [_mapped(gid) for _i, gid, kind in rdma[side]["gids"] if kind == "RoCE v2"]
        assert ip in v2, rdma[side]["gids"]
        assert rdma[side]["active_mtu"] == 4096, rdma[side]["ibv_devinfo"]
        assert found["rdma_1500"][side]["active_mtu"] == 1024
        assert found["rdma_after_second"][side]["active_mtu"] == 4096
    assert rdma["rping"]["rc"] == 0, rdma["rping"]
    assert "ping data" in rdma["rping"]["client"] + rdma["rping"]["server"], rdma["rping"]
    bw = rdma["bw"]
    assert bw["rc"] == 0, bw
    assert _report_mtu(bw["client"]) == 4096 and _average_mb_s(bw["client"]) > 0
    low = found["rdma_1500"]["bw"]
    assert low["rc"] == 0, low
    assert _report_mtu(low["client"]) == 1024 and _average_mb_s(low["client"]) > 0


def test_fabric_check_live_reads_the_host_s_mtu_and_its_soft_roce_gid(found):
    """`fabric check --live`'s host script, run in the kernel host with soft-RoCE on its
    RoCE port: it reads MTU 9000 and finds the RDMA device by its GIDs' netdev, with the
    RoCE v2 GID of the address the role set, so no mismatch; with the port at 1500 by hand,
    the MTU comparison names node, NIC, switch, port and both values."""
    plan = next(i for i in found["plans"]["dgx01"] if i["network"] == "roce")
    address = plan["address"].split("/")[0]
    read = live.parse_host_read("dgx01", plan["name"], *found["live"])
    assert isinstance(read, live.HostRead), read
    assert (read.mtu_bytes, read.rdma_devices) == (9000, ("rxe0",)), read
    assert live.gid_mismatches("dgx01", plan["name"], address, read, "leaf01", "swp1s0") == []
    assert live.gid_mismatches("dgx01", plan["name"], "10.250.2.99", read, "leaf01",
                               "swp1s0")  # another address's GID is not there
    assert live.mtu_mismatches("dgx01", plan["name"], read.mtu_bytes, 9000, "leaf01",
                               "swp1s0", 9216, None) == []
    low = live.parse_host_read("dgx01", plan["name"], *found["live_1500"])
    assert isinstance(low, live.HostRead) and low.mtu_bytes == 1500, low
    [m] = live.mtu_mismatches("dgx01", plan["name"], low.mtu_bytes, 9000, "leaf01", "swp1s0",
                              9216, None)
    said = m.format()
    assert all(w in said for w in ("dgx01", plan["name"], "leaf01", "swp1s0", "1500",
                                   "9000")), said


def test_the_installer_refuses_a_disk_holding_a_system_unless_named_and_never_writes(found):
    """The disk guard of a node's served user-data, run in the guest as the installer runs
    its early-commands: a data disk holding ext4 (with an install marker) and the swap
    disk the role turned off are found, the install is refused (exit 1, which aborts an
    autoinstall before its storage step), the reason reaches the boot server and the state
    store; named with --reinstall for the run, the same guard lets the install go on. The
    disk's bytes are the same after both (sha256 of its image)."""
    from provisioner import install

    refused, granted = found["guard_refuses"], found["guard_granted"]
    assert refused["rc"] == 1, refused
    (report,) = refused["reports"]
    assert report["intent_id"] == refused["token"]  # recorded against the boot it answers
    assert report["report"].startswith(install.REFUSED), report
    assert "/dev/vdc: ext4" in report["report"] and "/dev/vdb: swap" in report["report"]
    assert "/dev/vda" not in report["report"]  # the running root is not a target
    assert "--reinstall" in report["report"] and install.REFUSED in refused["stderr"]
    assert granted["rc"] == 0, granted
    assert "named with --reinstall for this run" in granted["stdout"]
    assert granted["reports"] == []
    # the served user-data carried each boot's own token into the marker it would write
    assert any(f"dgx01 boot={granted['token']}" in c for c in granted["late"])
    before, after = found["data_sha256"]
    assert before == after
