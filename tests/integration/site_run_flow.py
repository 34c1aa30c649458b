"""The rendered site.yml run for real against SSH test hosts (one network namespace, sshd
and copy-on-write Debian root per node), on tests/integration/test_up.py's lab: the
end-to-end `provision up` there is the first converge (its configure step runs site.yml
through the runner), and these check what it did, then run site.yml again (no lab and no
converge of their own: CI time).

What a host without a GPU or an init system can do runs for real (files, host name, and
every package install, with apt from the lab's signed mirror); the rest is skipped by tag
(the lab profile's skip list in the rendered ansible.cfg), and the checks assert which did
what.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from provisioner import profile, render, results, runner
from provisioner.lab import mirror
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.state.dir import state_dir
from provisioner.workflows.up import state_path
from tests.integration.conftest import provision

# A vendor source the node came with (DGX OS's repository packages write such files): with
# the site's mirror set, apt must not try the internet host it names. on dgx02 before `up`.
VENDOR = "deb https://repo.download.nvidia.com/baseos/ubuntu/jammy/x86_64/ jammy common"


def before_the_first_converge(state: Any) -> None:
    on_dgx02(f"echo '{VENDOR}' > /etc/apt/sources.list.d/dgx.list", state)


def upper(state, host: str) -> Path:
    return Path(next(h.upper for h in state.ssh_hosts if h.name == host))


def on_host(host: str, command: str, state) -> str:
    """`command` on a lab host over SSH with the lab's key; its stdout."""
    key = Path(state.ssh_hosts[0].upper).parents[1] / "id_ed25519"
    address = next(h.address for h in state.ssh_hosts if h.name == host)
    return subprocess.run(["ssh", "-n", "-i", str(key), "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                           f"root@{address}", command], check=True, timeout=60,
                          capture_output=True, text=True).stdout


def on_dgx02(command: str, state) -> None:
    on_host("dgx02", command, state)


def dpkg_status(root: Path) -> dict[str, tuple[str, str]]:
    """Package -> (Status, Version) from a host's dpkg database."""
    out = {}
    for stanza in (root / "var/lib/dpkg/status").read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if ": " in line and not line.startswith(" "))
        if "Package" in fields:
            out[fields["Package"]] = (fields.get("Status", ""), fields.get("Version", ""))
    return out


def playbook_run(site: Path, playbook: str) -> runner.RunResult:
    """Every run of `playbook` an `up` made on the site, read back from ansible-runner's
    artifacts (job events, as the runner reads them live) as one result, in run order."""
    events: list[runner.TaskEvent] = []
    failed = False
    runs = 0
    root = state_path(load(site)).parent / "ansible" / "artifacts"  # up's project
    artifacts = sorted(root.iterdir(), key=lambda d: d.stat().st_mtime)
    for run_dir in artifacts:
        raw = [json.loads(f.read_text()) for f in (run_dir / "job_events").glob("*.json")]
        raw.sort(key=lambda ev: int(ev.get("counter", 0)))
        if not any(ev.get("event") == "playbook_on_start"
                   and Path(str(ev.get("event_data", {}).get("playbook", ""))).name == playbook
                   for ev in raw):
            continue
        runs += 1
        status = (run_dir / "status").read_text().strip()
        failed |= status != "successful" or (run_dir / "rc").read_text().strip() != "0"
        events += [e for e in map(runner.to_event, raw) if e is not None]
    assert runs, f"no {playbook} run under {root}"
    hosts = {e.host: runner.HostStats() for e in events}
    return runner.RunResult(playbook=playbook, status="failed" if failed else "successful",
                            rc=int(failed), hosts=hosts, events=events)


