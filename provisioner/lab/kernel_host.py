"""A lab host with a kernel of its own, for the payload's kernel-bound steps.

The namespace hosts (hosts.py) share the real machine's kernel, so the lab skips what would
change it (tag needs_kernel: module loads, sysctls, swapoff, the initramfs). This host is a
QEMU guest booted from a Debian root with Debian's kernel (debootstrap, built once and
cached), on a disk image made afresh for each start: there those steps run for real and
change nothing outside the guest (tests/integration/test_kernel_host.py).

The guest runs under KVM where KVM runs guests here (accelerator(): /dev/kvm answers
KVM_GET_API_VERSION with 12 and a one-sector guest under it writes to its serial port
within KVM_PROBE_S), else under TCG, QEMU's own CPU emulation: nested KVM on the CI
machines (a Firecracker VM) opens, creates VMs and answers version 12, yet a guest under
it runs nothing (measured: neither SeaBIOS nor the probe sector prints, `-cpu host` aborts
on an MSR), which a check of /dev/kvm alone would take for working. KernelHost.accel and
.accel_note say which ran and why. Its network is QEMU's user mode with `restrict=on` (no
packet leaves the guest) and one forward, loopback port to the guest's sshd. Needs root
(an overlay mount), debootstrap, e2fsprogs (mke2fs -d), util-linux (mkswap) and
qemu-system-x86.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import pids
from provisioner.errors import ConfigError
from provisioner.lab.hosts import _run, seed_identity
from provisioner.lab.procs import free_ports
from provisioner.lab.rootfs import ROOTFS_SUITE, debootstrap_root, default_cache

# Debian's kernel and what the roles' kernel-bound steps use: kmod (module loads), procps
# (sysctl), initramfs-tools (update-initramfs), util-linux (swapon/swapoff, in minbase);
# sshd, Python with apt bindings and chrony as on the namespace hosts.
# The host network role's netplan (networkd as its renderer), and the RDMA userspace that
# soft-RoCE (the kernel's rdma_rxe) needs to stand in for a ConnectX port: rdma-core's
# `rdma`, the verbs providers (librxe), ibv_devinfo, rping, perftest's ib_write_bw.
KERNEL_ROOT_PACKAGES = ("linux-image-amd64", "initramfs-tools", "kmod", "procps", "udev",
                        "systemd", "systemd-sysv", "dbus", "openssh-server", "python3",
                        "python3-apt", "chrony", "iproute2", "netplan.io", "rdma-core",
                        "ibverbs-providers", "ibverbs-utils", "rdmacm-utils", "perftest")
KERNEL_ROOT_VERSION = "2"  # bump when the package list changes: the cache is rebuilt
DISK_SIZE = "2G"  # the root is about 850 MB
SWAP_SIZE_MB = 64  # a real swap device, so that the kubelet's swapoff has one to turn off
MEMORY_MB = 1024
BOOT_TIMEOUT_S = 300.0  # measured: 27 s to sshd under TCG on a 2-core CI machine
KVM_API_VERSION = 12  # the only version the kernel has answered since 2.6.22 (api.rst)
KVM_GET_API_VERSION, KVM_CREATE_VM = 0xAE00, 0xAE01  # _IO(KVMIO, 0x00), _IO(KVMIO, 0x01)
KVM_PROBE_S = 10.0  # the probe sector prints under TCG in under a second (measured)
# The kernel's first console line comes in about a second under KVM; nested KVM under load
# ran the probe sector yet booted no kernel (a CI run): then the guest starts again on TCG.
KVM_FIRST_LINE_S = 20.0
KVM_SSH_S = 90.0  # a guest under KVM is up in about 10 s; past this, TCG (BOOT_TIMEOUT_S)
# A boot sector that writes "K" to COM1 and halts: mov dx,0x3f8; mov al,'K'; out dx,al;
# hlt; jmp $-1. Under an accelerator that runs guest code SeaBIOS boots it at once.
PROBE_SECTOR = bytes([0xBA, 0xF8, 0x03, 0xB0, 0x4B, 0xEE, 0xF4, 0xEB, 0xFD])


@dataclass(frozen=True)
class KernelHost:
    name: str
    pid: int  # QEMU's
    start_ticks: int
    port: int  # 127.0.0.1:port reaches the guest's sshd
    key: Path  # the private key root's authorized_keys holds
    workdir: Path
    process: subprocess.Popen[bytes] = field(compare=False, repr=False)
    accel: str = "tcg"  # QEMU's -accel: kvm or tcg
    accel_note: str = ""  # why that one (accelerator())

    def ssh_argv(self, command: str, *, stdin: bool = False) -> list[str]:
        """ssh to the guest as root, running `command`; no stdin unless asked (the tests'
        children share theirs)."""
        options = ("BatchMode=yes", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null",
                   "LogLevel=ERROR", "ConnectTimeout=5")
        return ["ssh", *([] if stdin else ["-n"]), "-p", str(self.port), "-i", str(self.key),
                *(arg for o in options for arg in ("-o", o)), "root@127.0.0.1", command]


def ensure_kernel_root(cache: Path | None = None) -> Path:
    """The guest's Debian root with its kernel and initramfs (debootstrap, about 90 s)."""
    return debootstrap_root(f"kernelroot-{ROOTFS_SUITE}-v{KERNEL_ROOT_VERSION}",
                            KERNEL_ROOT_PACKAGES, cache)


