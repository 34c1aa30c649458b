"""The NVIDIA payload: package sets per platform and branch, one driver source, version pins,
arm64 for Grace, IMEX's node list, and the order driver -> fabric manager -> DCGM gate.

Golden package lists: tests/golden/payload/packages.yml (UPDATE_GOLDEN=1 rewrites it;
review the diff like code). The facts each list rests on are cited in provisioner/payload.py.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from provisioner import payload, render
from provisioner.inventory import load
from provisioner.inventory.loader import shipped_catalog
from provisioner.inventory.software_models import Software
from tests.conftest import (
    FIXTURES,
    ROOT,
    ansible_eval,
    edited_example,
    fabric_state,
    holds,
    role_task,
    role_template,
    run_assert,
)

SITES = FIXTURES / "sites"
GOLDEN = ROOT / "tests" / "golden" / "payload" / "packages.yml"

# (platform block, software pins): the combinations the golden file holds.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "dgx-1/nvidia-535": ("dgx-1", {"nvidia_driver": {"branch": "535", "version": "535.230.02"},
                                   "cuda": "12.2"}),
    "dgx-a100/nvidia-570": ("dgx-a100", {"nvidia_driver": {"branch": "570",
                                                           "version": "570.124.06"},
                                         "cuda": "12.8"}),
    "dgx-a100/canonical-570": ("dgx-a100", {"nvidia_driver": {
        "branch": "570", "version": "570.124.06", "source": "canonical"}}),
    "dgx-h100/nvidia-580": ("dgx-h100", {"os": "ubuntu-24.04", "nvidia_driver": {
        "branch": "580", "version": "580.95.05"}, "cuda": "13.0"}),
    "dgx-h100/canonical-580": ("dgx-h100", {"os": "ubuntu-24.04", "nvidia_driver": {
        "branch": "580", "version": "580.95.05", "source": "canonical"}}),
    "dgx-h100/nvidia-590-branch-only": ("dgx-h100", {"os": "ubuntu-24.04",
                                                     "nvidia_driver": {"branch": "590"}}),
    "dgx-b200/nvidia-580": ("dgx-b200", {"os": "ubuntu-24.04", "nvidia_driver": {
        "branch": "580", "version": "580.95.05"}, "cuda": "13.0"}),
    "gb200-nvl72-tray/nvidia-580": ("gb200-nvl72-tray", {"os": "ubuntu-24.04", "nvidia_driver": {
        "branch": "580", "version": "580.95.05"}}),
}


def _payload(block_name: str, pins: dict[str, Any]) -> payload.Payload:
    block = shipped_catalog()[block_name]
    sw = Software.model_validate(pins)
    arch = block.gpu.architecture if block.gpu else None
    flavour = "proprietary" if arch == "volta" else "open"
    p = payload.for_block(sw, block, flavour)
    assert p is not None
    return p


def _as_golden(p: payload.Payload) -> dict[str, Any]:
    return {"arch": p.arch, "source": p.source, "fabric_service": p.fabric_service,
            **{role: list(names) for role, names in p.by_role().items()},
            "pinned_at_driver_version": list(p.pinned_at_driver)}


def test_golden_package_lists_per_platform():
    got = {case: _as_golden(_payload(block, pins)) for case, (block, pins) in CASES.items()}
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text("---\n" + yaml.safe_dump(got, sort_keys=True, width=4096))
    assert got == yaml.safe_load(GOLDEN.read_text())


def test_fabric_manager_brings_nscq_and_nvlink5_brings_nvlsm_and_nvsdm():
    a100 = _payload("dgx-a100", CASES["dgx-a100/nvidia-570"][1])
    assert a100.fabric == ("nvidia-fabricmanager-570", "libnvidia-nscq-570")
    b200 = _payload("dgx-b200", CASES["dgx-b200/nvidia-580"][1])
    # DGX OS 7 (580): unversioned fabric manager and nscq; NVLink5 adds nvlsm + libnvsdm
    assert set(b200.fabric) == {"nvidia-fabricmanager", "libnvidia-nscq", "nvlsm", "libnvsdm"}
    h100 = _payload("dgx-h100", CASES["dgx-h100/nvidia-580"][1])
    assert "nvlsm" not in h100.fabric and "libnvsdm" not in h100.fabric
    dgx1 = _payload("dgx-1", CASES["dgx-1/nvidia-535"][1])
    assert dgx1.fabric == () and dgx1.fabric_service == ""  # no NVSwitch on a DGX-1


def test_imex_on_gb200_at_the_driver_version_and_arm64():
    gb = _payload("gb200-nvl72-tray", CASES["gb200-nvl72-tray/nvidia-580"][1])
    assert gb.fabric == ("nvidia-imex",) and gb.fabric_service == "nvidia-imex"
    assert "nvidia-imex" in gb.pinned_at_driver
    assert (gb.arch, gb.repo_arch) == ("arm64", "sbsa")
    assert "nvidia-fabricmanager" not in gb.fabric


def test_dcgm4_package_follows_the_cuda_major():
    assert _payload("dgx-1", CASES["dgx-1/nvidia-535"][1]).dcgm == (
        "datacenter-gpu-manager-4-cuda12",)
    assert _payload("dgx-h100", CASES["dgx-h100/nvidia-580"][1]).dcgm == (
        "datacenter-gpu-manager-4-cuda13",)
    # no CUDA pinned: the newest major the driver runs (580 -> CUDA 13)
    assert _payload("dgx-h100", CASES["dgx-h100/canonical-580"][1]).dcgm == (
        "datacenter-gpu-manager-4-cuda13",)
    # ... and the GPUs can: CUDA 13 drops Volta, so a DGX-1 on 580 takes the CUDA 12 build
    assert _payload("dgx-1", {"nvidia_driver": {"branch": "580", "version": "580.95.05"}}
                    ).dcgm == ("datacenter-gpu-manager-4-cuda12",)


def test_unversioned_names_from_590_chosen_by_the_pinning_package():
    p = _payload("dgx-h100", CASES["dgx-h100/nvidia-590-branch-only"][1])
    assert p.driver == ("nvidia-open",)
    assert p.pinning == ("nvidia-driver-pinning-590",)
    assert p.pinned_at_driver == ()  # no version: the pinning package holds the branch


def test_canonical_source_uses_signed_precompiled_modules_and_its_fabric_manager():
    p = _payload("dgx-h100", CASES["dgx-h100/canonical-580"][1])
    assert p.driver[0] == "linux-modules-nvidia-580-server-open-generic"
    assert p.pinning == ()  # NVIDIA's pinning package belongs to NVIDIA's repository
    assert all("-server" in d for d in p.driver[:2])
    assert p.fabric == ("nvidia-fabricmanager-580", "libnvidia-nscq-580")
    # fabric manager and nscq at exactly the driver version, from the same source
    assert {"nvidia-fabricmanager-580", "libnvidia-nscq-580"} <= set(p.pinned_at_driver)
    assert not any(x.startswith("linux-modules-") for x in p.pinned_at_driver)


def test_cuda_only_when_pinned(tmp_path):
    assert _payload("dgx-h100", CASES["dgx-h100/canonical-580"][1]).cuda == ()
    defaults = yaml.safe_load((ROOT / "roles/cuda_toolkit/defaults/main.yml").read_text())
    assert defaults["cuda_toolkit_version"] == "" and defaults["cuda_toolkit_packages"] == []


def test_apt_pin_is_a_version_preference_not_a_glob_on_the_newest():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROOT / "roles/nvidia_driver")),
                             undefined=jinja2.StrictUndefined)
    text = env.get_template("templates/nvidia-driver.pref.j2").render(
        nvidia_driver_version="570.124.06",
        nvidia_driver_pinned_packages=["nvidia-driver-570-open", "nvidia-fabricmanager-570"])
    stanza = dict(line.split(": ", 1) for line in text.splitlines()
                  if line and not line.startswith("#"))
    assert stanza == {"Package": "nvidia-driver-570-open nvidia-fabricmanager-570",
                      "Pin": "version 570.124.06-*", "Pin-Priority": "1001"}
    for tasks in (ROOT / "roles").glob("*/tasks/*.yml"):
        assert "version_glob" not in tasks.read_text() and "+ '*'" not in tasks.read_text(), tasks


def test_apt_installs_the_pinned_versions_so_an_installed_package_moves():
    """`state: present` with a bare name leaves an installed package where it is: an
    upgrade (or a rollback) only moves it when apt is asked for the version."""
    pins = {**CASES["dgx-a100/nvidia-570"][1], "cuda": "12.8.1",
            "dcgm": {"version": "4.5.2"}}
    sw = Software.model_validate(pins)
    p = _payload("dgx-a100", pins)
    assert p.apt_specs(p.driver, sw) == ["nvidia-driver-570-open=570.124.06-*"]
    assert p.apt_specs(p.fabric, sw) == ["nvidia-fabricmanager-570=570.124.06-*",
                                         "libnvidia-nscq-570=570.124.06-*"]
    assert p.apt_specs(p.dcgm, sw) == ["datacenter-gpu-manager-4-cuda12=1:4.5.2-*"]
    assert p.apt_specs(p.cuda, sw) == ["cuda-toolkit-12-8=12.8.1-*"]
    # nothing pinned: the names, and the repository's newest
    bare = {"os": "ubuntu-24.04", "nvidia_driver": {"branch": "590"}}
    q, sw2 = _payload("dgx-h100", bare), Software.model_validate(bare)
    assert q.apt_specs(q.driver + q.dcgm, sw2) == list(q.driver + q.dcgm)
    # the roles install the specs, and may move back (a rollback)
    for role, task in (("nvidia_driver", "install.yml"), ("fabric_manager", "main.yml"),
                       ("dcgm", "main.yml"), ("cuda_toolkit", "main.yml")):
        tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / task).read_text())
        apt = [t["ansible.builtin.apt"] for t in tasks if "ansible.builtin.apt" in t
               and "package_specs" in str(t["ansible.builtin.apt"].get("name"))]
        assert len(apt) == 1 and apt[0]["allow_downgrade"] is True, role


def _tasks(role: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text())


def test_repository_is_added_before_the_driver_and_pins_before_install():
    names = [t["name"] for t in yaml.safe_load(
        (ROOT / "roles/nvidia_driver/tasks/install.yml").read_text())]
    repo = names.index("Add NVIDIA's CUDA repository before the driver")
    pin = names.index("Pin the driver, fabric manager and nscq at exactly the driver version")
    pinning = names.index("Install NVIDIA's pinning package before the driver")
    driver = names.index("Install the driver packages (Ubuntu)")
    assert repo < pin < pinning < driver


def test_nvswitch_order_driver_then_fabric_manager_running_then_dcgm_gate():
    plays = yaml.safe_load((ROOT / "playbooks/site.yml").read_text())
    order = [r["role"] for play in plays for r in play.get("roles", [])]
    assert order.index("nvidia_driver") < order.index("fabric_manager") < order.index("dcgm")
    fm_play = next(p for p in plays if any(r["role"] == "fabric_manager"
                                           for r in p.get("roles", [])))
    assert set(fm_play["hosts"].split(":")) == {"nvswitch_nodes", "imex_nodes"}
    fm = [t["name"] for t in _tasks("fabric_manager")]
    assert fm.index("Start fabric manager (or IMEX) and enable it at boot") < fm.index(
        "Wait for fabric manager (or IMEX) to be active, or say why it is not")
    dcgm = [t["name"] for t in _tasks("dcgm")]
    assert dcgm.index("Start the DCGM host engine (again where it runs replaced libraries), "
                      "enabled at boot") < dcgm.index("Wait for the DCGM host engine to answer")
    assert dcgm.index("Wait for the DCGM host engine to answer") < dcgm.index(
        "Check fabric manager (or IMEX) is active before the diagnostic") < \
        dcgm.index("Run the DCGM diagnostic as a health gate")
    # the engine is a simple unit: systemd says started before it listens, so both gates
    # retry an answer from it first (the upgrade's through the same task file)
    wait = role_task("dcgm", "Wait for the DCGM host engine to answer",
                     file="tasks/engine_wait.yml")
    assert wait["until"] == "dcgm_discovery.rc == 0" and "retries" in wait
    assert wait["tags"] == ["needs_gpu"]
    gate = [t["name"] for t in _tasks("upgrade_gate")]
    assert gate.index("Wait for the DCGM host engine to answer (it restarts with the node)") < \
        gate.index("Run the DCGM diagnostic at the configured level")


def test_imex_nodes_config_lists_the_nvlink_domain(tmp_path):
    loaded = load(SITES / "gb200.yaml")
    out = render.render(loaded, tmp_path / "o").out
    hv = {h: yaml.safe_load((out / f"inventory/host_vars/{h}.yml").read_text())
          for h in ("gb01", "gb02", "gb03", "cp01")}
    # gb01 and gb02 share rack r01 (one NVL72 domain); gb03 is alone in r02
    assert hv["gb01"]["fabric_manager_imex_peers"] == ["10.1.0.11", "10.1.0.12"]
    assert hv["gb02"]["fabric_manager_imex_peers"] == ["10.1.0.11", "10.1.0.12"]
    assert hv["gb03"]["fabric_manager_imex_peers"] == ["10.1.0.13"]
    assert "fabric_manager_imex_peers" not in hv["cp01"]
    assert hv["gb01"]["provisioner_apt_arch"] == "arm64"
    task = next(t for t in _tasks("fabric_manager")
                if t["name"] == "Write the NVLink domain's nodes for IMEX")
    assert task["ansible.builtin.copy"]["dest"].endswith("/nodes_config.cfg")
    content = ansible_eval(task["ansible.builtin.copy"]["content"], **hv["gb01"])
    assert content.splitlines() == ["10.1.0.11", "10.1.0.12"]  # one address per line


def test_nvlink_domain_overrides_the_rack(tmp_path):
    site = tmp_path / "gb200.yaml"
    text = (SITES / "gb200.yaml").read_text().replace(
        "  - rack: r02\n    u: 1\n    block: gb200-nvl72-tray\n",
        "  - rack: r02\n    u: 1\n    block: gb200-nvl72-tray\n    nvlink_domain: r01\n")
    site.write_text(text)
    out = render.render(load(site), tmp_path / "o").out
    hv = yaml.safe_load((out / "inventory/host_vars/gb03.yml").read_text())
    assert hv["fabric_manager_imex_peers"] == ["10.1.0.11", "10.1.0.12", "10.1.0.13"]


@pytest.mark.parametrize("os_name", ["rhel-9"])
def test_validate_refuses_an_os_the_roles_cannot_install(tmp_path, os_name):
    from provisioner.inventory.checks import check
    site = tmp_path / "s.yaml"
    shutil.copy(SITES / "dgx_h100.yaml", site)
    site.write_text(site.read_text().replace("software:\n", f"software:\n  os: {os_name}\n"))
    findings = check(load(site))
    hit = [f for f in findings if f.code == "os-unsupported"]
    assert hit and hit[0].severity.value == "error" and hit[0].location is not None


@pytest.mark.parametrize("case", [c for c in CASES if c.split("/")[0] in (
    "dgx-a100", "dgx-h100", "dgx-b200")])
def test_upgrade_gate_asks_dpkg_for_the_fabric_manager_the_roles_installed(case):
    """The gate's dpkg-query names the package as installed: unversioned from R580 in
    NVIDIA's repository (nvidia-fabricmanager-580 does not exist there)."""
    block, pins = CASES[case]
    p = _payload(block, pins)
    defaults = yaml.safe_load((ROOT / "roles/upgrade_gate/defaults/main.yml").read_text())
    expr = defaults["upgrade_gate_fabric_manager_package"]
    name = ansible_eval(expr, fabric_manager_packages=list(p.fabric))
    assert name == next(f for f in p.fabric if f.startswith("nvidia-fabricmanager"))
    unversioned = p.source == "nvidia" and int(pins["nvidia_driver"]["branch"]) >= 580
    assert name == ("nvidia-fabricmanager" if unversioned
                    else f"nvidia-fabricmanager-{pins['nvidia_driver']['branch']}")


