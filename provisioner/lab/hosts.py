"""SSH test hosts for the lab: one network namespace + systemd + copy-on-write root per node.

Each host is a network namespace holding the node's management address, connected by a
veth pair to a bridge that carries the network's gateway address. In it, systemd runs as
PID 1 of the host's own PID, mount, UTS, IPC and cgroup namespaces, chrooted into an
overlayfs of a shared Debian root filesystem (debootstrap, built once and cached), and
starts the host's sshd as a unit (lab-sshd.service), so the roles' service tasks run for
real. Whatever Ansible changes lands in the host's own `upper/` directory and nowhere
else. A reboot is real too: systemd's reboot() in a PID namespace ends only that namespace's
init (killed by SIGHUP, reboot(2)); the host's launcher then boots it again on the same
disk (`upper/`) with a fresh /run and a new boot id, as systemd-nspawn does. Needs root,
iproute2, util-linux (unshare), a cgroup-v1 name=systemd hierarchy and debootstrap.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

from provisioner import install, pids
from provisioner.errors import ConfigError
from provisioner.lab import hostwatch, orphans
from provisioner.lab.rootfs import ensure_rootfs
from provisioner.pids import start_ticks

# Units that cannot work in a namespace, or must not touch the real machine: consoles,
# device management, the clock (chrony runs with -x below), networking (set from outside),
# kernel modules, sysctls and binfmt_misc (the real machine's kernel: systemd-binfmt clears
# every registered format when it stops, as at each reboot), Debian's own ssh unit
# (lab-sshd.service replaces it). logind runs: `shutdown -r`, which Ansible's reboot module
# runs, goes through it as on Ubuntu; LOGIND_CONF keeps it off the real machine's consoles.
MASKED_UNITS = ("getty@.service", "console-getty.service",
                "systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount",
                "proc-sys-fs-binfmt_misc.mount",
                "serial-getty@.service", "systemd-udevd.service",
                "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
                "systemd-udev-trigger.service", "systemd-timesyncd.service",
                "systemd-networkd.service", "systemd-resolved.service",
                "systemd-networkd-wait-online.service", "ssh.service", "ssh.socket",
                "systemd-modules-load.service", "systemd-sysctl.service",
                "sys-kernel-debug.mount", "sys-kernel-tracing.mount",
                "systemd-remount-fs.service", "systemd-firstboot.service")
LAB_SSHD_UNIT = """[Unit]
Description=sshd of a provisioner lab host
After=network.target

[Service]
ExecStartPre=/usr/bin/mkdir -p /run/sshd
ExecStart=/usr/sbin/sshd -D -f /etc/ssh/sshd_config.lab -E /var/log/sshd.log
KillMode=process
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""
# How the launcher sees an init that called reboot(RESTART) in its PID namespace: killed by
# SIGHUP (reboot(2)), which unshare passes on, so the shell reads 128 + 1.
REBOOT_STATUS = 128 + signal.SIGHUP
BOOT_LOOP_S = 30  # a boot that reboots sooner than this counts toward a boot loop
BOOT_LOOP_BOOTS = 5  # that many in a row: the host is left off
# /dev is the real machine's: no virtual terminal is reserved or spawned (logind.conf(5))
LOGIND_CONF = "[Login]\nNAutoVTs=0\nReserveVT=0\n"
# chronyd must never set the real machine's clock: -x leaves it alone (chronyd(8)).
CHRONY_DROPIN = "[Service]\nExecStart=\nExecStart=!/usr/sbin/chronyd $DAEMON_OPTS -x\n"


@dataclass
class SshHost:
    name: str
    address: str
    netns: str
    veth: str
    pid: int
    start_ticks: int
    upper: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 120,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)
    if check and proc.returncode != 0:
        raise ConfigError(f"lab hosts: `{' '.join(argv[:4])}` failed: "
                          f"{(proc.stderr or proc.stdout).strip()[:300]}")
    return proc


def seed_identity(upper: Path, name: str, key: Path) -> None:
    """What an installer writes and debootstrap does not, on a lab host's fresh disk (`upper`,
    over the cached root): its own SSH host key, the lab's key for root, its name, also in
    /etc/hosts (without it every fact gathering's getfqdn() asked DNS first), and no
    resolver: debootstrap copied the real machine's, unreachable from the lab's networks (a
    10 s timeout per lookup), and the lab has no DNS server. The namespace hosts' and the
    kernel host's (kernel_host.py)."""
    (upper / "etc/ssh").mkdir(parents=True, exist_ok=True)
    (upper / "root/.ssh").mkdir(parents=True, exist_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
          str(upper / "etc/ssh/ssh_host_ed25519_key")])
    shutil.copy(str(key) + ".pub", upper / "root/.ssh/authorized_keys")
    (upper / "root/.ssh").chmod(0o700)
    (upper / "etc/hostname").write_text(name + "\n")
    (upper / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n"
                                      "::1 localhost ip6-localhost\n")
    (upper / "etc/resolv.conf").write_text("# provisioner lab: no DNS server on its "
                                           "networks\n")