LAB_MAC = "52:54:00:12:34:56"  # the user-mode NIC: the lab's own way in, DHCP from QEMU


@dataclass(frozen=True)
class DataNic:
    """A data port of the guest (a NIC the node's block declares), wired to one peer
    guest's port by a UDP socket pair on loopback (QEMU's `-netdev socket,udp=`): the
    guest's own kernel sees a virtio NIC with this MAC and nothing else on its wire."""

    mac: str
    local_port: int
    remote_port: int

    def argv(self, i: int) -> list[str]:
        return ["-netdev", f"socket,id=d{i},udp=127.0.0.1:{self.remote_port},"
                f"localaddr=127.0.0.1:{self.local_port}",
                "-device", f"virtio-net-pci,netdev=d{i},mac={self.mac}"]


def wired_pair(macs_a: Sequence[str], macs_b: Sequence[str]
               ) -> tuple[list[DataNic], list[DataNic]]:
    """Port n of guest a cabled to port n of guest b (a switch port's worth of wire)."""
    ports = free_ports(socket.SOCK_DGRAM, 2 * len(macs_a))
    a = [DataNic(m, ports[2 * i], ports[2 * i + 1]) for i, m in enumerate(macs_a)]
    b = [DataNic(m, ports[2 * i + 1], ports[2 * i]) for i, m in enumerate(macs_b)]
    return a, b


def _files(upper: Path, name: str, key: Path) -> None:
    """What this boot adds to the cached root: a lab host's identity (restrict=on leaves it
    no DNS server either), its disks, its network: DHCP on the lab's user-mode NIC only,
    by its MAC, so that the data ports are the host network role's alone."""
    seed_identity(upper, name, key)
    (upper / "etc/fstab").write_text("/dev/vda / ext4 rw,relatime 0 1\n"
                                     "/dev/vdb none swap sw 0 0\n")
    (upper / "etc/systemd/network").mkdir(parents=True)
    (upper / "etc/systemd/network/10-lab.network").write_text(
        f"[Match]\nMACAddress={LAB_MAC}\n\n[Network]\nDHCP=ipv4\n")
    wants = upper / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "systemd-networkd.service").symlink_to("/lib/systemd/system/"
                                                     "systemd-networkd.service")
    # Only the modules this guest's disks need: a full initramfs (MODULES=most) takes
    # update-initramfs 7.5 min under TCG here, this one 52 to 62 s (measured).
    (upper / "etc/initramfs-tools/conf.d").mkdir(parents=True)
    (upper / "etc/initramfs-tools/conf.d/lab.conf").write_text("MODULES=dep\n")


def _disks(root: Path, workdir: Path, name: str, key: Path) -> tuple[Path, Path]:
    """A fresh root disk (the cached root and this boot's files, through an overlay mount
    private to one mount namespace) and a swap disk."""
    for sub in ("upper", "work", "merged"):
        (workdir / sub).mkdir(parents=True)
    _files(workdir / "upper", name, key)
    disk, swap = workdir / "root.img", workdir / "swap.img"
    q = {k: shlex.quote(str(v)) for k, v in
         {"lower": root, "upper": workdir / "upper", "work": workdir / "work",
          "merged": workdir / "merged", "disk": disk}.items()}
    script = (f"mount -t overlay overlay -o lowerdir={q['lower']},upperdir={q['upper']},"
              f"workdir={q['work']} {q['merged']} && "
              f"mke2fs -q -t ext4 -F -d {q['merged']} {q['disk']} {DISK_SIZE}")
    _run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], timeout=300)
    with swap.open("wb") as f:
        f.truncate(SWAP_SIZE_MB * 1024 * 1024)
    _run(["mkswap", str(swap)], timeout=60)
    return disk, swap