def test_upgrade_gate_checks_imex_on_gb200_trays_too():
    """A GB200 tray has no NVSwitch of its own and runs IMEX: the gate checks that IMEX is
    at the driver's version too (it used to check only NVSwitch systems)."""
    p = _payload(*CASES["gb200-nvl72-tray/nvidia-580"])
    defaults = yaml.safe_load((ROOT / "roles/upgrade_gate/defaults/main.yml").read_text())

    def on(**host: object) -> bool:
        return ansible_eval(defaults["upgrade_gate_fabric_manager"], **host) is True

    assert on(provisioner_nvswitch=False, provisioner_imex=True)
    assert on(provisioner_nvswitch=True, provisioner_imex=False)
    assert not on(provisioner_nvswitch=False, provisioner_imex=False)
    assert ansible_eval(defaults["upgrade_gate_fabric_manager_package"],
                        fabric_manager_packages=list(p.fabric)) == "nvidia-imex"


@pytest.mark.parametrize(("installed", "running", "pinned", "ok"), [
    ("570.124.06-1", "570.124.06", "570.124.06", True),
    ("570.124.06-0ubuntu0.22.04.1", "570.124.06", "", True),  # Canonical's, branch pinned
    ("1:580.82.07-1", "580.82.07", "", True),
    ("570.124.06-1", "570.133.20", "", False),  # a branch alone pinned: compared all the same
    ("570.124.06-1", "570.124.06", "570.133.20", False),  # not the bundle's
    ("570.124.060-1", "570.124.06", "", False)])
