"""What validate and the roles refuse before a site half-installs: DOCA for RoCE nodes, an
exact pin on Canonical's archive, the site mirror's suites, a DGX OS pin other than the
driver it runs, a containerd without CRI v1, and a DCGM diagnostic that reports Fail (the
upgrade's gate as the install's). The roles' checks are evaluated from their own files,
with Ansible's own filters where they use them."""

from __future__ import annotations

import base64

import pytest
import yaml

from provisioner import render
from provisioner.errors import InventoryError
from provisioner.inventory import load
from tests.conftest import (
    FIXTURES,
    ROOT,
    ansible_eval,
    edited_example,
    holds,
    role_task,
    run_assert,
)

SITES = FIXTURES / "sites"


def test_roce_nodes_need_doca_unless_dgx_os_brings_its_own(tmp_path):
    """The RoCE QoS runs DOCA-OFED's mlnx_qos and cma_roce_tos: without software.doca a RoCE
    node on Ubuntu would fail it at every boot (fixture invalid/roce_without_doca.yaml)."""
    from provisioner.inventory.checks import check
    site = tmp_path / "s.yaml"
    text = (SITES / "dgx_h100.yaml").read_text()
    assert 'doca: "2.9.1"' in text
    site.write_text(text)
    assert not [f for f in check(load(site)) if f.code == "roce-without-doca"]
    site.write_text(text.replace('  doca: "2.9.1"', "  os: ubuntu-24.04"))
    hit = [f for f in check(load(site)) if f.code == "roce-without-doca"]
    assert hit and hit[0].severity.value == "error" and "gpu01 has" in hit[0].message
    site.write_text(text.replace('  doca: "2.9.1"', "  os: dgx-os-6"))
    assert not [f for f in check(load(site)) if f.code == "roce-without-doca"]


@pytest.mark.parametrize(("driver", "warned"), [
    ('{branch: "570", version: "570.124.06", kernel_modules: auto}', False),  # open on H100
    ('{branch: "570", version: "570.124.06", kernel_modules: proprietary}', True),
    ('{branch: "550", kernel_modules: auto}', True),  # auto is proprietary before 560
    ('{branch: "550", kernel_modules: open}', False)])
def test_roce_gpu_nodes_on_proprietary_modules_are_told_gpudirect_rdma_is_missing(
        tmp_path, driver, warned):
    """GPUDirect RDMA goes through DMA-BUF with the open modules; with the proprietary ones
    it needs nvidia-peermem built against DOCA, which the roles do not build: validate says
    so for the GPU nodes on a RoCE network, with the fix."""
    from provisioner.inventory.checks import check
    site = tmp_path / "s.yaml"
    text = (SITES / "dgx_h100.yaml").read_text()
    pinned = '{branch: "570", version: "570.124.06", kernel_modules: auto}'
    assert pinned in text
    site.write_text(text.replace(pinned, driver))
    hits = [f for f in check(load(site)) if f.code == "gpudirect-rdma-without-dma-buf"]
    assert bool(hits) is warned
    if warned:
        assert hits[0].severity.value == "warning" and "gpu01 is a GPU node" in hits[0].message
        assert "kernel_modules: open" in hits[0].hint
        # DGX OS brings its own driver and peer-memory setup: the roles set neither there
        site.write_text(text.replace(pinned, driver).replace('  doca: "2.9.1"',
                                                             "  os: dgx-os-6"))
        assert not [f for f in check(load(site)) if f.code == "gpudirect-rdma-without-dma-buf"]


@pytest.mark.parametrize(("roce", "refused"), [
    ("dscp: 26, priority: 3", {}),
    ("dscp: 26, priority: 4", {"priority": "set priority: 3, or a DSCP from 32 to 39"}),
    ("dscp: 34, priority: 4", {}),
    ("dscp: 26, priority: 3, cnp_dscp: 46, cnp_priority: 6",
     {"cnp_priority": "set cnp_priority: 5, or a DSCP from 48 to 55"})])