def check_the_first_converge(site: Path, state: Any) -> None:
    """What `up`'s configure step (site.yml, the roles for real) did on the hosts."""
    first = playbook_run(site, "site.yml")
    assert first.ok, [f"{e.host} | {e.task}: {e.message}" for e in first.failures]
    aside = upper(state, "dgx02") / "etc/apt/sources.list.d"
    assert not (aside / "dgx.list").exists()
    assert (aside / "dgx.list.provisioner.disabled").read_text().strip() == VENDOR
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
    assert "kubernetesVersion: v1.35.8" in init and "podSubnet: 10.244.0.0/16" in init
    assert 'default_runtime_name = "runc"' in (cp / "etc/containerd/config.toml").read_text()
    assert not (upper(state, "stor01") / "etc/containerd").exists()  # storage: no Kubernetes
    assert not Path("/etc/provisioner/roce-qos.env").exists()  # the real machine untouched

    # the payload installed with real apt from the signed lab mirror (signed-by, no other
    # source): real Debian packages, vendor stand-ins at the site's pinned versions
    lab = results.lab_report(state.site, state, with_liveness=True)
    assert lab.running and lab.mirror is not None and lab.mirror.url == state.mirror["url"]
    assert lab.mirror.real_debs > 10 and lab.mirror.standin_debs > 20
    sources = (dgx / "etc/apt/sources.list").read_text()
    # one line per suite, the role's default (the host's release and its update pockets),
    # each verified by apt against the suites the lab serves
    lines = [ln.split() for ln in sources.splitlines() if ln.startswith("deb ")]
    assert [ln[3] for ln in lines] == list(mirror.SUITES), sources
    assert all(ln[1:3] == ["[signed-by=/etc/apt/keyrings/provisioner-mirror.asc]",
                           state.mirror["url"]] for ln in lines), sources
    assert (dgx / "etc/apt/keyrings/provisioner-mirror.asc").read_text() == \
        Path(state.mirror["key_file"]).read_text()
    pkgs = dpkg_status(dgx)
    # the mirror also holds 570.86.15 and 570.133.20 (and Kubernetes 1.35.7, 1.35.9): the
    # pins choose, not the archive's newest
    for name, version in {"nvidia-driver-570-open": "570.124.06-0ubuntu1",
                          "libnvidia-compute-570": "570.124.06-0ubuntu1",
                          "nvidia-fabricmanager-570": "570.124.06-1",
                          "libnvidia-nscq-570": "570.124.06-1",
                          "kubeadm": "1.35.8-1.1", "kubelet": "1.35.8-1.1"}.items():
        assert pkgs[name][0].endswith(" ok installed") and pkgs[name][1] == version, \
            (name, pkgs.get(name))
    assert pkgs["kubeadm"][0] == "hold ok installed"  # held at the pinned version
    assert pkgs["containerd"][0] == "install ok installed"
    assert (dgx / "usr/bin/containerd").is_file()  # a real Debian package
    assert (dgx / "usr/share/doc/doca-ofed/PROVISIONER-LAB-STAND-IN").is_file()
    # the headers of the kernel the host runs, before the DKMS builds (a stand-in)
    headers = profile.lab_kernel_headers()
    if headers:  # None where the machine's release cannot name a package: skipped by tag
        assert pkgs[headers][0] == "install ok installed", pkgs.get(headers)
        assert "Install the running kernel's headers for DKMS" in {
            e.task for e in first.real_changes if e.host == "dgx01"}
    assert not (dgx / "usr/bin/nvidia-smi").exists()  # stand-ins ship no binaries
    # DCGM at the site's pin (4.5.1) although the mirror's newest is 4.5.2 (bundle 2026.11)
    assert pkgs["datacenter-gpu-manager-4-core"][1] == "1:4.5.1-1", pkgs.get(
        "datacenter-gpu-manager-4-core")
    # the NVIDIA Container Toolkit's release packages at the site's pin, 1.17.4, held by an
    # apt pin, although the mirror's newest is 1.17.5 (bundle 2026.11)
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                 "libnvidia-container-tools", "libnvidia-container1"):
        assert pkgs[name][1] == "1.17.4-1", (name, pkgs.get(name))
    pref = (dgx / "etc/apt/preferences.d/provisioner-container-toolkit.pref").read_text()
    assert "Pin: version 1.17.4-*" in pref and "Pin-Priority: 1001" in pref
    assert "nvidia-driver-570-open" not in dpkg_status(cp)  # no GPU, no driver

    # what a lab host cannot do (a GPU, a cluster, the kernel, an init system) is skipped by
    # tag: it never runs, and nothing runs in check mode
    ran = {e.task for e in first.events}
    assert not ran & {"Read the driver version, persistence mode and model every GPU reports",
                      "Health gate - dcgmi diag",
                      "Check every GPU is visible at the pinned driver",
                      "Initialise the first control plane",
                      "Initialise the cluster and join the further control planes and workers",
                      "Start fabric manager (or IMEX) and enable it at boot",
                      "Check fabric manager (or IMEX) is active before the diagnostic"}
    assert "Install the driver packages (Ubuntu)" in {e.task for e in first.real_changes}
    assert first.simulated == []
    assert "Write the host name for every boot" in ran
    # the new driver's reboot is real: each GPU host's init ended and its launcher booted
    # it again (lab/hosts.py); hosts without a driver did not reboot
    rebooted = {e.host for e in first.real_changes if e.task == "Reboot for the new driver"}
    assert rebooted == {"dgx01", "dgx02"}
    assert {h.name for h in state.ssh_hosts
            if ": reboot\n" in (Path(h.upper).parent / "host.log").read_text()} == rebooted
    real = {e.task for e in first.real_changes}
    assert {"Write the RoCE QoS settings", "Configure containerd (systemd cgroups, NVIDIA "
            "runtime on GPU nodes)", "Kernel parameters for GPU and RDMA hosts"} <= real