def test_upgrade_gate_compares_fabric_manager_with_the_running_driver(
        installed, running, pinned, ok):
    """With a driver branch alone pinned the expected version was "", and every fabric
    manager started with it: the gate compares the package with the loaded module."""
    task = role_task("upgrade_gate", "Verify fabric manager (or IMEX) is at the running "
                     "driver's version")
    ctx: dict[str, Any] = {"upgrade_gate_fm": {"stdout": installed},
                           "upgrade_gate_driver": {"content": base64.b64encode(
                               f"{running}\n".encode()).decode()},
                           "upgrade_gate_fabric_manager_version": pinned,
                           "upgrade_gate_fabric_manager_package": "nvidia-fabricmanager-570"}
    holds_, msg = run_assert(task, **ctx)
    assert holds_ is ok
    assert f"the running driver {running}" in msg
    read = role_task("upgrade_gate", "Read the running driver's version")
    assert read["ansible.builtin.slurp"]["src"] == "/sys/module/nvidia/version"


@pytest.mark.parametrize("case", ["dgx-h100/nvidia-580", "dgx-b200/nvidia-580"])
def test_nvlink5_fabric_manager_gets_ib_umad_loaded_before_it_starts(case):
    p = _payload(*CASES[case])
    defaults = yaml.safe_load((ROOT / "roles/fabric_manager/defaults/main.yml").read_text())
    modules = ansible_eval(defaults["fabric_manager_kernel_modules"],
                           fabric_manager_packages=list(p.fabric))
    assert modules == (["ib_umad"] if case.startswith("dgx-b200") else [])
    names = [t["name"] for t in yaml.safe_load(
        (ROOT / "roles/fabric_manager/tasks/main.yml").read_text())]
    assert names.index("Kernel modules fabric manager needs") < names.index(
        "Start fabric manager (or IMEX) and enable it at boot")
    modules = yaml.safe_load((ROOT / "roles/fabric_manager/tasks/modules.yml").read_text())
    assert modules[-1] == {"name": "Load them before fabric manager starts",
                           "ansible.builtin.meta": "flush_handlers"}