def bridge_name(tag: str) -> str:
    return "pvb" + hashlib.sha1(tag.encode()).hexdigest()[:8]  # noqa: S324 - a name, not security


def up(hosts: Sequence[tuple[str, IPv4Address]], network: IPv4Network, gateway: IPv4Address,
       workdir: Path, rootfs: Path, tag: str, timeout_s: float = 30.0, *,
       record: Path | None = None,
       on_start: Callable[[SshHost], None] | None = None) -> list[SshHost]:
    """Start one namespaced sshd per (name, address); the bridge gets the gateway address.
    Each host is handed to `on_start` as soon as it runs (the lab records it at once, so
    `lab down` ends it even if this process is killed) and claimed for `record`, the state
    file that lists it (lab/orphans.py: `lab prune`). All hosts are waited for at once; the
    first whose init ends fails the whole start, and every host started is ended."""
    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "id_ed25519"
    if not key.exists():
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "provisioner-lab",
              "-f", str(key)])
    bridge = bridge_name(tag)
    for line in _run(["ip", "-o", "-4", "addr", "show"], check=False).stdout.splitlines():
        fields = line.split()
        if f"inet {gateway}/" in line and fields[1] != bridge:
            if orphans.is_leftover_bridge(fields[1]):
                raise ConfigError(f"lab hosts: {gateway} is still on {fields[1]}, left by a "
                                  "lab that was killed before `lab down` (no process runs "
                                  "in it)", hint="`provision lab prune` removes what it left")
            raise ConfigError(f"lab hosts: {gateway} is already on {fields[1]}: another lab "
                              f"(or a real network) uses {network}",
                              hint="stop the other lab (`provision lab down`) first")
    if _run(["ip", "link", "show", bridge], check=False).returncode != 0:
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{gateway}/{network.prefixlen}", "dev", bridge])
        _run(["ip", "link", "set", bridge, "up"])
    started: list[tuple[SshHost, hostwatch.Booting]] = []
    try:
        for i, (name, address) in enumerate(hosts):
            started.append(start_host(name, address, network, gateway, workdir, rootfs,
                                      bridge, f"{tag[:6]}{i}", key, record=record))
            if on_start is not None:
                on_start(started[-1][0])
        hostwatch.wait_ssh([b for _, b in started], timeout_s)
    except BaseException:
        down([h for h, _ in started], tag)
        raise
    return [h for h, _ in started]


