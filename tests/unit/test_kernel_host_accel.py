"""The kernel host's choice of QEMU accelerator (provisioner/lab/kernel_host.py): its
probe is a real one-sector guest, so it tells a KVM that runs guests from one that only
opens (nested KVM on the CI machines answers KVM_GET_API_VERSION 12 and runs nothing)."""

from __future__ import annotations

import shutil
from pathlib import Path

from provisioner.lab import kernel_host
from tests.conftest import requires_peer

qemu = requires_peer(shutil.which("qemu-system-x86_64"),
                     "qemu-system-x86 not installed (scripts/bootstrap.sh installs it)")


@qemu
def test_the_probe_guest_prints_under_qemus_own_emulation():
    assert kernel_host.runs_a_guest("tcg")


@qemu
def test_an_accelerator_qemu_cannot_start_runs_no_guest():
    assert not kernel_host.runs_a_guest("no-such-accel")


def test_kvm_is_chosen_only_with_a_device_that_answers_as_kvm(monkeypatch, tmp_path):
    """Without /dev/kvm (or one that is no KVM) the probe guest is not even started."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no verdict remembered
    monkeypatch.setattr(kernel_host, "_kvm_opens", lambda: "/dev/kvm: No such file or directory")
    monkeypatch.setattr(kernel_host, "runs_a_guest", _no_probe)
    kernel_host.accelerator.cache_clear()
    try:
        assert kernel_host.accelerator() == (
            "tcg", "TCG, QEMU's CPU emulation: /dev/kvm: No such file or directory")
    finally:
        kernel_host.accelerator.cache_clear()


def _no_probe(accel: str) -> bool:
    raise AssertionError(f"probed {accel} although /dev/kvm does not open")


def test_a_kernel_that_failed_under_kvm_is_remembered_until_the_machine_boots_again(
        monkeypatch, tmp_path):
    """Once the kernel did not come up under KVM (start() writes why), later starts on this
    boot of the machine go to TCG at once, saying why and where that is remembered; the
    note names the boot, so a reboot probes again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kernel_host, "_kvm_opens", lambda: None)
    monkeypatch.setattr(kernel_host, "runs_a_guest", _no_probe)
    remembered = kernel_host._kvm_verdict_file()
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert remembered == tmp_path / "provisioner" / f"kvm-kernel-fails-{boot_id}"
    remembered.parent.mkdir(parents=True)
    remembered.write_text("the kernel under KVM printed nothing in 20 s (nested KVM)\n")
    kernel_host.accelerator.cache_clear()
    try:
        accel, note = kernel_host.accelerator()
    finally:
        kernel_host.accelerator.cache_clear()
    assert accel == "tcg"
    assert note.startswith("TCG, QEMU's CPU emulation: the kernel under KVM printed nothing")
    assert str(remembered) in note