@pytest.mark.parametrize(("role", "tasks", "before"), [
    ("nvidia_driver", "install.yml", "Install the driver packages (Ubuntu)"),
    ("roce_host", "main.yml", "Install DOCA (MOFED)")])
def test_running_kernel_headers_before_a_dkms_build(role, tasks, before):
    """DKMS builds for the running kernel: its headers first (NVIDIA's driver from its own
    repository, DOCA); run in the lab (its mirror serves the hosts' kernel's headers), by
    their own tag where that kernel cannot name a package."""
    listed = yaml.safe_load((ROOT / "roles" / role / "tasks" / tasks).read_text())
    names = [t["name"] for t in listed]
    headers = listed[names.index("The running kernel's headers for DKMS, or why they are "
                                 "missing")]
    assert names.index(headers["name"]) < names.index(before)
    install, = headers["block"]
    assert install["name"] == "Install the running kernel's headers for DKMS"
    release = f"{{{{ {role}_kernel_release }}}}"
    assert install["ansible.builtin.apt"]["name"] == f"linux-headers-{release}"
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text())
    assert defaults[f"{role}_kernel_release"] == "{{ ansible_facts.kernel }}"
    assert headers["tags"] == ["needs_mirror", "needs_kernel_headers"]
    # apt's "no package matching" becomes the reason and the ways out
    explain, = headers["rescue"]
    assert "ansible_failed_result.msg" in explain["ansible.builtin.fail"]["msg"]
    if role == "nvidia_driver":  # Canonical's precompiled modules need none
        assert "nvidia_driver_source == 'nvidia'" in headers["when"]
        # --artifacts lists the headers for exactly the payloads the role installs them for
        assert _payload(*CASES["dgx-h100/nvidia-580"]).builds_with_dkms
        assert not _payload(*CASES["dgx-h100/canonical-580"]).builds_with_dkms