def test_roce_priorities_are_the_ones_the_hosts_nic_maps_the_dscp_to(tmp_path, roce, refused):
    """The host trusts DSCP and keeps the NIC's default map (priority = DSCP / 8): a site
    priority off it would get PFC on a priority the host never sends on."""
    from provisioner.inventory.checks import check
    site = tmp_path / "s.yaml"
    text = (SITES / "dgx_h100.yaml").read_text()
    assert "dscp: 26, priority: 3}" in text
    site.write_text(text.replace("dscp: 26, priority: 3}", roce + "}"))
    hits = {f.location.key_path.rsplit(".", 1)[-1]: f for f in check(load(site))
            if f.code == "roce-priority-off-the-host-map"}
    assert {k: f.hint for k, f in hits.items()} == refused
    assert all(f.severity.value == "error" and f.location.line == 15 for f in hits.values())


@pytest.mark.parametrize(("roce", "mode", "refused"), [
    ("dscp: 26, priority: 3", "lossless", False), ("dscp: 34, priority: 4", "lossless", False),
    ("dscp: 40, priority: 5", "lossless", True), ("dscp: 40, priority: 5", "lossy", False)])
def test_sonic_lossless_roce_stays_on_the_priorities_sonic_buffers(tmp_path, roce, mode,
                                                                  refused):
    """SONiC gives only priorities 3 and 4 lossless buffers itself: lossless RoCE on another
    priority would have PFC without headroom, so validate refuses it where a switch runs
    SONiC, naming software.roce.priority."""
    from provisioner.inventory.checks import check
    from tests.conftest import edited_example
    site = edited_example(tmp_path, "roce: {dscp: 26, priority: 3, cnp_dscp: 48, "
                          "cnp_priority: 6, mode: lossless}",
                          f"roce: {{{roce}, cnp_dscp: 48, cnp_priority: 6, mode: {mode}}}")
    placements = site / "placements.yaml"
    placements.write_text(placements.read_text().replace("os: cumulus", "os: sonic"))
    hits = [f for f in check(load(site)) if f.code == "sonic-lossless-priority"]
    assert bool(hits) is refused
    if hits:
        assert hits[0].severity.value == "error"
        assert hits[0].location.key_path == "software.roce.priority"
        assert "leaf01" in hits[0].message


def test_an_exact_pin_on_canonicals_archive_is_warned_about(tmp_path):
    """Ubuntu's archive indexes one build per pocket: an exact driver pin from it resolves
    only until the next build, unless the site's own mirror keeps it."""
    from provisioner.inventory.checks import check
    site = tmp_path / "s.yaml"
    text = (SITES / "dgx_h100.yaml").read_text()
    pinned = '{branch: "570", version: "570.124.06", kernel_modules: auto}'
    assert pinned in text

    def warned(driver: str, extra: str = "") -> list[str]:
        site.write_text(text.replace(pinned, driver).replace("software:\n",
                                                             "software:\n" + extra))
        return [f.severity.value for f in check(load(site)) if f.code == "canonical-pin-moves"]

    assert warned(pinned.replace("}", ", source: canonical}")) == ["warning"]
    assert warned('{branch: "570", kernel_modules: auto, source: canonical}') == []
    assert warned(pinned) == []  # NVIDIA's repository keeps every build
    assert warned(pinned.replace("}", ", source: canonical}"),
                  "  mirror: http://10.0.0.5/ubuntu\n") == []


def test_on_dgx_os_the_pin_must_be_the_driver_dgx_os_runs():
    """DGX OS keeps its own driver while fabric manager and nscq go in at the site's pin:
    a pin other than the loaded driver is refused before fabric manager is installed."""
    tasks = yaml.safe_load((ROOT / "roles/nvidia_driver/tasks/main.yml").read_text())
    names = [t["name"] for t in tasks]
    read = role_task("nvidia_driver", "Read the driver DGX OS runs")
    check = role_task("nvidia_driver", "Refuse a driver pin other than the one DGX OS runs")
    assert read["ansible.builtin.slurp"]["src"] == "/sys/module/nvidia/version"
    assert names.index(check["name"]) < names.index("Install the NVIDIA driver")

    def pin_holds(loaded: str) -> bool:
        content = base64.b64encode(loaded.encode()).decode()
        return all(holds(cond, nvidia_driver_dgx_os_loaded={"content": content},
                         nvidia_driver_version="570.124.06")
                   for cond in check["ansible.builtin.assert"]["that"])

    assert pin_holds("570.124.06\n") and not pin_holds("570.133.20\n")


