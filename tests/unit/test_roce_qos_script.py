"""The RoCE QoS script (roles/roce_host/templates/provisioner-roce-qos.sh.j2) run by /bin/sh
against a sysfs tree built here. The NIC tools (mlnx_qos, cma_roce_tos) are scripts that
record their calls: this checks the script's choice of ports and values, not a NIC's answer
(the lab has no ConnectX NIC and skips these tasks as needs_nic)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provisioner import roce
from provisioner.inventory.software_models import Roce
from tests.conftest import role_task, role_template


def _roce_script(tmp_path: Path, interfaces: str, path: str = "/usr/bin:/bin",
                 mode: str = "lossless", macs: tuple[str, ...] = ()
                 ) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "roce-qos.env"
    env_file.write_text(role_template("roce_host", "roce-qos.env.j2", roce_host_interfaces=(
        interfaces.split() if interfaces else []), roce_host_macs=list(macs),
        roce_host_mode=mode,
        roce_host_dscp=26, roce_host_priority=3, roce_host_tos=106,
        roce_host_pfc=roce.policy(Roce(mode=mode)).pfc_vector, roce_host_cnp_dscp=48,
        roce_host_cnp_priority=6))
    script = role_template("roce_host", "provisioner-roce-qos.sh.j2").replace(
        "/etc/provisioner/roce-qos.env", str(env_file))
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                          env={"ROCE_SYSFS": str(tmp_path / "sys"), "PATH": path,
                               "ROCE_RUN_DIR": str(tmp_path / "run")},
                          check=False)


def test_roce_qos_applies_to_the_rdma_devices_found_on_the_host(tmp_path):
    # a sysfs tree with an InfiniBand device (mlx5_0, ib0) that RoCE QoS must leave alone,
    # and one RoCE device (mlx5_1) behind the port ens1f0np0
    ib = tmp_path / "sys/class/infiniband"
    for dev, port, layer in (("mlx5_0", "ib0", "InfiniBand"), ("mlx5_1", "ens1f0np0",
                                                                "Ethernet")):
        (ib / dev / "device/net" / port).mkdir(parents=True)
        (ib / dev / "ports/1").mkdir(parents=True)
        (ib / dev / "ports/1/link_layer").write_text(layer + "\n")
    assert _roce_script(tmp_path, "ib0").returncode == 1  # an IB port is not configured
    nothing = _roce_script(tmp_path, "ens9")  # the site names a port the host lacks
    assert nothing.returncode == 1 and "no RDMA device behind ens9 found" in nothing.stderr
    # no port named: every RDMA device found is configured, starting with mlnx_qos on its
    # port (absent here, so that port fails: the script reached the device it found)
    found = _roce_script(tmp_path, "")
    assert found.returncode == 1 and "mlnx_qos" in found.stderr
    assert "roce-qos: failed on: ens1f0np0 mlx5_1" in found.stderr
    assert "roce-qos: mlx5_0 skipped: not an Ethernet (RoCE) port" in found.stdout
    (tmp_path / "sys/class/infiniband/mlx5_1").rename(tmp_path / "gone")
    assert _roce_script(tmp_path, "").returncode == 1


def test_roce_qos_names_a_port_left_in_infiniband_mode_and_records_what_it_set(tmp_path):
    """ConnectX-7 ports start in InfiniBand mode, where a port has an IPoIB netdev, not the
    Ethernet name the site gives it: a run that misses a named port (or finds none) fails
    and names the devices in IB mode with the mlxconfig setting to change; the ports a run
    configured are recorded for node_verify, and a failed run leaves no record. The NIC
    tools are scripts recording their calls (this checks the script's logic, not a NIC's
    answer; the lab skips these tasks as needs_nic)."""
    ib = tmp_path / "sys/class/infiniband"
    for dev, port, layer in (("mlx5_0", "ibp1s0", "InfiniBand"),
                             ("mlx5_1", "ens1f0np0", "Ethernet")):
        (ib / dev / "device/net" / port).mkdir(parents=True)
        (ib / dev / "ports/1").mkdir(parents=True)
        (ib / dev / "ports/1/link_layer").write_text(layer + "\n")
        (ib / dev / "tc/1").mkdir(parents=True)
    for leaf in ("roce_np/enable", "roce_rp/enable"):
        (tmp_path / "sys/class/net/ens1f0np0/ecn" / leaf).mkdir(parents=True)
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("mlnx_qos", "cma_roce_tos"):
        (tools / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp_path / "calls"}\n')
        (tools / tool).chmod(0o755)
    path = f"{tools}:/usr/bin:/bin"
    ports = tmp_path / "run/roce-qos.ports"
    one = _roce_script(tmp_path, "ens1f0np0", path)
    assert one.returncode == 0, one.stderr
    assert ports.read_text() == "ens1f0np0\n"
    assert (ib / "mlx5_1/tc/1/traffic_class").read_text().strip() == "106"
    # the site adds the second port, whose card is still in InfiniBand mode
    both = _roce_script(tmp_path, "ens1f0np0 ens2f0np0", path)
    assert both.returncode == 1
    assert "named RoCE port(s) not configured: ens2f0np0" in both.stderr
    assert "in InfiniBand mode: mlx5_0(ibp1s0); RoCE needs a port in Ethernet mode: " \
        "mlxconfig -d DEVICE set LINK_TYPE_P1=2" in both.stderr
    assert not ports.exists()  # the first run's record does not outlive this failure
    (ib / "mlx5_1/ports/1/link_layer").write_text("InfiniBand\n")  # both cards in IB mode
    none = _roce_script(tmp_path, "", path)
    assert none.returncode == 1 and "no RDMA device found" in none.stderr
    assert "in InfiniBand mode: mlx5_0(ibp1s0) mlx5_1(ens1f0np0);" in none.stderr
    read = role_task("node_verify", "Read the trust mode and PFC of each RoCE port")
    assert "node_verify_roce_port_list" in str(read["loop"])  # what was configured, not the site
    that = role_task("node_verify", "Verify the QoS script configured every RoCE port the "
                     "site names")["ansible.builtin.assert"]
    assert isinstance(that, dict)
    assert "length > 0" in that["that"][0]
    assert "difference(node_verify_roce_configured)" in that["that"][1]


def _port(sys: Path, dev: str, ifname: str, layer: str = "Ethernet") -> Path:
    """An RDMA device with one network port, as mlx5 lays them out in sysfs."""
    devdir = sys / "class/infiniband" / dev
    (devdir / "device/net" / ifname).mkdir(parents=True)
    (devdir / "ports/1").mkdir(parents=True)
    (devdir / "ports/1/link_layer").write_text(layer + "\n")
    (devdir / "tc/1").mkdir(parents=True)
    for leaf in ("roce_np/enable", "roce_rp/enable"):
        (sys / "class/net" / ifname / "ecn" / leaf).mkdir(parents=True, exist_ok=True)
    return devdir


def _tools(tmp_path: Path, failing_port: str = "") -> tuple[str, Path]:
    """mlnx_qos and cma_roce_tos that record their calls; mlnx_qos fails on one port."""
    tools, calls = tmp_path / "tools", tmp_path / "calls"
    tools.mkdir()
    (tools / "mlnx_qos").write_text(
        f'#!/bin/sh\necho "mlnx_qos $*" >> {calls}\n'
        f'[ "$2" != "{failing_port}" ] || {{ echo "netlink error" >&2; exit 1; }}\n')
    (tools / "cma_roce_tos").write_text(f'#!/bin/sh\necho "cma_roce_tos $*" >> {calls}\n')
    for tool in tools.iterdir():
        tool.chmod(0o755)
    return f"{tools}:/usr/bin:/bin", calls


def test_roce_qos_sets_pfc_for_the_mode_and_dcqcn_on_the_roce_priority(tmp_path):
    """Lossless: PFC on the RoCE priority only. Lossy: PFC off on every priority, also on a
    host a lossless run left with PFC on. Both: ECN (DCQCN) on the RoCE priority, CNPs on
    their DSCP, RDMA-CM's ToS on the device."""
    sys = tmp_path / "sys"
    devdir = _port(sys, "mlx5_0", "ens1f0np0")
    path, calls = _tools(tmp_path)
    for mode, pfc in (("lossless", "0,0,0,1,0,0,0,0"), ("lossy", "0,0,0,0,0,0,0,0")):
        run = _roce_script(tmp_path, "", path, mode=mode)
        assert run.returncode == 0, run.stderr
        assert calls.read_text().splitlines() == [
            "mlnx_qos -i ens1f0np0 --trust dscp", f"mlnx_qos -i ens1f0np0 --pfc {pfc}",
            "cma_roce_tos -d mlx5_0 -t 106"]
        calls.unlink()
    ecn = sys / "class/net/ens1f0np0/ecn"
    assert (ecn / "roce_np/enable/3").read_text() == (ecn / "roce_rp/enable/3").read_text() \
        == "1\n"
    assert (ecn / "roce_np/cnp_dscp").read_text() == "48\n"
    assert (devdir / "tc/1/traffic_class").read_text() == "106\n"