def test_canonical_modules_follow_the_sites_kernel_flavour(tmp_path):
    """Canonical's modules come per kernel flavour: generic by default (generic-64k on
    Grace), or the flavour the site names (DGX OS 6's linux-nvidia kernel: -nvidia); a
    flavour named with NVIDIA's DKMS source is unused, and validate says so."""
    pins = dict(CASES["dgx-h100/canonical-580"][1])
    assert _payload("dgx-h100", pins).driver[0] == "linux-modules-nvidia-580-server-open-generic"
    pins["nvidia_driver"] = {**pins["nvidia_driver"], "kernel_flavour": "nvidia"}
    assert _payload("dgx-h100", pins).driver[0] == "linux-modules-nvidia-580-server-open-nvidia"
    site = edited_example(tmp_path, "kernel_modules: auto ",
                          "kernel_modules: auto\n    kernel_flavour: nvidia ")
    from provisioner.inventory import checks
    found = [f for f in checks.check(load(site)) if f.code == "kernel-flavour-unused"]
    assert found and found[0].severity.value == "warning"
    # one flavour for Grace and x86 GPU nodes at once: said
    placements = site / "placements.yaml"
    placements.write_text(placements.read_text().replace("block: dgx-h100",
                                                         "block: gb200-nvl72-tray", 1))
    codes = {f.code for f in checks.check(load(site))}
    assert "kernel-flavour-mixed" in codes


DEPENDS = """linux-modules-nvidia-570-server-open-{flavour}
  Depends: linux-modules-nvidia-570-server-open-{abi}
"""


@pytest.mark.parametrize(("kernel", "flavour", "abi", "fits"), [
    ("6.8.0-45-generic", "generic", "6.8.0-48-generic", True),  # 24.04: GA is 6.8
    ("6.8.0-1015-nvidia", "generic", "6.8.0-48-generic", False),  # a DGX on -nvidia
    ("6.8.0-1015-nvidia", "nvidia", "6.8.0-1017-nvidia", True),
    # 22.04 on the HWE 6.8 kernel: generic follows the GA 5.15 series, the HWE flavour 6.8
    ("6.8.0-45-generic", "generic", "5.15.0-126-generic", False),
    ("6.8.0-45-generic", "generic-hwe-22.04", "6.8.0-48-generic", True),
    ("5.15.0-126-generic", "generic-hwe-22.04", "6.8.0-48-generic", False),
    ("6.8.0-1015-nvidia", "nvidia-hwe-22.04", "6.8.0-1017-nvidia", True),
    ("6.8.0-45-generic-64k", "generic-64k", "6.8.0-48-generic-64k", True),
    ("6.8.0-45-generic", "generic-64k", "6.8.0-48-generic-64k", False),
    ("6.8.0-45-generic", "generic", None, True)])  # not in the index: apt says why
def test_canonical_modules_are_refused_on_a_kernel_they_do_not_follow(kernel, flavour, abi,
                                                                      fits):
    """The modules package follows its flavour's kernel meta package: on a host running
    another flavour or series apt would add a kernel, and the running one would have no
    driver. The series is read from what the modules package depends on (apt-cache)."""
    read = role_task("nvidia_driver", "Read which kernel series Canonical's modules package "
                     "follows", "tasks/install.yml")
    assert read["ansible.builtin.command"]["argv"][:2] == ["apt-cache", "depends"]
    package = ansible_eval(read["ansible.builtin.command"]["argv"][2], nvidia_driver_packages=[
        f"linux-modules-nvidia-570-server-open-{flavour}", "nvidia-utils-570-server"])
    assert package == f"linux-modules-nvidia-570-server-open-{flavour}"
    check = role_task("nvidia_driver", "Check the running kernel is of the flavour and series "
                      "Canonical's modules are for", "tasks/install.yml")
    ctx: dict[str, Any] = {
        "nvidia_driver_kernel_release": kernel, "nvidia_driver_modules_flavour": flavour,
        "nvidia_driver_modules_follow": {"stdout": DEPENDS.format(flavour=flavour, abi=abi)
                                         if abi else "", "rc": 0 if abi else 100}}
    ctx |= {k: ansible_eval(v, **ctx) for k, v in check["vars"].items()}
    assert all(holds(c, **ctx) for c in check["ansible.builtin.assert"]["that"]) is fits
    if not fits:
        assert kernel in ansible_eval(check["ansible.builtin.assert"]["fail_msg"],
                                      inventory_hostname="dgx01", **ctx)
    for task in (read, check):
        assert holds(task["when"], ansible_facts={"os_family": "Debian"},
                     nvidia_driver_source="canonical", nvidia_driver_modules_flavour=flavour)
        assert not holds(task["when"], ansible_facts={"os_family": "Debian"},
                         nvidia_driver_source="nvidia", nvidia_driver_modules_flavour="")


def test_the_modules_flavour_reaches_the_role_from_the_payload(tmp_path):
    pins = dict(CASES["dgx-h100/canonical-580"][1])
    p = _payload("dgx-h100", pins)
    assert p.driver[0].endswith("-" + p.kernel_flavour) and p.kernel_flavour == "generic"
    assert _payload("gb200-nvl72-tray", pins).kernel_flavour == "generic-64k"
    assert _payload(*CASES["dgx-h100/nvidia-580"]).kernel_flavour == ""  # DKMS: no check
    site = edited_example(tmp_path, "kernel_modules: auto ", "kernel_modules: auto\n"
                          "    source: canonical\n    kernel_flavour: nvidia ")
    out = render.render(load(site), tmp_path / "out").out
    hv = yaml.safe_load((out / "inventory/host_vars/dgx01.yml").read_text())
    assert hv["nvidia_driver_modules_flavour"] == "nvidia"
    assert hv["nvidia_driver_packages"][0].endswith("-nvidia")