@pytest.mark.parametrize(("installed", "mirror", "kubernetes", "ok"), [
    ("1.5.9-0ubuntu3", "", "1.31.4", False),  # Ubuntu 22.04's release pocket: no CRI v1
    ("1.6.12-0ubuntu1~22.04.1", "", "1.31.4", True),
    # certs.d/_default (the site's one registry mirror) came in 1.6.17 and 1.7.0
    ("1.6.12-0ubuntu1~22.04.1", "http://10.0.0.5:5000", "1.31.4", False),
    ("1.6.20~ds1-1+b1", "http://10.0.0.5:5000", "1.31.4", True),  # Debian 12 (the lab's)
    ("1.7.12-0ubuntu2~22.04.1", "", "1.31.4", True),
    ("2.0.2-0ubuntu1", "http://m", "1.31.4", True), ("1:1.7.27-1", "", "1.35.0", True),
    # 1.36 and 1.37 still fall back to the kubelet's cgroupDriver (kubernetes#139121)
    ("1:1.7.27-1", "", "1.36.0", True), ("1.7.28-0ubuntu1", "http://m", "1.37.1", True),
    # Kubernetes 1.38 and later: containerd 2, with or without a mirror
    ("1:1.7.27-1", "", "1.38.0", False), ("1.7.28-0ubuntu1", "http://m", "1.38.0", False),
    ("2.0.2-0ubuntu1", "http://m", "1.38.0", True), ("2.1.4-1", "", "1.39.1", True)])
def test_a_containerd_the_kubelet_cannot_use_or_the_mirror_default_is_refused(
        tmp_path, installed, mirror, kubernetes, ok):
    """The role reads containerd's package version and refuses one the kubelet of the
    site's Kubernetes cannot use (no CRI v1; containerd 1.x from Kubernetes 1.38, whose floor
    render writes), or, where the site pulls through a registry mirror, one that ignores
    it; evaluated with Ansible's own filters, as the play does."""
    task = role_task("container_runtime", "Refuse a containerd without CRI v1 (or, with a "
                     "registry mirror, without _default)")
    defaults = yaml.safe_load((ROOT / "roles/container_runtime/defaults/main.yml").read_text())
    site = edited_example(tmp_path, 'version: "1.35.8"', f'version: "{kubernetes}"')
    rendered = yaml.safe_load((render.render(load(site), tmp_path / "o").out
                               / "inventory/group_vars/all.yml").read_text())
    ctx = {"container_runtime_containerd_version": {"stdout": installed, "rc": 0},
           "container_runtime_registry_mirror": mirror,
           **{k: rendered.get(k, defaults[k]) for k in (
               "container_runtime_containerd_min_version",
               "container_runtime_containerd_mirror_min_version")}}
    holds_, msg = run_assert(task, **ctx)
    assert holds_ is ok
    assert msg


def test_the_upgrade_gate_fails_a_diagnostic_as_the_install_gate_does():
    """A DCGM diagnostic that reports Fail fails the node in both gates, whatever its exit
    code (the upgrade's gate used to read the exit code only): both run dcgm's diag.yml."""
    diag = role_task("dcgm", "Health gate - dcgmi diag", file="tasks/diag.yml")
    reg, cond = diag["register"], diag["failed_when"]
    assert [holds(cond, **{reg: {"rc": rc, "stdout": out}})
            for rc, out in ((0, "| Memory | Pass |"), (0, "| Memory | Fail - GPU 3 |"),
                            (226, "| Memory | Fail |"), (1, ""))] == [False, True, True, True]
    assert role_task("dcgm", "Run the DCGM diagnostic as a health gate")[
        "ansible.builtin.import_tasks"] == "diag.yml"
    gate = role_task("upgrade_gate", "Run the DCGM diagnostic at the configured level")
    assert gate["ansible.builtin.include_role"]["tasks_from"] == "diag.yml"
    assert gate["vars"]["dcgm_diag_run_level"] == "{{ upgrade_gate_dcgm_level }}"


@pytest.mark.parametrize(("lines", "runs"), [
    (["0, Disabled, GPU-a", "1, Disabled, GPU-b"], True),
    (["0, [N/A], GPU-a"] * 8, True),  # V100: no MIG
    (["0, Enabled, GPU-a", "1, Disabled, GPU-b"], False)])