def _kvm_opens() -> str | None:
    """Why /dev/kvm cannot host a guest, or None where it answers as KVM does."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return f"/dev/kvm: {e.strerror}"
    try:
        version = fcntl.ioctl(fd, KVM_GET_API_VERSION)
        if version != KVM_API_VERSION:
            return f"/dev/kvm answers KVM_GET_API_VERSION {version}, not {KVM_API_VERSION}"
        os.close(fcntl.ioctl(fd, KVM_CREATE_VM, 0))
    except OSError as e:
        return f"/dev/kvm: {e.strerror}"
    finally:
        os.close(fd)
    return None


def runs_a_guest(accel: str) -> bool:
    """Whether a guest under `accel` runs: the probe sector's "K" on its serial port within
    KVM_PROBE_S (QEMU, ours alone, is killed either way)."""
    with tempfile.TemporaryDirectory(prefix="kvm-probe-") as tmp:
        disk, serial = Path(tmp) / "probe.img", Path(tmp) / "serial.log"
        disk.write_bytes(PROBE_SECTOR.ljust(510, b"\0") + b"\x55\xaa")
        serial.touch()
        proc = subprocess.Popen(
            ["qemu-system-x86_64", "-accel", accel, "-m", "16", "-display", "none",
             "-monitor", "none", "-no-reboot", "-serial", f"file:{serial}",
             "-drive", f"file={disk},format=raw,if=floppy"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent)  # noqa: PLW1509 - no threads here
        try:
            deadline = time.monotonic() + KVM_PROBE_S
            while time.monotonic() < deadline and proc.poll() is None:
                if b"K" in serial.read_bytes():
                    return True
                time.sleep(0.1)
            return b"K" in serial.read_bytes()
        finally:
            proc.kill()
            proc.wait()


def _kvm_verdict_file() -> Path:
    """Where a kernel that did not come up under KVM is remembered until this machine
    boots again (nested KVM does not mend itself meanwhile): the KVM try costs 20 s."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return default_cache() / f"kvm-kernel-fails-{boot_id}"


@functools.cache
def accelerator() -> tuple[str, str]:
    """QEMU's accelerator for the guest and why: kvm where KVM runs guests on this
    machine, else tcg (probed once per process)."""
    remembered = _kvm_verdict_file()
    if remembered.is_file():
        return "tcg", (f"TCG, QEMU's CPU emulation: {remembered.read_text().strip()} "
                       f"(remembered since this machine booted: {remembered})")
    why_not = _kvm_opens()
    if why_not is None and not runs_a_guest("kvm"):
        why_not = (f"/dev/kvm answers KVM_GET_API_VERSION {KVM_API_VERSION}, but a guest "
                   f"under KVM ran nothing in {KVM_PROBE_S:g} s (nested KVM)")
    if why_not is None:
        return "kvm", "KVM: /dev/kvm runs guests"
    return "tcg", f"TCG, QEMU's CPU emulation: {why_not}"