MAPS = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1311 /usr/bin/nv-hostengine
7f2a1c000000-7f2a1c200000 r-xp 00000000 fd:01 2211 /usr/lib/x86_64-linux-gnu/libdcgm.so.4.2.3
7f2a1d000000-7f2a1d100000 r-xp 00000000 fd:01 2290 /usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.570
7f2a1e000000-7f2a1e010000 rw-s 00000000 00:01 4096 /memfd:dcgm-shm (deleted)
"""


@pytest.mark.parametrize(("replaced", "state"), [
    ((), "started"),
    (("libnvidia-nscq.so.570",), "restarted"),   # nscq moved after the reboot
    (("libdcgm.so.4.2.3",), "restarted")])              # DCGM itself moved
def test_the_host_engine_restarts_when_an_upgrade_replaced_its_libraries(replaced, state):
    """No package restarts nv-hostengine: the role reads its memory map, where a library a
    package upgrade replaced shows "(deleted)", and restarts it then; a deleted memfd (its
    shared memory) is not a replaced library."""
    read = role_task("dcgm", "Read whether the running host engine maps libraries an "
                     "upgrade replaced")
    pattern = re.search(r"grep -E '([^']+)'", read["ansible.builtin.shell"]["cmd"])
    assert pattern is not None
    maps = "".join(line + (" (deleted)" if line.endswith(replaced) and replaced else "") + "\n"
                   for line in MAPS.splitlines())
    seen = subprocess.run(["grep", "-E", pattern.group(1)], input=maps, text=True,
                          capture_output=True).stdout
    start = role_task("dcgm", "Start the DCGM host engine (again where it runs replaced "
                      "libraries), enabled at boot")
    assert ansible_eval(start["ansible.builtin.systemd_service"]["state"],
                        dcgm_engine_replaced={"stdout": seen}) == state


def test_fabric_manager_or_imex_restarts_when_its_package_moved():
    start = role_task("fabric_manager", "Start fabric manager (or IMEX) and enable it at boot")
    state = start["ansible.builtin.systemd_service"]["state"]
    assert ansible_eval(state, fabric_manager_install={"changed": True}) == "restarted"
    assert ansible_eval(state, fabric_manager_install={"changed": False}) == "started"
    assert ansible_eval(state, fabric_manager_install={"skipped": True,
                                                        "changed": False}) == "started"
    install = role_task("fabric_manager", "Install fabric manager and nscq (or IMEX) at the "
                        "driver version")
    assert install["register"] == "fabric_manager_install"


H100 = "NVIDIA H100 80GB HBM3"
GPUS = "tasks/gpus.yml"
GPU_CHECK = "Verify GPU count, model, driver version and persistence mode"


def _gpu_check(lines: list[str], model: str = "H100", version: str = "570.124.06",
               persistence: bool = True) -> tuple[bool, str]:
    """node_verify's GPU assert over these nvidia-smi lines: (holds, its message)."""
    task = role_task("node_verify", GPU_CHECK, file=GPUS)
    ctx: dict[str, Any] = {"node_verify_gpus": {"stdout_lines": lines}, "node_verify_gpu_count": 8,
                           "node_verify_gpu_model": model, "node_verify_driver_version": version,
                           "node_verify_driver_branch": "570",
                           "node_verify_persistence_mode": persistence,
                           "inventory_hostname": "gpu01"}
    return run_assert(task, **ctx)


@pytest.mark.parametrize(("lines", "persistence", "ok"), [
    ([f"570.124.06, Enabled, {H100}"] * 8, True, True),
    ([f"570.124.06, Enabled, {H100}"] * 7 + [f"570.124.06, Disabled, {H100}"], True, False),
    ([f"570.124.06, Disabled, {H100}"] * 8, False, True),  # the site turned it off
    ([f"570.124.06, Enabled, {H100}"] * 7, True, False),  # a GPU fell off the bus
    ([f"570.133.20, Enabled, {H100}"] * 8, True, False)])
def test_node_verify_checks_gpu_count_driver_and_persistence_mode(lines, persistence, ok):
    """A node is ready only with every GPU at the pinned driver and, where the site keeps
    it on (the default), in persistence mode: the daemon is a static unit udev starts, so
    one that stopped would otherwise pass unseen."""
    holds_, msg = _gpu_check(lines, persistence=persistence)
    assert holds_ is ok
    assert "nvidia-smi reports" in msg and "GPUs" in msg


@pytest.mark.parametrize(("model", "name", "ok"), [
    ("H100", H100, True), ("H100", "NVIDIA H200", False), ("A100", "NVIDIA A100-SXM4-80GB", True),
    ("V100", "Tesla V100-SXM2-32GB", True), ("B200", "NVIDIA B200", True),
    ("B200", "NVIDIA GB200", False), ("GB200", "NVIDIA GB200", True),
    ("H100", "NVIDIA H1000", False), ("h100", H100, True),  # a site's own block, lower case
    ("", "NVIDIA H200", True)])  # no block model: unchecked
