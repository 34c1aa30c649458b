"""node_verify's CUDA and DCGM checks: CUDA starts on every GPU the block declares (nvidia-smi
lists GPUs CUDA cannot use), the driver supports the pinned CUDA, and DCGM's host engine,
where the site installs it, sees every GPU. The probe script runs for real here (no driver:
it must say so); its outputs on a GPU are the lines it prints there."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import subprocess
import sys
from typing import Any

import pytest
import yaml

from provisioner import render
from provisioner.inventory import load
from tests.conftest import (
    FIXTURES,
    ROOT,
    ansible_eval,
    fabric_state,
    holds,
    role_task,
    run_assert,
)

PROBE = ROOT / "roles/node_verify/files/cuda_probe.py"
CUDA = "tasks/cuda.yml"
H200 = FIXTURES / "gpu/h200"  # recorded on a lent H200 machine (its README)
CUDA_CHECK = ("Verify CUDA starts on every GPU the block declares, at a version that runs "
              "the pinned CUDA")
DCGM_CHECK = "Verify the DCGM host engine sees every GPU the block declares"


def _cuda_check(stdout: str, gpus: int, cuda: str, mig: int = 0) -> tuple[bool, str]:
    """node_verify's CUDA assert over the probe's line, `mig` of the GPUs in MIG mode."""
    task = role_task("node_verify", CUDA_CHECK, file=CUDA)
    modes = ["Enabled"] * mig + ["Disabled"] * (gpus - mig)
    ctx: dict[str, Any] = {"node_verify_cuda": {"stdout": stdout}, "node_verify_gpu_count": gpus,
                           "node_verify_cuda_version": cuda, "inventory_hostname": "gpu01",
                           "node_verify_mig": {"stdout_lines": modes}}
    return run_assert(task, **ctx)


@pytest.mark.parametrize(("stdout", "gpus", "cuda", "ok", "says"), [
    ("13000 CUDA_SUCCESS 1\n", 1, "13.0", True, ""),
    ("13000 CUDA_SUCCESS 8\n", 8, "12.8", True, ""),       # a newer driver runs older CUDA
    ("12080 CUDA_SUCCESS 8\n", 8, "12.8.1", True, ""),     # a patch pin: major.minor counts
    ("12080 CUDA_SUCCESS 8\n", 8, "", True, ""),           # no CUDA pinned: any
    ("12080 CUDA_SUCCESS 8\n", 8, "13.0", False, "pin a driver branch that supports"),
    ("12020 CUDA_SUCCESS 8\n", 8, "12.10", False, "supports CUDA 12.2"),  # 12.2 < 12.10
    ("12080 CUDA_ERROR_SYSTEM_NOT_READY 0\n", 8, "12.8", False, "fabric manager (or IMEX)"),
    ("12080 CUDA_SUCCESS 7\n", 8, "12.8", False, "counts 7 of 8 GPUs"),
    ("12080 CUDA_ERROR_NO_DEVICE 0\n", 8, "12.8", False, "an empty CUDA_VISIBLE_DEVICES"),
    ("12080 CUDA_ERROR_UNKNOWN 0\n", 8, "12.8", False, "see dmesg for NVRM errors"),
    ("0 LIBCUDA_NOT_LOADABLE 0\n", 8, "", False, "libcuda.so.1 (the driver) is not installed"),
    ("", 8, "", False, "answered no answer")])             # cut short: never a pass
def test_cuda_must_start_on_every_declared_gpu_at_the_pinned_version(stdout, gpus, cuda, ok,
                                                                     says):
    """nvidia-smi shows all eight GPUs of an NVSwitch system whose fabric manager is down;
    CUDA on it fails. The check asks CUDA: cuInit's answer, its GPU count against the
    block's, and the driver's CUDA version (1000 * major + 10 * minor) against the pin."""
    holds_, msg = _cuda_check(stdout, gpus, cuda)
    assert holds_ is ok, msg
    assert says in msg
    assert msg.startswith("gpu01: CUDA's cuInit answered")


@pytest.mark.parametrize(("stdout", "mig", "ok"), [
    ("13000 CUDA_SUCCESS 7\n", 1, True),    # one GPU in MIG mode, without instances
    ("13000 CUDA_SUCCESS 8\n", 1, True),    # ... or with one CUDA sees
    ("13000 CUDA_SUCCESS 6\n", 1, False),   # a GPU not in MIG mode is missing
    ("13000 CUDA_ERROR_NO_DEVICE 0\n", 8, True),   # all in MIG mode, no instance
    ("13000 CUDA_ERROR_NO_DEVICE 0\n", 7, False),
    ("13000 CUDA_ERROR_SYSTEM_NOT_READY 0\n", 8, False)])
def test_gpus_in_mig_mode_are_not_counted_as_cuda_devices(stdout, mig, ok):
    """A GPU in MIG mode is at most one CUDA device (none without instances: MIG user
    guide, CUDA device enumeration), so a healthy MIG node is not failed on CUDA's count;
    each GPU not in MIG mode must still be there, and a fabric not ready still fails."""
    holds_, msg = _cuda_check(stdout, 8, "13.0", mig=mig)
    assert holds_ is ok, msg
    assert f"({mig} in MIG mode)" in msg


def test_every_nvidia_smi_read_keeps_its_format_option_whole():
    """`--format=csv,noheader` in a YAML flow list is two items, and nvidia-smi refuses
    "noheader" (it did, on the lent H200, until quoted): every nvidia-smi argv in node_verify
    keeps the option whole."""
    for file in ("tasks/gpus.yml", CUDA):
        for task in yaml.safe_load((ROOT / "roles/node_verify" / file).read_text()):
            argv = (task.get("ansible.builtin.command") or {}).get("argv") or []
            if argv[:1] == ["nvidia-smi"] and any(a.startswith("--query") for a in argv):
                assert "--format=csv,noheader" in argv and "noheader" not in argv, task["name"]
    mig = role_task("node_verify", "Read which GPUs are in MIG mode", file=CUDA)
    assert mig["ansible.builtin.command"]["argv"] == [
        "nvidia-smi", "--query-gpu=mig.mode.current", "--format=csv,noheader"]


class _FakeCuda:
    """libcuda's driver API as ctypes calls it: each function writes through its pointer."""

    def __init__(self, version: int, init: int, count: int) -> None:
        self._version, self._init, self._count = version, init, count

    def cuDriverGetVersion(self, ref: Any) -> int:
        ref._obj.value = self._version
        return 0

    def cuInit(self, flags: int) -> int:
        return self._init

    def cuDeviceGetCount(self, ref: Any) -> int:
        ref._obj.value = self._count
        return 0

    def cuGetErrorName(self, result: int, ref: Any) -> int:
        names = {0: b"CUDA_SUCCESS", 802: b"CUDA_ERROR_SYSTEM_NOT_READY"}
        if result not in names:
            return 1  # CUDA_ERROR_INVALID_VALUE: an unknown code
        ref._obj.value = names[result]
        return 0