def test_roce_qos_configures_every_port_of_a_roce_lag_and_skips_vfs_and_representors(
        tmp_path):
    """RoCE LAG has one RDMA device for the bond whose device/net shows the first port only:
    both members get the QoS, the device its ToS once. An SR-IOV VF (its PF's QoS applies)
    and a switchdev representor (pf0vf0 shares the PF's PCI device) are not ports."""
    sys = tmp_path / "sys"
    net = sys / "class/net"
    _port(sys, "mlx5_bond_0", "ens1f0np0")
    for member in ("ens1f0np0", "ens1f1np1"):
        (net / member / "ecn/roce_np/enable").mkdir(parents=True, exist_ok=True)
        (net / member / "ecn/roce_rp/enable").mkdir(parents=True, exist_ok=True)
        (net / member / "master").symlink_to("../bond0")
    (net / "bond0/bonding").mkdir(parents=True)
    for member in ("ens1f0np0", "ens1f1np1"):
        (net / "bond0" / f"lower_{member}").symlink_to(f"../{member}")
    vf = _port(sys, "mlx5_4", "ens1f0v0")
    (vf / "device/physfn").mkdir()
    (sys / "class/infiniband/mlx5_bond_0/device/net/pf0vf0").mkdir()
    (net / "pf0vf0").mkdir()
    (net / "pf0vf0/phys_port_name").write_text("pf0vf0\n")
    path, calls = _tools(tmp_path)
    run = _roce_script(tmp_path, "", path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run/roce-qos.ports").read_text() == "ens1f0np0\nens1f1np1\n"
    made = calls.read_text().splitlines()
    assert [c for c in made if c.endswith("--trust dscp")] == [
        "mlnx_qos -i ens1f0np0 --trust dscp", "mlnx_qos -i ens1f1np1 --trust dscp"]
    assert [c for c in made if c.startswith("cma_roce_tos")] == [
        "cma_roce_tos -d mlx5_bond_0 -t 106"]
    assert "mlx5_4 skipped: an SR-IOV virtual function" in run.stdout
    assert (net / "ens1f1np1/ecn/roce_rp/enable/3").read_text() == "1\n"
    # the site names the bond: its members are the ports it means
    named = _roce_script(tmp_path, "bond0", path)
    assert named.returncode == 0, named.stderr
    assert (tmp_path / "run/roce-qos.ports").read_text() == "ens1f0np0\nens1f1np1\n"


def test_roce_qos_goes_on_past_a_port_that_fails_and_then_fails_the_run(tmp_path):
    """A port whose QoS cannot be set does not leave the ports after it lossy: the others are
    configured, the run fails naming it, and no record says the node is done."""
    sys = tmp_path / "sys"
    for dev, port in (("mlx5_0", "ens1f0np0"), ("mlx5_1", "ens2f0np0")):
        _port(sys, dev, port)
    path, calls = _tools(tmp_path, failing_port="ens1f0np0")
    run = _roce_script(tmp_path, "", path)
    assert run.returncode == 1
    assert "roce-qos: failed on: ens1f0np0" in run.stderr
    assert "mlnx_qos -i ens2f0np0 --pfc 0,0,0,1,0,0,0,0" in calls.read_text()
    assert (sys / "class/net/ens2f0np0/ecn/roce_np/cnp_dscp").read_text() == "48\n"
    assert not (sys / "class/net/ens1f0np0/ecn/roce_np/cnp_dscp").exists()
    assert not (tmp_path / "run/roce-qos.ports").exists()


def test_node_verify_reads_the_qos_settings_line_by_line(tmp_path):
    """The settings file as the role writes it holds the site's values; a value that is only
    the start of another (DSCP 2 in ROCE_DSCP=26) does not pass."""
    import base64

    from tests.conftest import ansible_eval, holds

    site = {"roce_host_interfaces": [], "roce_host_macs": [], "roce_host_mode": "lossless",
            "roce_host_dscp": 26,
            "roce_host_priority": 3, "roce_host_tos": 106, "roce_host_pfc": "0,0,0,1,0,0,0,0",
            "roce_host_cnp_dscp": 48, "roce_host_cnp_priority": 6}
    written = role_template("roce_host", "roce-qos.env.j2", **site)
    task = role_task("node_verify", "Verify RoCE QoS as configured")
    read = {"content": base64.b64encode(written.encode()).decode()}
    lines = ansible_eval(task["vars"]["node_verify_roce_lines"], node_verify_roce=read)
    that = task["ansible.builtin.assert"]["that"]
    assert all(holds(c, node_verify_roce_lines=lines, **site) for c in that)
    assert not all(holds(c, node_verify_roce_lines=lines, **(site | {"roce_host_dscp": 2}))
                   for c in that)
    assert not all(holds(c, node_verify_roce_lines=lines, **(site | {"roce_host_tos": 10}))
                   for c in that)


def test_roce_qos_goes_only_to_the_ports_the_inventory_puts_on_a_roce_network(tmp_path):
    """Naming no interface, the site's MACs on its RoCE networks choose the ports: the
    ConnectX port on the storage network (another RDMA device) gets no RoCE QoS; a RoCE
    LAG's members follow the bond's MAC. The NIC tools record their calls."""
    sys = tmp_path / "sys"
    for dev, port, mac in (("mlx5_0", "ens1f0np0", "B8:3F:D2:00:00:01"),
                           ("mlx5_1", "ens2f0np0", "b8:3f:d2:00:00:02")):
        _port(sys, dev, port)
        (sys / "class/net" / port / "address").write_text(mac + "\n")
    path, calls_file = _tools(tmp_path)
    run = _roce_script(tmp_path, "", path, macs=("b8:3f:d2:00:00:01",))
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run/roce-qos.ports").read_text() == "ens1f0np0\n"
    calls = calls_file.read_text()
    assert "-i ens1f0np0" in calls and "ens2f0np0" not in calls and "-d mlx5_1" not in calls
    assert "ens2f0np0 skipped: its MAC is on no RoCE network" in run.stdout
    # a MAC the host does not have: nothing is configured, and the run says which MAC
    calls_file.unlink()
    none = _roce_script(tmp_path, "", path, macs=("b8:3f:d2:00:00:09",))
    assert none.returncode == 1
    assert "no RDMA device with the RoCE MAC(s) b8:3f:d2:00:00:09 found" in none.stderr
    # neither names nor MACs: every RDMA port, as before
    every = _roce_script(tmp_path, "", path)
    assert every.returncode == 0, every.stderr
    assert (tmp_path / "run/roce-qos.ports").read_text() == "ens1f0np0\nens2f0np0\n"
