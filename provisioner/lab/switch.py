"""The lab's switches: FRRouting's vtysh over SSH standing in for each managed switch.

For every managed switch with cabled ports (the example's RoCE leaf), `lab up --ssh-hosts`
starts zebra in a network namespace of its own (one veth per cabled port, named as in the
inventory where Linux allows the name) and an SSH server on 127.0.0.1 whose shell is vtysh
(lab/vtysh_ssh.py). The overlay points the switch's management at it with the lab's own
password, and names the dialect it speaks (`stand_in: cisco_ios`, what netmiko drives FRR
as). There is no NVUE, Onyx, SONiC or EOS simulator here: what a stand-in receives is the
IOS-style rendering of the same ports (descriptions); the switch's own OS rendering is still
rendered and checked against the hosts, never pushed in the lab. Needs root and Debian's
`frr`; without them the lab starts without switches and says why.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provisioner import fabric, pids
from provisioner.errors import ConfigError
from provisioner.inventory.loader import LoadedSite
from provisioner.lab import procs

FRR_DIR = Path("/usr/lib/frr")
VTY_ROOT = Path("/var/run/frr")
STAND_IN = "cisco_ios"  # netmiko's dialect for FRR's vtysh (tested: test_switches_frr.py)
LAB_SWITCH_CREDENTIALS = "lab-switch"
IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # what `ip link add` accepts as a name


@dataclass
class LabSwitch:
    name: str
    netns: str
    port: int
    conf_dir: str
    vty_dir: str
    zebra_pid: int
    zebra_ticks: int
    ssh_pid: int
    ssh_ticks: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def missing() -> str | None:
    """Why the lab cannot start switch stand-ins here, or None."""
    if not (FRR_DIR / "zebra").exists() or shutil.which("vtysh") is None:
        return "FRRouting is not installed (apt-get install frr; scripts/bootstrap.sh)"
    if os.geteuid() != 0:
        return "switch stand-ins run in network namespaces and need root"
    try:
        import twisted.conch  # noqa: F401
    except ImportError:
        return "twisted[conch] is not installed (the SSH server in front of vtysh)"
    return None


def plan(loaded: LoadedSite) -> dict[str, list[str]]:
    """Managed switches with cabled ports -> their port names (placement order)."""
    return {s.hostname: [p.name for p in s.ports] for s in fabric.switch_specs(loaded)}


def _sh(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise ConfigError(f"lab switch: `{' '.join(argv[:5])}` failed: "
                          f"{proc.stderr.strip()[:200]}")


def _ticks(pid: int) -> int:
    ticks = pids.start_ticks(pid)
    if ticks is None:
        raise ConfigError(f"lab switch: process {pid} exited at start")
    return ticks


def start_one(name: str, ports: list[str], workdir: Path, tag: str, password_file: Path,
              timeout_s: float) -> LabSwitch:
    """zebra in namespace pvl<tag>-<name>, and vtysh over SSH on a free loopback port. Its
    config, vty sockets and pid file live in /var/run/frr/<namespace> (zebra runs as the
    `frr` user, which cannot enter the lab's private .provision/)."""
    netns = f"pvl{tag}-{name}"[:40]
    vty = conf = VTY_ROOT / netns
    workdir.mkdir(parents=True, exist_ok=True)
    _reclaim(netns)
    shutil.rmtree(vty, ignore_errors=True)
    vty.mkdir(parents=True)
    _sh("ip", "netns", "add", netns)
    try:
        zebra = _start_zebra(name, ports, netns, conf, timeout_s)
    except BaseException:  # leave no namespace or directory behind a failed start
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False,
                       timeout=30)
        shutil.rmtree(vty, ignore_errors=True)
        raise
    port = procs.free_ports(socket.SOCK_STREAM, 1)[0]
    log = workdir / f"{name}-ssh.log"
    server = procs.spawn([sys.executable, "-m", "provisioner.lab.vtysh_ssh", str(port),
                          str(vty), str(conf), str(password_file)], log)
    sw = LabSwitch(name, netns, port, str(conf), str(vty), zebra, _ticks(zebra), server.pid,
                   _ticks(server.pid))
    try:
        procs.wait_tcp(port, timeout_s, server, f"vtysh SSH server for {name}")
    except ConfigError:
        down([sw])
        raise
    return sw


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _reclaim(netns: str) -> None:
    """A namespace of this name is this lab's own (the tag is its directory's), left by a
    run killed before `lab down`: stop the zebra left in it and delete it. Anything else
    running there is not ours to stop: refuse, naming it."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=False, timeout=30).stdout.split()
    if netns not in listed:
        return
    listed_pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True,
                                 text=True, check=False, timeout=30).stdout.split()
    for pid in map(int, listed_pids):
        comm = _comm(pid)
        if comm is None:
            continue
        if comm != "zebra":
            raise ConfigError(f"lab switch: namespace {netns} (left by an earlier lab) runs "
                              f"{comm} (pid {pid}), not started by the lab",
                              hint=f"stop it, then `ip netns del {netns}`")
        pids.send(pid, signal.SIGTERM, check=lambda p: _comm(p) == "zebra")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and subprocess.run(
            ["ip", "netns", "pids", netns], capture_output=True, text=True, check=False,
            timeout=30).stdout.split():
        time.sleep(0.05)
    _sh("ip", "netns", "del", netns)


def _start_zebra(name: str, ports: list[str], netns: str, conf: Path, timeout_s: float) -> int:
    _sh("ip", "-n", netns, "link", "set", "lo", "up")
    for dev in [p for p in ports if IFNAME.match(p) and len(p) <= 13]:
        _sh("ip", "-n", netns, "link", "add", dev, "type", "veth", "peer", "name", f"{dev}p")
        _sh("ip", "-n", netns, "link", "set", dev, "up")
    (conf / "frr.conf").write_text(f"hostname {name}\n")
    (conf / "vtysh.conf").write_text("")
    conf.chmod(0o755)
    for p in (conf, conf / "frr.conf", conf / "vtysh.conf"):
        shutil.chown(p, "frr", "frr")
    pid_file = conf / "zebra.pid"
    _sh("ip", "netns", "exec", netns, str(FRR_DIR / "zebra"), "-d", "-N", netns, "-P", "0",
        "-i", str(pid_file), "-f", str(conf / "frr.conf"), "--vty_socket", str(conf))
    deadline = time.monotonic() + timeout_s
    while not (pid_file.exists() and pid_file.read_text().strip()):
        if time.monotonic() > deadline:
            raise ConfigError(f"lab switch {name}: zebra wrote no pid file in {timeout_s:g} s")
        time.sleep(0.05)
    return int(pid_file.read_text())


def up(loaded: LoadedSite, workdir: Path, tag: str, password_file: Path,
       timeout_s: float) -> list[LabSwitch]:
    started: list[LabSwitch] = []
    try:
        for name, ports in plan(loaded).items():
            started.append(start_one(name, ports, workdir, tag, password_file, timeout_s))
    except BaseException:
        down(started)
        raise
    return started


def down(switches: list[LabSwitch]) -> None:
    """Stop exactly these processes (same PID and start time), delete the namespaces."""
    for sw in switches:
        for pid, ticks in ((sw.ssh_pid, sw.ssh_ticks), (sw.zebra_pid, sw.zebra_ticks)):
            pids.send(pid, signal.SIGTERM, ticks=ticks)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
                pids.start_ticks(p) == t for p, t in ((sw.ssh_pid, sw.ssh_ticks),
                                                 (sw.zebra_pid, sw.zebra_ticks))):
            time.sleep(0.05)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(sw.ssh_pid, os.WNOHANG)
        subprocess.run(["ip", "netns", "del", sw.netns], capture_output=True, check=False,
                       timeout=30)
        shutil.rmtree(sw.vty_dir, ignore_errors=True)


def overlay(switches: list[LabSwitch], password_file: Path) -> dict[str, Any]:
    """The overlay's part for the switches: endpoint, the lab's login, the dialect spoken."""
    return {
        "credentials": {LAB_SWITCH_CREDENTIALS: {
            "username": "admin", "password": {"file": str(password_file.resolve())}}},
        "switches": {sw.name: {"address": procs.LOOPBACK, "port": sw.port,
                               "credentials": LAB_SWITCH_CREDENTIALS, "stand_in": STAND_IN}
                     for sw in switches},
    }