def test_the_diagnostic_is_not_run_on_gpus_in_mig_mode_and_says_so(lines, runs):
    """DCGM refuses a GPU in MIG mode (NVIDIA/DCGM#31): a partitioned node failed every run
    of up and every upgrade round."""
    defaults = yaml.safe_load((ROOT / "roles/dcgm/defaults/main.yml").read_text())
    mig = ansible_eval(defaults["dcgm_mig_gpus"], dcgm_mig={"stdout_lines": lines})
    diag = role_task("dcgm", "Health gate - dcgmi diag", file="tasks/diag.yml")
    said = role_task("dcgm", "Say so when the diagnostic cannot run (GPUs in MIG mode)",
                     file="tasks/diag.yml")
    assert holds(diag["when"], dcgm_mig_gpus=mig) is runs
    assert holds(said["when"], dcgm_mig_gpus=mig) is not runs
    if not runs:
        assert "(GPU 0)" in ansible_eval(said["ansible.builtin.debug"]["msg"],
                                         dcgm_mig_gpus=mig, dcgm_diag_run_level=3)


GPUS_NOW = ["0, Disabled, GPU-aaa", "1, Disabled, GPU-bbb"]


@pytest.mark.parametrize(("passed", "site", "level"), [
    (None, 3, 3),  # never passed: the site's level (a new node, its burn-in)
    ("3 GPU-aaa,GPU-bbb\n", 3, 1),  # passed it once: up on a node in service runs level 1
    ("1 GPU-aaa,GPU-bbb\n", 3, 3),  # the site raised its level since
    ("3 GPU-aaa,GPU-ccc\n", 3, 3),  # a GPU was replaced since: diagnosed again
    ("3\n", 3, 3),  # a record without the GPUs
    ("3 GPU-aaa,GPU-bbb\n", 1, 1)])
def test_the_install_gate_runs_the_sites_level_until_a_nodes_gpus_passed_it(
        passed, site, level):
    """Level 3 is about 15 minutes of full GPU load, and `provision up` runs on nodes in
    service: a node runs the site's level until its GPUs pass it once."""
    defaults = yaml.safe_load((ROOT / "roles/dcgm/defaults/main.yml").read_text())
    read = {"content": base64.b64encode(passed.encode()).decode()} if passed else {
        "failed": True, "msg": "file not found"}
    ctx = {"dcgm_diag_passed": read, "dcgm_diag_level": site,
           "dcgm_mig": {"stdout_lines": GPUS_NOW}}
    ctx["dcgm_gpu_uuids"] = ansible_eval(defaults["dcgm_gpu_uuids"], **ctx)
    ctx["dcgm_diag_passed_record"] = ansible_eval(defaults["dcgm_diag_passed_record"], **ctx)
    got = ansible_eval(defaults["dcgm_diag_run_level"], **ctx)
    assert int(got) == level
    record = role_task("dcgm", "Record that this node passed the site's diagnostic level")
    assert record["ansible.builtin.copy"]["dest"] == "{{ dcgm_diag_passed_file }}"
    assert ansible_eval(record["ansible.builtin.copy"]["content"], **ctx) == \
        f"{site} GPU-aaa,GPU-bbb\n"
    assert holds(record["when"], dcgm_diag={"changed": False}, dcgm_diag_run_level=got,
                 dcgm_diag_level=site) is (level == site)
    assert not holds(record["when"], dcgm_diag={"skipped": True}, dcgm_diag_run_level=site,
                     dcgm_diag_level=site)


def test_the_mirror_suites_are_named_once_and_only_with_a_mirror(tmp_path):
    from provisioner.inventory.checks import check
    site = tmp_path / "s.yaml"
    text = (SITES / "dgx_h100.yaml").read_text()
    site.write_text(text.replace("software:\n", "software:\n  mirror_suites: [jammy]\n"))
    hit = [f for f in check(load(site)) if f.code == "mirror-suites-without-mirror"]
    assert hit and hit[0].severity.value == "warning"
    site.write_text(text.replace("software:\n", "software:\n  mirror: http://10.0.0.5/ubuntu\n"
                                 "  mirror_suites: [jammy, jammy]\n"))
    with pytest.raises(InventoryError, match="names a suite twice"):
        load(site)