@pytest.mark.parametrize(("fake", "line"), [
    (_FakeCuda(13000, 0, 8), "13000 CUDA_SUCCESS 8"),
    (_FakeCuda(12080, 802, 8), "12080 CUDA_ERROR_SYSTEM_NOT_READY 0"),  # no count asked
    (_FakeCuda(12080, 999, 8), "12080 CUresult_999 0")])
def test_the_probe_prints_what_the_driver_api_answers(monkeypatch, capsys, fake, line):
    """The probe's calls as the driver API defines them (cuDriverGetVersion needs no cuInit;
    the count only after a cuInit that succeeded; a code without a name printed as a
    number), against a stand-in library object: the real one ran on the lent H200."""
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    spec = importlib.util.spec_from_file_location("cuda_probe", PROBE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main() == 0
    assert capsys.readouterr().out == line + "\n"


def test_the_probe_says_when_no_driver_is_there():
    """Run for real: a host without the driver's libcuda gets a line the check refuses with
    the reason, not a Python traceback (this machine has no NVIDIA driver)."""
    if ctypes.util.find_library("cuda") is not None:
        pytest.skip("this machine has an NVIDIA driver: the no-driver answer cannot be seen")
    out = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout == "0 LIBCUDA_NOT_LOADABLE 0\n"
    holds_, msg = _cuda_check(out.stdout, 1, "13.0")
    assert not holds_ and "libcuda.so.1 (the driver) is not installed" in msg


@pytest.mark.parametrize(("stdout", "gpus", "ok"), [
    ("8 GPUs found.\n+--------+---+\n| GPU ID | Device Information |\n0 NvSwitches found.\n",
     8, True),
    ("1 GPU found.\n+--------+\n0 NvSwitches found.\n", 1, True),
    ("7 GPUs found.\n+--------+\n6 NvSwitches found.\n", 8, False),  # not the switches' count
    ("Error: unable to establish a connection to the specified host: localhost\n", 8, False),
    ("", 8, False)])
def test_dcgm_host_engine_must_see_every_declared_gpu(stdout, gpus, ok):
    """Where the site installs DCGM, its host engine answers and lists the block's GPUs:
    "8 GPUs found." ("1 GPU found.") is dcgmi discovery -l's first line (NVIDIA/DCGM,
    dcgmi/Query.cpp); an engine that lost a GPU no longer monitors or diagnoses it."""
    task = role_task("node_verify", DCGM_CHECK, file=CUDA)
    holds_, msg = run_assert(task, dcgm_discovery={"stdout": stdout}, node_verify_gpu_count=gpus,
                             inventory_hostname="gpu01")
    assert holds_ is ok, msg
    assert f"the block declares {gpus}" in msg
    if not stdout.strip()[:1].isdigit():
        assert "sees no GPUs" in msg


def test_cuda_is_checked_after_the_fabric_and_dcgm_only_where_the_site_installs_it():
    """CUDA starts on an NVSwitch system only once every GPU registered with the fabric, so
    the CUDA check follows the fabric check; DCGM is asked through the dcgm role's own wait
    (one engine wait), on nodes whose host variables list DCGM packages."""
    main = yaml.safe_load((ROOT / "roles/node_verify/tasks/main.yml").read_text())
    names = [t["name"] for t in main]
    assert names.index("Verify every GPU's NVLink fabric registration succeeded") < names.index(
        "Verify CUDA starts on every GPU, and DCGM's host engine sees them where installed")
    ask = role_task("node_verify", "Ask the DCGM host engine which GPUs it sees", file=CUDA)
    assert ask["ansible.builtin.include_role"] == {
        "name": "dcgm", "tasks_from": "engine_wait.yml", "apply": {"tags": ["needs_gpu"]}}
    defaults = yaml.safe_load((ROOT / "roles/node_verify/defaults/main.yml").read_text())
    assert ansible_eval(defaults["node_verify_dcgm"], dcgm_packages=[]) is False
    assert ansible_eval(defaults["node_verify_dcgm"],
                        dcgm_packages=["datacenter-gpu-manager-4-cuda13"]) is True
    assert ansible_eval(defaults["node_verify_cuda_version"], cuda_toolkit_version="13.0") == "13.0"
    tasks = yaml.safe_load((ROOT / "roles/node_verify" / CUDA).read_text())
    assert all(t["tags"] == ["needs_gpu"] for t in tasks)  # the lab has no GPU: counted


def _device_vars(tmp_path, block: str = "h200-1gpu") -> dict[str, Any]:
    """node_verify's settings for the lent machine's node, as `render` writes them for the
    site the role ran with there (tests/fixtures/sites/h200_device), under `block`."""
    site = tmp_path / block
    site.mkdir(parents=True)
    for f in (FIXTURES / "sites/h200_device").glob("*.yaml"):
        (site / f.name).write_text(f.read_text().replace("block: h200-1gpu", f"block: {block}"))
    out = render.render(load(site), tmp_path / f"{block}-out").out
    hv = yaml.safe_load((out / "inventory/host_vars/gpu01.yml").read_text())
    gv = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    defaults = yaml.safe_load((ROOT / "roles/node_verify/defaults/main.yml").read_text())
    ctx: dict[str, Any] = {**gv, **hv, "inventory_hostname": "gpu01"}
    for name in ("node_verify_gpu_count", "node_verify_gpu_model", "node_verify_driver_version",
                 "node_verify_driver_branch", "node_verify_persistence_mode",
                 "node_verify_cuda_version"):
        ctx[name] = ansible_eval(defaults[name], **ctx)
    return ctx


def test_what_a_real_h200_printed_passes_its_block_and_fails_a_dgx_h200(tmp_path):
    """The lines a lent H200 machine printed (nvidia-smi's query and the CUDA probe), checked
    against the site the role ran with there: its one-GPU block passes; the DGX H200 block
    (8 GPUs) fails on the count, as the role did there (docs/gpu-verify.md)."""
    query = (H200 / "query-gpu.txt").read_text().splitlines()
    probe = (H200 / "cuda-probe.txt").read_text()
    gpus = role_task("node_verify", "Verify GPU count, model, driver version and persistence "
                     "mode", file="tasks/gpus.yml")
    cuda = role_task("node_verify", CUDA_CHECK, file=CUDA)
    ctx = _device_vars(tmp_path)
    assert (ctx["node_verify_gpu_count"], ctx["node_verify_gpu_model"],
            ctx["node_verify_driver_version"], ctx["node_verify_cuda_version"]) == (
        1, "H200", "580.159.04", "13.0")
    assert run_assert(gpus, node_verify_gpus={"stdout_lines": query}, **ctx)[0]
    mig = {"stdout_lines": (H200 / "mig-mode.txt").read_text().splitlines()}
    ctx["node_verify_mig"] = mig
    assert run_assert(cuda, node_verify_cuda={"stdout": probe}, **ctx)[0]
    # a newer CUDA than this driver's 13.0 is refused
    assert not run_assert(cuda, node_verify_cuda={"stdout": probe},
                          **{**ctx, "node_verify_cuda_version": "13.2"})[0]
    dgx = _device_vars(tmp_path, "dgx-h200")
    ok, msg = run_assert(gpus, node_verify_gpus={"stdout_lines": query}, **dgx)
    assert not ok and "expected 8 H200 GPUs at driver 580.159.04" in msg
    assert "nvidia-smi reports 1: NVIDIA H200 at 580.159.04" in msg


def test_a_real_h200_without_nvswitch_reports_no_fabric_and_is_not_pending(tmp_path):
    """nvidia-smi -q on the lent H200 (no NVSwitch) prints its Fabric section as N/A, which
    the fabric check reads as a GPU with no fabric registration: one section, none pending,
    none failed (run on that machine under the DGX H200 block: docs/gpu-verify.md). The
    parse already did this before the CUDA checks; this pins it to real output, and with it
    the gap docs/gpu-verify.md names: an NVSwitch block whose GPUs print N/A passes."""
    ctx = fabric_state((H200 / "nvidia-smi-q.txt").read_text())
    assert len(ctx["fabric_manager_fabric"]) == 1
    assert ctx["fabric_manager_fabric_pending"] == [] and ctx["fabric_manager_fabric_failed"] == []
    check = role_task("fabric_manager", "Check every GPU's NVLink fabric registration "
                      "succeeded", file="tasks/fabric_state.yml")
    assert all(holds(c, **ctx, fabric_manager_gpu_count=1)
               for c in check["ansible.builtin.assert"]["that"])


def test_a_multi_node_nvlink_tray_says_at_once_that_its_fabric_waits_on_the_switch_trays():
    """On an IMEX tray (GB200 NVL) the fabric is set up by the NVLink switch trays' NMX-C,
    which the tool does not configure: the wait stops at the first read, and the check
    names the switch trays; on an NVSwitch system (fabric manager) the wait goes on, and
    neither says so once the registration completed."""
    pending = ("    Fabric\n        State                : In Progress\n"
               "        Status               : N/A\n")
    done = ("    Fabric\n        State                : Completed\n"
            "        Status               : Success\n")
    wait = role_task("fabric_manager", "Wait for every GPU to finish its NVLink fabric "
                     "registration", file="tasks/fabric_state.yml")
    says = role_task("fabric_manager", "Say at once when a multi-node NVLink tray's fabric "
                     "waits on its switch trays", file="tasks/fabric_state.yml")
    for imex, text, stops, ok in ((True, pending * 4, True, False),
                                  (False, pending * 8, False, True),
                                  (True, done * 4, True, True)):
        ctx = {**fabric_state(text), "fabric_manager_imex": imex,
               "fabric_manager_gpu_count": text.count("Fabric"),
               "inventory_hostname": "gb01"}
        assert holds(wait["until"], **ctx) is stops, (imex, text)
        passed, message = run_assert(says, **ctx)
        assert passed is ok
        if not ok:
            assert "NVLink switch trays" in message and "NMX-Controller" in message
            assert "4 of 4 GPUs is In Progress" in message