def runs_again_changing_nothing_but_a_broken_host_fails_alone(lab: tuple[Path, Any]) -> None:
    """site.yml again over the converged lab through the CLI (`provision run --lab`), with
    dgx02 broken by hand (a file where roce_host needs a directory), in one run (a second
    converge of six hosts was the costliest step of CI):

    - the broken host fails at that task, the run exits 7, and every other host finishes
      (0 failed, 0 unreachable in the run's table);
    - nothing changes anywhere: the five others run every role and change nothing, dgx02
      changes nothing before its failure, and dgx01 (the same block) runs every role after
      it; apt's index of the mirror is found on every host, so no host reads the mirror
      again."""
    site, state = lab
    chrony = {h.name: (Path(h.upper) / "etc/chrony/chrony.conf").read_text()
              for h in state.ssh_hosts}
    root = state_dir(site) / "ansible" / "artifacts"  # `provision run`'s project (not up's)
    started = time.time()
    on_dgx02("rm -rf /etc/provisioner && echo broken > /etc/provisioner", state)
    try:
        res = provision("run", str(site), "--lab", timeout=1800)
    finally:
        on_dgx02("rm -f /etc/provisioner", state)
    assert res.returncode == 7, res.stdout + res.stderr
    assert "dgx02 | Create the configuration directories" in res.stdout
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("│ ")]
    stats = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]] for ln in lines}
    assert stats["dgx02"][2] == "1"  # failed
    for host in ("cp01", "cp02", "cp03", "dgx01", "stor01"):
        assert stats[host][2] == "0" and stats[host][3] == "0", (host, stats[host])

    # this run's artifacts, as the runner read them (the render before it replaced the rest)
    (run_dir,) = [d for d in root.iterdir() if (d / "status").stat().st_mtime >= started]
    raw = [json.loads(f.read_text()) for f in (run_dir / "job_events").glob("*.json")]
    raw.sort(key=lambda ev: int(ev.get("counter", 0)))
    events = [e for e in map(runner.to_event, raw) if e is not None]
    assert {e.host for e in events} == set(chrony)
    changed = [e for e in events if e.status == "changed" and not e.check_mode]
    assert changed == [], [
        (e.host, e.task, e.message, chrony[e.host],
         (upper(state, e.host) / "etc/chrony/chrony.conf").read_text()) for e in changed]
    assert [e for e in events if e.check_mode] == []
    assert [(e.host, e.task) for e in events if e.status == "failed"] == [
        ("dgx02", "Create the configuration directories")]
    # dgx01, the same block as dgx02, ran every role of site.yml
    dgx01_roles = {e.role for e in events if e.host == "dgx01"}
    assert {"roce_host", "nvidia_driver", "kubernetes"} <= dgx01_roles, dgx01_roles
    # apt's index of the mirror was found (base_os_mirror_index_names names its files as
    # apt does), so the run did not read the mirror again
    found = {(e.host, e.status) for e in events
             if e.task == "Look for apt's index of the site mirror"}
    assert {h for h, _s in found} == set(chrony) and {s for _h, s in found} == {"ok"}
    assert {e.status for e in events
            if e.task == "Read the package index from the site mirror"} == {"skipped"}


def a_kernel_without_headers_in_the_archive_stops_with_the_reason(
        lab: tuple[Path, Any]) -> None:
    """A node still running a kernel whose headers have left the archive: apt's "no
    package matching" becomes a failure that says why DKMS needs them and what to do (real
    apt against the lab mirror, which lacks this release)."""
    if profile.lab_kernel_headers() is None:
        pytest.skip("this machine's kernel release names no package: the lab skips the "
                    "headers tasks by tag (needs_kernel_headers)")
    site, _state = lab
    loaded = load(site)
    out = render.render(loaded, loaded.base_dir / ".provision" / "ansible", lab=True).out
    gone = "5.15.0-1-superseded"
    res = runner.run_playbook(out, "site.yml", limit="dgx02", tags="nvidia_driver",
                              extravars={"nvidia_driver_kernel_release": gone})
    failed = res.failures
    # apt's failure (rescued), then the rescue's: the run's report ends with the reason
    assert [(e.host, e.task) for e in failed] == [
        ("dgx02", "Install the running kernel's headers for DKMS"),
        ("dgx02", "Stop with what to do about the missing headers")], failed
    assert res.hosts["dgx02"].failed == 1, res.hosts
    why = failed[-1].message
    assert f"linux-headers-{gone} could not be installed" in why
    assert "No package matching" in why  # apt's own reason, kept
    assert "boot a current kernel first" in why and "source canonical" in why
    # nothing after it ran: the driver was not touched on a node that cannot build it
    assert not [e for e in res.events if e.host == "dgx02"
                and e.task == "Install the driver packages (Ubuntu)"]