def _die_with_parent() -> None:
    """In QEMU's child before exec: the guest ends with the process that started it, however
    that one ends (killed included), so no guest outlives its test."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, prctl(2)


def start(workdir: Path, key: Path, *, name: str = "kernelhost",
          root: Path | None = None, timeout_s: float = BOOT_TIMEOUT_S,
          data_disks: Sequence[Path] = (), forwards: Sequence[tuple[int, int]] = (),
          nics: Sequence[DataNic] = ()) -> KernelHost:
    """Boot the guest on a fresh disk in `workdir` and wait for its sshd; `key` (with its
    .pub beside it) logs in as root. `data_disks`: raw images attached after the root and
    swap disks (/dev/vdc on); `forwards`: (guest port, host port), the guest reaching
    127.0.0.1:host port at GUEST_FORWARD:guest port (QEMU's guestfwd, allowed under
    restrict=on); `nics`: data ports wired to a peer guest (wired_pair)."""
    if shutil.which("qemu-system-x86_64") is None:
        raise ConfigError("qemu-system-x86_64 is not installed",
                          hint="apt-get install qemu-system-x86 (scripts/bootstrap.sh does it)")
    root = root or ensure_kernel_root()
    kernel = sorted((root / "boot").glob("vmlinuz-*"))[-1]
    initrd = root / "boot" / kernel.name.replace("vmlinuz-", "initrd.img-")
    disk, swap = _disks(root, workdir, name, key)
    port = free_ports(socket.SOCK_STREAM, 1)[0]  # the guest's ssh forward
    accel, accel_note = accelerator()
    extra = _extra_argv(data_disks, forwards, nics)
    host = _launch(workdir, name, kernel, initrd, disk, swap, port, key, accel, accel_note,
                   extra)
    if accel == "kvm":
        why = _kvm_boot_fails(host, timeout_s)
        if why is None:
            return host
        # nested KVM ran the probe sector yet not this kernel (seen on CI machines under
        # load): the guest again under TCG, on disks made anew (the first boot wrote to them)
        stop(host)
        for sub in ("upper", "work", "merged"):
            shutil.rmtree(workdir / sub)
        disk, swap = _disks(root, workdir, name, key)
        why = f"the kernel under KVM {why} (nested KVM), though the probe guest ran"
        remembered = _kvm_verdict_file()
        remembered.parent.mkdir(parents=True, exist_ok=True)
        remembered.write_text(why + "\n")
        host = _launch(workdir, name, kernel, initrd, disk, swap, port, key, "tcg",
                       f"TCG, QEMU's CPU emulation: {why}", extra)
    try:
        _wait_ssh(host, timeout_s)
    except BaseException:
        stop(host)
        raise
    return host


def _kvm_boot_fails(host: KernelHost, timeout_s: float) -> str | None:
    """Why the guest under KVM did not come up (None: it did, its sshd answers)."""
    if not _prints_within(host, KVM_FIRST_LINE_S):
        return f"printed nothing in {KVM_FIRST_LINE_S:g} s"
    try:
        _wait_ssh(host, min(timeout_s, KVM_SSH_S))
    except ConfigError:
        return f"gave no ssh in {min(timeout_s, KVM_SSH_S):g} s"
    except BaseException:
        stop(host)
        raise
    return None


def _end_qemu(host: KernelHost) -> None:
    """End exactly the QEMU this module started (by PID and start time); disks stay."""
    if pids.send(host.pid, signal.SIGTERM, ticks=host.start_ticks):
        for _ in range(100):
            if pids.start_ticks(host.pid) != host.start_ticks:
                break
            time.sleep(0.1)
        pids.send(host.pid, signal.SIGKILL, ticks=host.start_ticks)
    host.process.wait()


GUEST_FORWARD = "10.0.2.100"  # where the guest reaches a forwarded host port


def _extra_argv(data_disks: Sequence[Path], forwards: Sequence[tuple[int, int]],
                nics: Sequence[DataNic] = ()) -> list[str]:
    """QEMU's arguments for the data disks and ports, then (last) the guest's forwards
    (options of the user-mode netdev)."""
    argv = [a for d in data_disks for a in ("-drive", f"file={d},format=raw,if=virtio")]
    argv += [a for i, nic in enumerate(nics) for a in nic.argv(i)]
    fwd = "".join(f",guestfwd=tcp:{GUEST_FORWARD}:{g}-tcp:127.0.0.1:{h}" for g, h in forwards)
    return [*argv, fwd]


def _launch(workdir: Path, name: str, kernel: Path, initrd: Path, disk: Path, swap: Path,
            port: int, key: Path, accel: str, accel_note: str, extra: list[str]
            ) -> KernelHost:
    """QEMU on the guest's disks under `accel`, its serial console in workdir/serial.log."""
    (workdir / "serial.log").write_bytes(b"")
    argv = ["qemu-system-x86_64", "-accel", accel, "-m", str(MEMORY_MB), "-smp", "1",
            "-display", "none", "-monitor", "none", "-no-reboot",
            "-serial", f"file:{workdir / 'serial.log'}",
            "-kernel", str(kernel), "-initrd", str(initrd),
            "-append", "root=/dev/vda rw console=ttyS0 panic=-1",
            "-drive", f"file={disk},format=raw,if=virtio",
            "-drive", f"file={swap},format=raw,if=virtio", *extra[:-1],
            "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22{extra[-1]}",
            "-device", f"virtio-net-pci,netdev=n0,mac={LAB_MAC}"]
    with (workdir / "qemu.log").open("w") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent)  # noqa: PLW1509 - no threads here
    return KernelHost(name=name, pid=proc.pid, start_ticks=pids.start_ticks(proc.pid) or 0,
                      port=port, key=key, workdir=workdir, process=proc, accel=accel,
                      accel_note=accel_note)


def _prints_within(host: KernelHost, seconds: float) -> bool:
    """Whether the guest's kernel wrote to its serial console within `seconds`."""
    serial = host.workdir / "serial.log"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if serial.stat().st_size > 0:
            return True
        if pids.start_ticks(host.pid) != host.start_ticks:
            return False  # QEMU exited
        time.sleep(0.2)
    return serial.stat().st_size > 0


def _wait_ssh(host: KernelHost, timeout_s: float) -> None:
    """Until root logs in over ssh: QEMU accepts on the forward before the guest's sshd."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pids.start_ticks(host.pid) != host.start_ticks:
            raise ConfigError(f"kernel host {host.name}: QEMU exited at boot",
                              hint=f"see {host.workdir / 'qemu.log'} and serial.log")
        with contextlib.suppress(subprocess.TimeoutExpired):
            if subprocess.run(host.ssh_argv("true"), capture_output=True, timeout=20,
                              check=False).returncode == 0:
                return
        time.sleep(1)
    raise ConfigError(f"kernel host {host.name}: no ssh in {timeout_s:g} s",
                      hint=f"see {host.workdir / 'serial.log'}")


def stop(host: KernelHost) -> None:
    """End exactly the QEMU this module started (by PID and start time), then its disks."""
    _end_qemu(host)
    for image in ("root.img", "swap.img"):
        (host.workdir / image).unlink(missing_ok=True)