def test_node_verify_checks_the_gpu_model_the_block_declares(model, name, ok):
    """A server under the wrong block (an H200 board in an H100 block) passed every check
    with the other block's driver, power and fabric settings: the model is the block's, a
    whole word of nvidia-smi's name."""
    holds_, msg = _gpu_check([f"570.124.06, Enabled, {name}"] * 8, model=model)
    assert holds_ is ok
    if not ok:
        assert f"expected 8 {model} GPUs" in msg and name in msg
        assert "a block of another model is declared for this server" in msg


def test_the_driver_role_checks_the_gpus_with_node_verifys_own_tasks():
    """One check after an install and before ready: the driver role runs node_verify's GPU
    tasks with its own settings (no second assert kept in step)."""
    task = role_task("nvidia_driver", "Check every GPU is visible at the pinned driver",
                     file="tasks/install.yml")
    assert task["ansible.builtin.include_role"] == {
        "name": "node_verify", "tasks_from": "gpus.yml", "apply": {"tags": ["needs_gpu"]}}
    assert task["vars"]["node_verify_gpu_count"] == "{{ nvidia_driver_gpu_count }}"
    assert task["vars"]["node_verify_driver_version"] == "{{ nvidia_driver_version }}"
    names = [t["name"] for t in yaml.safe_load(
        (ROOT / "roles/nvidia_driver/tasks/install.yml").read_text())]
    assert names.index("Keep the persistence daemon running") < names.index(task["name"])


def _nvidia_smi_q(*fabric: tuple[str, str]) -> str:
    """`nvidia-smi -q` as H100/GB200 drivers print it, a Fabric section per GPU."""
    out = f"==============NVSMI LOG==============\n\nAttached GPUs : {len(fabric)}\n"
    for state, status in fabric:
        out += ("GPU 00000000:18:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n"
                "    Performance State                     : P0\n    Fabric\n"
                f"        State                             : {state}\n"
                f"        Status                            : {status}\n"
                "        CliqueId                          : 0\n    Processes : None\n")
    return out


@pytest.mark.parametrize(("fabric", "pending", "failed"), [
    ([("Completed", "Success")] * 8, 0, 0),
    ([("N/A", "N/A")] * 8, 0, 0),  # A100 behind NVSwitch: no fabric registration
    ([("In Progress", "N/A")] + [("Completed", "Success")] * 7, 1, 0),
    ([("Not Started", "N/A")] * 8, 8, 0),
    ([("Completed", "Insufficient Resources")] + [("Completed", "Success")] * 7, 0, 1)])
def test_fabric_manager_waits_for_and_checks_each_gpus_fabric_registration(
        fabric, pending, failed):
    """systemd's "active" is not enough on an NVSwitch or IMEX node: each GPU's fabric
    registration must complete with status Success (NVML), else CUDA fails on it. The role
    waits while any is pending, then fails the node on one that completed with an error;
    node_verify runs the same tasks on every check."""
    ctx = fabric_state(_nvidia_smi_q(*fabric))
    assert len(ctx["fabric_manager_fabric"]) == len(fabric)
    assert (len(ctx["fabric_manager_fabric_pending"]),
            len(ctx["fabric_manager_fabric_failed"])) == (pending, failed)
    wait = role_task("fabric_manager", "Wait for every GPU to finish its NVLink fabric "
                     "registration", file="tasks/fabric_state.yml")
    assert holds(wait["until"], **ctx, fabric_manager_imex=False) is (pending == 0)  # NVSwitch
    check = role_task("fabric_manager", "Check every GPU's NVLink fabric registration "
                      "succeeded", file="tasks/fabric_state.yml")
    ok = all(holds(c, **ctx, fabric_manager_gpu_count=8)
             for c in check["ansible.builtin.assert"]["that"])
    assert ok is (pending == failed == 0)
    # an output with a GPU's Fabric section missing (cut short) is not taken for success
    assert not all(holds(c, **ctx, fabric_manager_gpu_count=9)
                   for c in check["ansible.builtin.assert"]["that"])
    if not ok:
        assert "nvidia-smi -q" in ansible_eval(check["ansible.builtin.assert"]["fail_msg"],
                                               inventory_hostname="gpu01",
                                               fabric_manager_service="nvidia-fabricmanager",
                                               fabric_manager_gpu_count=8, **ctx)
    main = [t["name"] for t in _tasks("fabric_manager")]
    assert main.index("Wait for fabric manager (or IMEX) to be active, or say why it is not") \
        < main.index("Wait for the GPUs' NVLink fabric registration")
    verify = role_task("node_verify", "Verify every GPU's NVLink fabric registration "
                       "succeeded")
    assert verify["ansible.builtin.include_role"]["tasks_from"] == "fabric_state.yml"