def test_the_lab_serves_its_own_suites_in_place_of_a_sites():
    """A site's mirror_suites name its own mirror's; under the lab's overlay the lab mirror's
    replace them, and a site without them keeps the role's default."""
    from provisioner.lab import overlay as lab_overlay
    lab = {"bmc": {}, "software": {"mirror": "http://10.250.0.1:8000/", "mirror_key": "k.asc",
                                   "mirror_suites": ["bookworm", "bookworm-updates"]}}
    own = {"software": {"mirror": "http://mirror.site/ubuntu", "mirror_suites": ["jammy"]}}
    lab_overlay.apply(own, lab)
    assert own["software"] == lab["software"]
    bare: dict[str, dict[str, object]] = {"software": {}}
    lab_overlay.apply(bare, lab)
    assert "mirror_suites" not in bare["software"] and bare["software"]["mirror_key"] == "k.asc"


def test_a_dropped_driver_pin_goes_and_so_does_a_pinning_package_of_another_version():
    """Following a branch after an exact pin (as canonical-pin-moves advises) must not leave
    the node held at the old version by the preferences file or NVIDIA's pinning package."""
    gone = role_task("nvidia_driver", "Remove the driver pin when the site pins no version",
                     "tasks/install.yml")
    assert gone["ansible.builtin.file"] == {
        "path": "/etc/apt/preferences.d/provisioner-nvidia-driver.pref", "state": "absent"}
    pin = role_task("nvidia_driver", "Pin the driver, fabric manager and nscq at exactly the "
                    "driver version", "tasks/install.yml")
    assert pin["ansible.builtin.template"]["dest"] == gone["ansible.builtin.file"]["path"]
    for version, pinned, removed in (("", [], True), ("570.124.06", [], True),
                                     ("570.124.06", ["nvidia-driver-*"], False)):
        assert holds(gone["when"], ansible_facts={"os_family": "Debian"},
                     nvidia_driver_version=version,
                     nvidia_driver_pinned_packages=pinned) is removed
    stale = role_task("nvidia_driver", "Remove NVIDIA pinning packages of another version",
                      "tasks/install.yml")
    expr = stale["vars"]["nvidia_driver_pinning_stale"]
    installed = {"stdout_lines": ["nvidia-driver-pinning-580.95.05 installed",
                                  "nvidia-driver-pinning-590 installed",
                                  "nvidia-driver-pinning-575 config-files"]}
    found = ansible_eval(expr, nvidia_driver_pinning_installed=installed,
                         nvidia_driver_pinning_packages=["nvidia-driver-pinning-590"])
    assert found == ["nvidia-driver-pinning-580.95.05"]
    # DGX OS keeps its own driver and whatever holds it: install.yml, where the removal
    # lives, is not included there
    included = role_task("nvidia_driver", "Install the NVIDIA driver")["when"]
    for os_name, acts in (("ubuntu-24.04", True), ("dgx-os-7", False)):
        assert (holds(included, nvidia_driver_os=os_name)
                and holds(stale["when"], ansible_facts={"os_family": "Debian"},
                          nvidia_driver_pinning_stale=["nvidia-driver-pinning-580.95.05"])
                ) is acts


