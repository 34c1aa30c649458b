"""The kernel host's choice of QEMU accelerator (provisioner/lab/kernel_host.py): its
probe is a real one-sector guest, so it tells a KVM that runs guests from one that only
opens (nested KVM on the CI machines answers KVM_GET_API_VERSION 12 and runs nothing)."""

from __future__ import annotations

import shutil

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


def test_kvm_is_chosen_only_with_a_device_that_answers_as_kvm(monkeypatch):
    """Without /dev/kvm (or one that is no KVM) the probe guest is not even started."""
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
