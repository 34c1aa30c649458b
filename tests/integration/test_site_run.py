"""The rendered site.yml run for real through the runner against SSH test hosts (one
network namespace, sshd and copy-on-write Debian root per node).

What a host without a GPU, an init system or the internet can do runs for real (files,
packages already in the image, host name); the rest is skipped by tag (the lab profile's
skip list in the rendered ansible.cfg), and the tests assert which did what.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from provisioner import render, runner
from provisioner.inventory import load
from tests.conftest import EXAMPLE, requires_ssh_hosts
from tests.integration.conftest import provision, requires_ipmi_sim, ssh_lab

pytestmark = [pytest.mark.integration, requires_ipmi_sim,
              requires_ssh_hosts]


@pytest.fixture(scope="module")
def site_lab(tmp_path_factory):
    with ssh_lab(tmp_path_factory, EXAMPLE, "ssh") as lab:
        yield lab


def upper(state, host: str) -> Path:
    return Path(next(h.upper for h in state.ssh_hosts if h.name == host))


def on_dgx02(command: str, state) -> None:
    key = Path(state.ssh_hosts[0].upper).parents[1] / "id_ed25519"
    address = next(h.address for h in state.ssh_hosts if h.name == "dgx02")
    subprocess.run(["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o",
                    "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                    f"root@{address}", command], check=True, timeout=60)


def run_site(site: Path) -> runner.RunResult:
    loaded = load(site)
    out = render.render(loaded, loaded.base_dir / ".provision" / "ansible", lab=True).out
    return runner.run_playbook(out, "site.yml")


def test_site_runs_for_real_then_changes_nothing(site_lab):
    site, state = site_lab
    first = run_site(site)
    assert first.ok, [f"{e.host} | {e.task}: {e.message}" for e in first.failures]
    assert set(first.hosts) == {"cp01", "cp02", "cp03", "dgx01", "dgx02", "stor01"}

    # files really written inside each host's own copy-on-write layer, nowhere else
    dgx = upper(state, "dgx01")
    env = (dgx / "etc/provisioner/roce-qos.env").read_text()
    assert "ROCE_DSCP=26" in env and "ROCE_TOS=106" in env and "ROCE_PFC=0,0,0,1,0,0,0,0" in env
    assert "CNP_DSCP=48" in env and "CNP_PRIORITY=6" in env
    assert "net.ipv4.tcp_ecn = 1" in (dgx / "etc/sysctl.d/90-provisioner.conf").read_text()
    assert "blacklist nouveau" in (dgx / "etc/modprobe.d/blacklist-nouveau.conf").read_text()
    containerd = (dgx / "etc/containerd/config.toml").read_text()
    assert 'default_runtime_name = "nvidia"' in containerd and "SystemdCgroup = true" in containerd
    assert (dgx / "etc/hostname").read_text().strip() == "dgx01"
    assert "kind: JoinConfiguration" in (dgx / "etc/kubernetes/kubeadm-config.yaml").read_text()
    cp = upper(state, "cp01")
    init = (cp / "etc/kubernetes/kubeadm-config.yaml").read_text()
    assert "kubernetesVersion: v1.31.4" in init and "podSubnet: 10.244.0.0/16" in init
    assert 'default_runtime_name = "runc"' in (cp / "etc/containerd/config.toml").read_text()
    assert not (upper(state, "stor01") / "etc/containerd").exists()  # storage: no Kubernetes
    assert not Path("/etc/provisioner/roce-qos.env").exists()  # the real machine untouched

    # what a lab host cannot do (a GPU, a cluster, the kernel, vendor repositories, an
    # init system) is skipped by tag: it never runs, and nothing runs in check mode
    ran = {e.task for e in first.events}
    assert not ran & {"Read the driver version every GPU reports", "Health gate - dcgmi diag",
                      "Check every GPU is visible at the pinned driver",
                      "Initialise the first control plane", "Install the driver packages "
                      "(Ubuntu)", "Start fabric manager (or IMEX) and enable it at boot",
                      "Check fabric manager (or IMEX) is active before the diagnostic"}
    assert first.simulated == []
    assert "Write the host name for every boot" in ran
    real = {e.task for e in first.real_changes}
    assert {"Write the RoCE QoS settings", "Configure containerd (systemd cgroups, NVIDIA "
            "runtime on GPU nodes)", "Kernel parameters for GPU and RDMA hosts"} <= real

    second = run_site(site)
    assert second.ok
    assert second.real_changes == [], [f"{e.host} | {e.task}" for e in second.real_changes]


def test_a_failing_task_on_one_host_leaves_the_others_finished(site_lab):
    site, state = site_lab
    # break one host, through SSH (its root is a mounted overlay): a file where the
    # roce_host role needs a directory
    on_dgx02("rm -rf /etc/provisioner && echo broken > /etc/provisioner", state)
    try:
        res = provision("run", str(site), "--lab")
    finally:
        on_dgx02("rm -f /etc/provisioner", state)
    assert res.returncode == 7, res.stdout + res.stderr
    assert "dgx02 | Create the configuration directories" in res.stdout
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("│ ")]
    stats = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]] for ln in lines}
    assert stats["dgx02"][2] == "1"  # failed
    for host in ("cp01", "cp02", "cp03", "dgx01", "stor01"):
        assert stats[host][2] == "0" and stats[host][3] == "0", (host, stats[host])