def test_dkms_modules_are_refused_on_a_secure_boot_host():
    """DKMS modules signed with a key the firmware does not trust would not load after the
    reboot: base_os reads mokutil once, whatever the tags; the driver role sends such a host
    to Canonical's signed modules and roce_host stops before DOCA's; a host with Ubuntu's
    MOK enrolled, or a shim that does not validate, goes on."""
    read = role_task("base_os", "Read whether Secure Boot is on and the machine owner key "
                     "enrolled", "tasks/secure_boot.yml")
    note = role_task("base_os", "Note whether Secure Boot would refuse modules built with "
                     "DKMS here", "tasks/secure_boot.yml")
    imported = role_task("base_os", "Read whether Secure Boot would refuse modules built "
                         "with DKMS here")
    assert imported["ansible.builtin.import_tasks"] == "secure_boot.yml"
    assert imported["tags"] == ["always"]  # whatever --tags a run names
    assert read["ansible.builtin.command"]["argv"] == "{{ item }}" and read["loop"] == [
        ["mokutil", "--sb-state"], ["mokutil", "--test-key", "/var/lib/shim-signed/mok/MOK.der"]]
    enrolled = "/var/lib/shim-signed/mok/MOK.der is already enrolled\n"
    missing = "/var/lib/shim-signed/mok/MOK.der is not enrolled\n"
    driver = role_task("nvidia_driver", "Refuse NVIDIA's DKMS modules on a Secure Boot host "
                       "without an enrolled key", "tasks/install.yml")
    doca = role_task("roce_host", "Refuse DOCA's DKMS modules on a Secure Boot host without "
                     "an enrolled key")

    def goes_on(sb: str, mok: str, results: list[dict[str, str]] | None = None) -> bool:
        found = {"results": [{"stdout": sb}, {"stdout": mok}] if results is None else results}
        ctx = {"base_os_secure_boot": found}
        ctx |= {k: ansible_eval(v, **ctx) for k, v in note["vars"].items()}
        refuses = ansible_eval(note["ansible.builtin.set_fact"][
            "base_os_secure_boot_refuses_dkms"], **ctx)
        verdicts = {holds(t["ansible.builtin.assert"]["that"],
                          base_os_secure_boot_refuses_dkms=refuses) for t in (driver, doca)}
        assert len(verdicts) == 1  # the two roles agree
        return verdicts.pop()

    assert not goes_on("SecureBoot enabled\n", missing)
    assert goes_on("SecureBoot enabled\n", enrolled)
    assert goes_on("SecureBoot enabled\nSecureBoot validation is disabled in shim\n", missing)
    assert goes_on("SecureBoot disabled\n", missing)
    assert goes_on("EFI variables are not supported on this system\n", "")
    assert goes_on("", "", results=[{}, {}])  # mokutil missing: nothing printed
    assert goes_on("", "", results=[])  # not read (not Debian): results absent
    assert "source: canonical" in driver["ansible.builtin.assert"]["fail_msg"]
    assert "nvidia_driver_source == 'nvidia'" in driver["when"]
    assert "roce_host_install_doca" in doca["when"]
    # a run without base_os (a role alone, --skip-tags base_os) reads the state itself
    # rather than passing: each role includes base_os's reading where the fact is missing
    for role, file, task in (("nvidia_driver", "tasks/install.yml", driver),
                             ("roce_host", "tasks/main.yml", doca)):
        tasks = yaml.safe_load((ROOT / "roles" / role / file).read_text())
        names = [t["name"] for t in tasks]
        include = tasks[names.index(task["name"]) - 1]
        assert include["ansible.builtin.include_role"] == {"name": "base_os",
                                                           "tasks_from": "secure_boot.yml"}
        assert include["when"] == task["when"] + \
            " and base_os_secure_boot_refuses_dkms is not defined"
        assert not holds(include["when"], ansible_facts={"os_family": "Debian"},
                         nvidia_driver_source="nvidia", roce_host_install_doca=True,
                         base_os_secure_boot_refuses_dkms=False)
        assert holds(include["when"], ansible_facts={"os_family": "Debian"},
                     nvidia_driver_source="nvidia", roce_host_install_doca=True)
    tasks = [t["name"] for t in yaml.safe_load((ROOT / "roles/roce_host/tasks/main.yml")
                                               .read_text())]
    assert tasks.index(doca["name"]) < tasks.index("Install DOCA (MOFED)")


def test_fabric_manager_is_held_at_one_driver_build(tmp_path):
    """Fabric manager (and IMEX) start only at exactly the driver's version: a version of
    its own holds nothing without the driver's, and a branch alone is warned about on
    NVSwitch and IMEX sites (a node added later gets whatever build is newest then)."""
    from provisioner.inventory.checks import check

    def codes(old: str, new: str, fixture: str = "dgx_h100.yaml") -> dict[str, str]:
        site = tmp_path / fixture
        text = (SITES / fixture).read_text()
        assert old in text
        site.write_text(text.replace(old, new))
        return {f.code: f.severity.value for f in check(load(site))}

    pinned = 'version: "570.124.06", '
    assert "fabric-manager-follows-branch" not in codes(pinned, pinned)
    assert codes(pinned, "")["fabric-manager-follows-branch"] == "warning"
    # Canonical's fabric manager depends on its exact driver build: apt keeps them in step
    canonical = codes(pinned, 'source: canonical, ')
    assert "fabric-manager-follows-branch" not in canonical
    gb = 'version: "580.95.05", '  # IMEX on GB200
    assert codes(gb, "", "gb200.yaml")["fabric-manager-follows-branch"] == "warning"
    tail = 'kernel_modules: auto}\n  cuda: "12.8"\n  fabric_manager: {enabled: auto'
    alone = codes(pinned + tail + "}", tail + ', version: "570.124.06"}')
    assert alone["fabric-manager-version-without-driver-version"] == "error"
    assert "fabric-manager-follows-branch" not in alone