def start_host(name: str, address: IPv4Address, network: IPv4Network, gateway: IPv4Address,
               workdir: Path, rootfs: Path, bridge: str, short: str, key: Path,
               files: Mapping[str, bytes] | None = None, record: Path | None = None
               ) -> tuple[SshHost, hostwatch.Booting]:
    """One host, and its launcher to wait on (hostwatch.wait_ssh); `files` (absolute path
    -> bytes, 0600) are in place before its init starts (an execution node's key:
    lab/execution.py); `record` is the state file that will list it (orphans.claim)."""
    netns = f"pv-{short}"
    veth = f"pv{short}"[:15]
    d = workdir / name
    shutil.rmtree(d, ignore_errors=True)
    for sub in ("upper/etc/ssh", "upper/root/.ssh", "upper/run/sshd", "work", "merged"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    _run(["ip", "netns", "add", netns])
    _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
    _run(["ip", "link", "set", veth, "master", bridge, "up"])
    _run(["ip", "-n", netns, "addr", "add", f"{address}/{network.prefixlen}", "dev", "eth0"])
    _run(["ip", "-n", netns, "link", "set", "eth0", "up"])
    _run(["ip", "-n", netns, "link", "set", "lo", "up"])
    _run(["ip", "-n", netns, "route", "add", "default", "via", str(gateway)])
    seed_identity(d / "upper", name, key)
    # the install marker, which the autoinstall late-commands write (render/pxe.py) and `up`
    # reads (workflows/steps/guard)
    (d / "upper" / install.MARKER.lstrip("/")).write_text(name + "\n")
    for p, data in (files or {}).items():
        target = d / "upper" / p.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o600)
    # The lab's own paths live under /tmp on test machines: systemd-tmpfiles must not empty
    # it at boot (Debian's tmp.conf `D /tmp`); an /etc file of the same name overrides it
    # (tmpfiles.d(5)).
    (d / "upper/etc/tmpfiles.d").mkdir(parents=True, exist_ok=True)
    (d / "upper/etc/tmpfiles.d/tmp.conf").write_text("# lab host: /tmp is kept at boot\n")
    (d / "upper/etc/ssh/sshd_config.lab").write_text(
        f"ListenAddress {address}\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
        "PidFile /run/sshd.pid\nSubsystem sftp /usr/lib/openssh/sftp-server\n")
    _write_units(d / "upper/etc/systemd/system")
    q = {k: shlex.quote(str(v)) for k, v in (
        ("m", d / "merged"), ("boot_id", d / "boot_id"), ("cgroup", orphans.cgroup_of(netns)),
        ("name", name), ("netns", netns))}
    m = q["m"]
    # Inside the host's own PID, mount, UTS, IPC and cgroup namespaces: systemd is PID 1 of
    # its PID namespace, so killing it ends every process of the host. The real machine is
    # never changed: mounts are private to the namespace, sysfs is the netns' own and
    # read-only, the cgroup hierarchy is a sub-tree (cgroup namespace) of the lab's own.
    # Every path is quoted: a lab directory may contain spaces.
    inner = (f"hostname {q['name']} && "
             "mount -t overlay overlay -o "
             + shlex.quote(f"lowerdir={rootfs},upperdir={d / 'upper'},workdir={d / 'work'}")
             + f" {m} && "
             f"mount -t proc proc {m}/proc && "
             # a boot id of this boot (what `reboot` waits on to change), as nspawn does
             f"cat /proc/sys/kernel/random/uuid > {q['boot_id']} && "
             f"mount --bind -o ro {q['boot_id']} {m}/proc/sys/kernel/random/boot_id && "
             f"mount -t sysfs -o ro sysfs {m}/sys && "
             f"mount -t tmpfs -o mode=755 tmpfs {m}/sys/fs/cgroup && "
             f"mkdir {m}/sys/fs/cgroup/systemd && "
             f"mount -t cgroup -o none,name=systemd cgroup {m}/sys/fs/cgroup/systemd && "
             f"mount -t tmpfs -o mode=755 tmpfs {m}/run && "
             f"mount --rbind /dev {m}/dev && "
             "exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin container=provisioner-lab "
             f"chroot {m} /lib/systemd/systemd --system --log-target=console")
    # The launcher is the host's hardware: an init killed by SIGHUP asked for a reboot
    # (exit 129), so the host boots again; any other end (poweroff, a kill) stops it. A host
    # that reboots again within BOOT_LOOP_S of every boot, BOOT_LOOP_BOOTS times in a row, is
    # in a boot loop (a unit that reboots at every boot): it is left off, as a BMC's
    # watchdog would, instead of burning the machine's CPU without end.
    cgroup = q["cgroup"]
    outer = (f"mkdir -p {cgroup} && echo $$ > {cgroup}/cgroup.procs && fast=0 && "
             "while :; do start=$(date +%s); "
             f"ip netns exec {q['netns']} unshare --fork --pid --mount --uts --ipc "
             f"--cgroup --propagation private --kill-child sh -c {shlex.quote(inner)}; "
             f"rc=$?; [ $rc -eq {REBOOT_STATUS} ] || exit $rc; "
             f"if [ $(($(date +%s) - start)) -lt {BOOT_LOOP_S} ]; then fast=$((fast + 1)); "
             "else fast=0; fi; "
             f"if [ $fast -ge {BOOT_LOOP_BOOTS} ]; then echo lab host {q['name']}: "
             f"{BOOT_LOOP_BOOTS} reboots within {BOOT_LOOP_S} s of boot: boot loop, left off; "
             "exit 1; fi; "
             f"echo lab host {q['name']}: reboot; done")
    if record is not None:
        orphans.claim(netns, record)
    log = open(d / "host.log", "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        proc = subprocess.Popen(["sh", "-c", outer],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        log.close()
    # The launcher joins the host's cgroup itself, but only once its shell has run: until
    # then it is in neither the namespace nor the cgroup, and a `lab up` killed at that
    # moment left a recorded host that `lab prune` saw as an empty namespace while its
    # launcher went on. It is put there now, before anyone is told of the host.
    with contextlib.suppress(OSError):
        cgroup_dir = orphans.cgroup_of(netns)
        cgroup_dir.mkdir(parents=True, exist_ok=True)
        (cgroup_dir / "cgroup.procs").write_text(f"{proc.pid}\n")
    ticks = start_ticks(proc.pid) or 0
    host = SshHost(name=name, address=str(address), netns=netns, veth=veth, pid=proc.pid,
                   start_ticks=ticks, upper=str(d / "upper"))
    return host, hostwatch.Booting(name, str(address), proc, host.upper)


def _write_units(etc_systemd: Path) -> None:
    """The host's sshd as a unit of its systemd, the masks, chrony without the clock."""
    wants = etc_systemd / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (etc_systemd / "lab-sshd.service").write_text(LAB_SSHD_UNIT)
    (wants / "lab-sshd.service").symlink_to("../lab-sshd.service")
    for unit in MASKED_UNITS:
        (etc_systemd / unit).symlink_to("/dev/null")
    (etc_systemd / "logind.conf.d").mkdir()
    (etc_systemd / "logind.conf.d/lab.conf").write_text(LOGIND_CONF)
    (etc_systemd / "chrony.service.d").mkdir()
    (etc_systemd / "chrony.service.d/lab.conf").write_text(CHRONY_DROPIN)


def add_host(name: str, address: IPv4Address, network: IPv4Network, gateway: IPv4Address,
             workdir: Path, rootfs: Path, tag: str, index: int,
             timeout_s: float = 30.0, record: Path | None = None) -> SshHost:
    """One more host on a running lab's bridge (a node `provision add` put in the site);
    `index` must be one no host of the lab has (it names the namespace)."""
    host, booting = start_host(name, address, network, gateway, workdir, rootfs,
                               bridge_name(tag), f"{tag[:6]}{index}", workdir / "id_ed25519",
                               record=record)
    try:
        hostwatch.wait_ssh([booting], timeout_s)
    except BaseException:
        _stop_host(host)
        raise
    return host


def down(hosts: Sequence[SshHost], tag: str) -> None:
    """Stop exactly these hosts' processes, delete their namespaces, veths and the bridge."""
    for h in hosts:
        _stop_host(h)
    _run(["ip", "link", "del", bridge_name(tag)], check=False)


def kill(h: SshHost) -> list[int]:
    """SIGKILL every process of the host; the pids signalled. The launcher first, so that
    it boots nothing again; then whatever runs in the host's namespace or its cgroup (a boot
    the launcher had just begun is in the cgroup only), until none is left."""
    killed: set[int] = set()
    if pids.send(h.pid, signal.SIGKILL, ticks=h.start_ticks):
        killed.add(h.pid)
    return sorted(killed | set(orphans.end(h.netns)))


def _stop_host(h: SshHost) -> None:
    """Kill the host's processes (and its sessions), delete its namespace and veth."""
    kill(h)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(h.pid, os.WNOHANG)
    _run(["ip", "netns", "del", h.netns], check=False)
    _run(["ip", "link", "del", h.veth], check=False)
    orphans.remove_cgroup(h.netns)
    orphans.unclaim(h.netns)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m provisioner.lab.hosts up|down WORKDIR [NAME=ADDRESS/PREFIX ...]`.

    For Molecule's create/destroy playbooks: the hosts and their key live in WORKDIR.
    """
    import argparse
    import json
    from ipaddress import IPv4Interface

    ap = argparse.ArgumentParser(prog="provisioner.lab.hosts")
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("hosts", nargs="*", help="NAME=ADDRESS/PREFIX")
    args = ap.parse_args(argv)
    record = args.workdir / "hosts.json"
    tag = hashlib.sha1(str(args.workdir.resolve()).encode()).hexdigest()[:8]  # noqa: S324
    if args.action == "down":
        if record.exists():
            down([SshHost(**h) for h in json.loads(record.read_text())], tag)
            record.unlink()
        return 0
    plan: list[tuple[str, IPv4Interface]] = []
    for spec in args.hosts:
        name, _, iface = spec.partition("=")
        plan.append((name, IPv4Interface(iface)))
    if not plan:
        ap.error("name at least one NAME=ADDRESS/PREFIX")
    network = plan[0][1].network
    gateway = next(a for a in network.hosts() if a not in {i.ip for _, i in plan})
    started = up([(n, i.ip) for n, i in plan], network, gateway, args.workdir,
                 ensure_rootfs(), tag)
    record.write_text(json.dumps([h.to_json() for h in started]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