def test_a_fabric_manager_that_failed_stops_the_wait_and_the_run_shows_its_journal():
    """A failed unit (another version than the driver's, NVLink-5 without ib_umad) ended
    the wait only after fabric_manager_start_timeout_s, with no word of why. The wait ends
    at `failed`; a unit not active then, or still activating when the retries run out (the
    task fails: until's last attempt), goes to the rescue, which shows the journal."""
    outer = role_task("fabric_manager", "Wait for fabric manager (or IMEX) to be active, or "
                      "say why it is not")
    wait, check = outer["block"]
    journal, stop = outer["rescue"]
    assert journal["ansible.builtin.command"]["argv"][:3] == ["journalctl", "--unit",
                                                             "{{ fabric_manager_service }}"]
    ctx = {"fabric_manager_service": "nvidia-fabricmanager",
           "fabric_manager_start_timeout_s": 300,
           "fabric_manager_journal": {"stdout_lines": [
               "fabric manager NVIDIA GPU driver interface version 570.124.06 don't match "
               "with driver version 570.86.15"]}}
    for state, ends, ok in (("activating", False, False), ("failed", True, False),
                            ("active", True, True)):
        active = {"status": {"ActiveState": state, "SubState": "x"}}
        assert holds(wait["until"], fabric_manager_active=active) is ends
        assert holds(check["ansible.builtin.assert"]["that"], fabric_manager_active=active) is ok
    for state, after in (("failed", ""), ("activating", " after 300 s")):
        active = {"status": {"ActiveState": state, "SubState": "y"}}
        msg = ansible_eval(stop["ansible.builtin.fail"]["msg"], **ctx,
                           fabric_manager_active=active,
                           fabric_manager_state=ansible_eval(
                               stop["vars"]["fabric_manager_state"],
                               fabric_manager_active=active))
        assert msg.startswith(f"nvidia-fabricmanager is {state} (y){after}, so CUDA cannot"), msg
        assert "don't match with driver version 570.86.15" in msg


@pytest.mark.parametrize(("smi", "ok"), [("570.172.08", True), ("580.82.07", False)])
def test_a_driver_of_another_branch_fails_the_check_where_no_version_is_pinned(smi, ok):
    """Canonical turns a retired branch's packages into transitional ones that pull in the
    next branch: a site pinning branch 570 alone got 580, and the check compared only a
    pinned version, so it passed."""
    holds_, msg = _gpu_check([f"{smi}, Enabled, {H100}"] * 8, version="")
    assert holds_ is ok
    assert "GPUs at driver branch 570 " in msg


def test_imex_nodes_load_the_driver_with_channel0_and_the_role_checks_it():
    """IMEX channels are not created by default: without channel 0, CUDA's IMEX APIs fail
    with an insufficient-permission error (NVIDIA IMEX guide)."""
    file = "tasks/imex_channel.yml"
    opt = role_task("nvidia_driver", "Have the driver create IMEX channel 0 at every load "
                    "(multi-node NVLink nodes)", file=file)
    assert "options nvidia NVreg_CreateImexChannel0=1" in opt["ansible.builtin.copy"]["content"]
    assert opt["notify"] == ["Rebuild the initramfs", "Reboot for the new driver"]
    gone = role_task("nvidia_driver", "Remove the IMEX channel option from a node that is no "
                     "longer an IMEX node", file=file)
    assert gone["ansible.builtin.file"]["path"] == opt["ansible.builtin.copy"]["dest"]
    default = yaml.safe_load((ROOT / "roles/nvidia_driver/defaults/main.yml").read_text())[
        "nvidia_driver_imex_channel0"]
    for imex in (True, False):
        on = ansible_eval(default, provisioner_imex=imex)
        assert holds(opt["when"], nvidia_driver_imex_channel0=on) is imex
        assert holds(gone["when"], nvidia_driver_imex_channel0=on) is not imex
    check = role_task("fabric_manager", "Check IMEX channel 0 exists")
    for stat, ok in (({"exists": True, "ischr": True}, True), ({"exists": False}, False)):
        assert holds(check["ansible.builtin.assert"]["that"],
                     fabric_manager_imex_channel={"stat": stat}) is ok
    assert check["tags"] == ["needs_gpu"]


def test_roce_qos_is_enabled_at_boot_by_a_task_whatever_the_qos_handler_does():
    """The QoS handler fails where a port is still in InfiniBand mode, and a failed handler
    ends the host's handlers: an enable notified beside it never ran, and the next run (the
    unit unchanged) notified nothing, so QoS was lost at every boot."""
    handlers = [h["name"] for h in yaml.safe_load(
        (ROOT / "roles/roce_host/handlers/main.yml").read_text())]
    assert "Enable RoCE QoS at boot" not in handlers
    tasks = yaml.safe_load((ROOT / "roles/roce_host/tasks/main.yml").read_text())
    names = [t["name"] for t in tasks]
    unit = tasks[names.index("Apply RoCE QoS at every boot")]
    enable = tasks[names.index("Apply RoCE QoS at every boot") + 1]
    assert enable["name"] == "Enable RoCE QoS at boot"
    assert enable["ansible.builtin.systemd_service"]["enabled"] is True
    assert enable["ansible.builtin.systemd_service"]["name"] == Path(
        unit["ansible.builtin.template"]["dest"]).name
    assert ansible_eval(enable["ansible.builtin.systemd_service"]["daemon_reload"],
                        roce_host_unit={"changed": True}) is True
    assert "when" not in enable and "notify" not in unit
    service = role_template("roce_host", "provisioner-roce-qos.service.j2")
    assert "After=network-online.target openibd.service" in service


def test_every_play_waits_for_apts_lock_as_long_as_base_os():
    """apt-daily holds apt's lock for minutes on a node just booted: every play's apt tasks
    wait as long as base_os's do (its own lock_timeout), not the apt module's 60 s."""
    plays = yaml.safe_load((ROOT / "playbooks/site.yml").read_text())
    wait = yaml.safe_load((ROOT / "roles/base_os/defaults/main.yml").read_text())[
        "base_os_apt_lock_timeout_s"]
    installing = [p for p in plays if "roles" in p]
    assert len(installing) == 8
    for play in installing:
        assert play["module_defaults"]["ansible.builtin.apt"]["lock_timeout"] == wait, play
