"""The local lab: real third-party BMC implementations on loopback for every node of a site.

- Redfish nodes: one sushy-tools emulator (fake driver, one system per node, named after the
  node, with the node's MACs), fresh state directory per lab, HTTP basic auth (bcrypt).
- IPMI nodes: one OpenIPMI `ipmi_sim` per node, with a chassis-control program that keeps
  power and boot state in files (`ipmi/<host>/chassis/{power,boot,history}`).
- Optional latency proxy in front of every BMC (`--latency-ms`).

`lab up` writes the endpoints into an overlay in the lab's part of .provision/ (overlay.py
reads it back for the CLI), with a random password in a 0600 file, and records every PID with its
start time as each starts (lab.json, with the `lab up` itself while it is starting); `lab
down` stops exactly those processes, also those of an `up` that failed or was killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import yaml

from provisioner import pids, resources
from provisioner.errors import ConfigError
from provisioner.inventory import topology
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import BmcProtocol, NetworkKind, Node
from provisioner.lab import emulators, limits, procs
from provisioner.lab import execution as execution_mod
from provisioner.lab import hosts as hosts_mod
from provisioner.lab import mirror as mirror_mod
from provisioner.lab import overlay as overlay_mod
from provisioner.lab import rootfs as rootfs_mod
from provisioner.lab import shapes as lab_shapes
from provisioner.lab import switch as switch_mod
from provisioner.lab.labstate import LabProcess as LabProcess
from provisioner.lab.labstate import LabState as LabState
from provisioner.lab.procs import LOOPBACK
from provisioner.secrets import write_private
from provisioner.state.dir import state_dir as site_state_dir

LAB_USER = "admin"
# Redfish systems per sushy-tools process. Real BMCs each have their own CPU; one Flask
# process for hundreds of systems would make the lab, not the tool, the bottleneck.
SYSTEMS_PER_EMULATOR = 32
LAB_CREDENTIALS = "lab-bmc"


def state_dir(loaded: LoadedSite) -> Path:
    """The site's .provision/ (private, with its .gitignore): the lab lives inside it."""
    return site_state_dir(loaded.base_dir.resolve())


def lab_dir(loaded: LoadedSite) -> Path:
    return state_dir(loaded) / "lab"


def _record(state: LabState, role: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    ticks = pids.start_ticks(proc.pid)
    if ticks is None:
        raise ConfigError(f"lab: {role} exited at start", hint=f"see {log}")
    state.processes.append(LabProcess(role, proc.pid, ticks, str(log)))
    _checkpoint(state)


def _checkpoint(state: LabState) -> None:
    """While `lab up` runs: what it started so far, on disk (`lab down` ends it)."""
    if state.state_file:
        _save(Path(state.state_file).parent, state)


def _lab_nodes(loaded: LoadedSite) -> list[Node]:
    return topology.bmc_nodes(loaded)


def _mac_for(node: Node, index: int) -> str:
    if node.macs:
        return sorted(node.macs.values())[0]
    return f"52:54:00:ff:{(index >> 8) & 255:02x}:{index & 255:02x}"


def _save(lab: Path, state: LabState) -> None:
    tmp = lab / "lab.json.tmp"
    tmp.write_text(json.dumps({k: v for k, v in state.to_json().items() if k != "state_file"},
                              indent=2))
    tmp.replace(lab / "lab.json")


def status(loaded: LoadedSite) -> LabState | None:
    path = lab_dir(loaded) / "lab.json"
    if not path.exists():
        return None
    return LabState.from_json(json.loads(path.read_text()))


def up(loaded: LoadedSite, *, latency_ms: int = 0, start_timeout_s: float = 30.0,
       ssh_hosts: bool = False, rootfs_cache: Path | None = None) -> LabState:
    """Start every node's BMC emulator (and, with ssh_hosts, an SSH test host per server);
    write the overlay (overlay.py) that the CLI applies to the site while the lab runs."""
    emulators.require_lab_extra()
    current = status(loaded)
    if current is not None and current.anything_runs():
        raise ConfigError("the lab is already running for this site",
                          hint="`provision lab status` shows it; `provision lab down` stops it")
    if current is not None:  # a lab that died: what it left (namespaces, its bridge) goes
        _stop(current)
    notes = []
    if ssh_hosts and os.geteuid() == 0:  # before anything starts (else: refused, said why)
        notes = limits.ensure(len(ssh_plan(loaded)[0]) + len(execution_mod.planned(loaded)))
    lab = lab_dir(loaded)
    shutil.rmtree(lab, ignore_errors=True)
    lab.mkdir(parents=True, mode=0o700)
    password = secrets.token_hex(8)  # IPMI passwords: at most 16 bytes for IPMI 1.5 users
    pw_file = lab / "bmc-password"
    write_private(pw_file, password + "\n")
    state = LabState(site=loaded.site.site.name, latency_ms=latency_ms, notes=notes,
                     starting=[os.getpid(), pids.start_ticks(os.getpid()) or 0],
                     state_file=str(lab / "lab.json"))
    _checkpoint(state)
    try:
        _start(loaded, lab, state, password, latency_ms, start_timeout_s)
        if ssh_hosts:
            _start_ssh_hosts(loaded, lab, state, rootfs_cache, start_timeout_s)
            _start_switches(loaded, lab, state, pw_file, start_timeout_s)
    except BaseException:
        _stop(state)
        state.starting, state.state_file = [], ""
        _save(lab, state)
        raise
    _write_overlay(loaded, state, pw_file)
    state.starting, state.state_file = [], ""
    _save(lab, state)
    return state


def _start(loaded: LoadedSite, lab: Path, state: LabState, password: str, latency_ms: int,
           timeout_s: float) -> None:
    nodes = _lab_nodes(loaded)
    redfish = [n for n in nodes if n.bmc and n.bmc.protocol is BmcProtocol.REDFISH]
    ipmi = [n for n in nodes if n.bmc and n.bmc.protocol is BmcProtocol.IPMI]
    proxy_tcp: list[list[int]] = []
    proxy_udp: list[list[int]] = []
    shards = [redfish[i:i + SYSTEMS_PER_EMULATOR]
              for i in range(0, len(redfish), SYSTEMS_PER_EMULATOR)]
    tcp_ports = procs.free_ports(socket.SOCK_STREAM,
                            2 * len(shards) + (len(redfish) if latency_ms else 0))
    udp_ports = procs.free_ports(socket.SOCK_DGRAM, len(ipmi) * (2 if latency_ms else 1))
    shape_ports = tcp_ports[len(shards):2 * len(shards)]
    fronts_tcp = iter(tcp_ports[2 * len(shards):])
    started = [(shard, _start_sushy(loaded, lab / f"redfish-{i}", state, password, shard,
                                    tcp_ports[i], f"redfish-{i}"))
               for i, shard in enumerate(shards)]
    for _, (port, proc) in started:
        procs.wait_tcp(port, timeout_s, proc, "sushy-emulator")
    if shards:
        lab_shapes.start(lab, state, [[shape_ports[i], port]
                                      for i, (_, (port, _)) in enumerate(started)],
                         lab_shapes.site_shapes(loaded, state), timeout_s, _record)
    for i, (shard, _) in enumerate(started):
        port = shape_ports[i]
        for n in shard:
            ep = state.endpoints[n.hostname]
            ep["port"] = port
            if latency_ms:
                ep["port"] = next(fronts_tcp)
                proxy_tcp.append([ep["port"], port])
    ctl = lab / "chassisctl.sh"
    ctl.write_bytes(resources.package_bytes("provisioner.lab", "chassisctl.sh"))
    ctl.chmod(0o700)
    pending: list[tuple[Node, int, subprocess.Popen[bytes]]] = []
    for n, port in zip(ipmi, udp_ports, strict=False):
        proc, log = emulators.spawn_ipmi_sim(lab / "ipmi" / n.hostname, n.hostname, port,
                                             password, ctl, LAB_USER)
        _record(state, f"ipmi:{n.hostname}", proc, log)
        pending.append((n, port, proc))
    fronts = udp_ports[len(ipmi):]
    for i, (n, port, proc) in enumerate(pending):
        procs.wait_ipmi(port, timeout_s, proc, f"ipmi_sim for {n.hostname}")
        ep = {"address": LOOPBACK, "port": port, "cipher_suite": 3,
              "chassis_dir": str(lab / "ipmi" / n.hostname / "chassis")}
        if latency_ms:
            ep["port"] = fronts[i]
            proxy_udp.append([fronts[i], port])
        state.endpoints[n.hostname] = ep
    if latency_ms:
        cfg = lab / "proxy.json"
        cfg.write_text(json.dumps({"latency_ms": latency_ms, "tcp": proxy_tcp,
                                   "udp": proxy_udp}))
        log = lab / "proxy.log"
        proc = procs.spawn([sys.executable, "-m", "provisioner.lab.proxy", str(cfg)], log)
        _record(state, "proxy", proc, log)
        for listen, _ in proxy_tcp:
            procs.wait_tcp(listen, timeout_s, proc, "latency proxy")
        deadline = time.monotonic() + timeout_s
        while "proxy ready" not in log.read_text() and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ConfigError("lab: latency proxy exited at start", hint=f"see {log}")
            time.sleep(0.05)


def ssh_plan(loaded: LoadedSite) -> tuple[list[tuple[str, IPv4Address]], IPv4Network,
                                         IPv4Address]:
    """(host, management address) for every server, the management network and gateway."""
    mgmt = [n for n in loaded.site.networks if n.kind is NetworkKind.MANAGEMENT]
    if not mgmt:
        raise ConfigError("the lab's SSH hosts need a network of kind management")
    net = mgmt[0]
    plan = []
    for h in topology.servers(loaded):
        address = h.node.addresses.get(net.name)
        if address is not None:
            plan.append((h.hostname, address))
    gateway = net.gateway or next(net.cidr.hosts())
    if gateway in {a for _, a in plan}:
        raise ConfigError(f"the gateway {gateway} of {net.name} is also a node's address")
    return plan, net.cidr, gateway


def _start_ssh_hosts(loaded: LoadedSite, lab: Path, state: LabState,
                     rootfs_cache: Path | None, timeout_s: float) -> None:
    plan, network, gateway = ssh_plan(loaded)
    rootfs = rootfs_mod.ensure_rootfs(rootfs_cache)
    info = mirror_mod.build_lab(loaded, lab, rootfs_cache or rootfs_mod.default_cache(), rootfs)
    state.ssh_tag = hashlib.sha1(str(lab).encode()).hexdigest()[:8]  # noqa: S324 - a name

    def started(h: hosts_mod.SshHost) -> None:
        state.ssh_hosts.append(h)
        _checkpoint(state)

    hosts_mod.up(plan, network, gateway, lab / "ssh", rootfs, state.ssh_tag, timeout_s,
                 record=lab / "lab.json", on_start=started)
    # served on the management network's gateway, where the hosts' default route goes
    with socket.socket() as s:
        s.bind((str(gateway), 0))
        port = int(s.getsockname()[1])
    log = lab / "mirror/http.log"
    proc = procs.spawn(mirror_mod.serve_argv(info.root, str(gateway), port), log)
    _record(state, "mirror", proc, log)
    procs.wait_until(lambda: procs.tcp_open(port, str(gateway)), timeout_s, proc,
                     "the lab mirror", f"{gateway}:{port}", f"see {log}")
    state.mirror = {"url": f"http://{gateway}:{port}/", "key_file": str(info.key_file),
                    "real_debs": info.real_debs, "standin_debs": info.standin_debs,
                    "build_s": round(info.build_s, 1)}

    def executor(h: hosts_mod.SshHost) -> None:
        state.execution_hosts.append(h)
        _checkpoint(state)

    execution_mod.start(loaded, lab, state.ssh_tag, rootfs, timeout_s,
                        {h.address for h in state.ssh_hosts}, info.root, state.mirror,
                        rootfs_cache or rootfs_mod.default_cache(), on_start=executor)


def _start_switches(loaded: LoadedSite, lab: Path, state: LabState, pw_file: Path,
                    timeout_s: float) -> None:
    """FRR stand-ins for the managed switches (lab/switch.py), or a note saying why not."""
    why = switch_mod.missing() if switch_mod.plan(loaded) else None
    if why:
        state.notes.append(f"no switch stand-ins: {why}")
        return
    state.switches = switch_mod.up(loaded, lab / "switches", state.ssh_tag, pw_file, timeout_s)


def _start_sushy(loaded: LoadedSite, rdir: Path, state: LabState, password: str,
                 nodes: list[Node], port: int, role: str
                 ) -> tuple[int, subprocess.Popen[bytes]]:
    """One sushy-tools emulator for these nodes; the caller waits for it to listen."""
    (rdir / "tmp").mkdir(parents=True)
    systems = []
    for i, n in enumerate(nodes):
        sys_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS,
                                  f"{n.hostname}.{loaded.site.site.name}.lab"))
        nics = [{"mac": _mac_for(n, i), "ip": str(ip)} for ip in list(n.addresses.values())[:1]]
        systems.append({"uuid": sys_uuid, "name": n.hostname, "power_state": "Off",
                        "external_notifier": False, "nics": nics or [{"mac": _mac_for(n, i)}]})
        state.endpoints[n.hostname] = {"address": LOOPBACK, "scheme": "http",
                                       "system_id": sys_uuid}
    conf = rdir / "emulator.conf"
    emulators.write_sushy_config(rdir, conf, password, systems, LAB_USER)
    proc = emulators.spawn_sushy(rdir, conf, port)
    log = rdir / "emulator.log"
    _record(state, role, proc, log)
    return port, proc


# Public names for the lab's helper modules (unknown.py, shapes.py).
def record(state: LabState, role: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    _record(state, role, proc, log)


def save(lab: Path, state: LabState) -> None:
    _save(lab, state)


def write_overlay(loaded: LoadedSite, state: LabState) -> None:
    _write_overlay(loaded, state, lab_dir(loaded) / "bmc-password")


def _write_overlay(loaded: LoadedSite, state: LabState, pw_file: Path) -> None:
    overlay_path = overlay_mod.path_of(loaded.base_dir)
    bmc = {}
    for host, ep in state.endpoints.items():
        entry = {k: v for k, v in ep.items() if k in ("address", "port", "scheme", "system_id",
                                                      "cipher_suite")}
        entry["credentials"] = LAB_CREDENTIALS
        bmc[host] = entry
    doc: dict[str, Any] = {
        "credentials": {LAB_CREDENTIALS: {"username": LAB_USER,
                                          "password": {"file": str(pw_file.resolve())}}},
        "bmc": bmc}
    if state.switches:
        extra = switch_mod.overlay(state.switches, pw_file)
        doc["credentials"].update(extra["credentials"])
        doc["switches"] = extra["switches"]
    if state.ssh_hosts:
        doc["ssh"] = {"user": "root",
                      "private_key_file": str(lab_dir(loaded) / "ssh" / "id_ed25519")}
    if state.mirror:
        doc["software"] = {"mirror": state.mirror["url"],
                           "mirror_key": state.mirror["key_file"],
                           "mirror_suites": list(mirror_mod.SUITES)}
    doc |= execution_mod.overlay(lab_dir(loaded), state.execution_hosts)
    overlay_path.parent.mkdir(parents=True, exist_ok=True)
    overlay_path.write_text(overlay_mod.HEADER + yaml.safe_dump(doc, sort_keys=True))


def _stop(state: LabState, grace_s: float = 5.0) -> list[LabProcess]:
    """Stop exactly the recorded processes (same PID and start time), TERM then KILL;
    tear down the SSH hosts' namespaces."""
    if state.ssh_hosts or state.execution_hosts:
        hosts_mod.down(state.execution_hosts + state.ssh_hosts, state.ssh_tag)
    switch_mod.down(state.switches)
    alive = [p for p in state.processes if p.alive()]
    for p in alive:
        pids.send(p.pid, signal.SIGTERM, ticks=p.start_ticks)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.alive() for p in alive):
        time.sleep(0.05)
    for p in alive:
        pids.send(p.pid, signal.SIGKILL, ticks=p.start_ticks)
    for p in alive:  # reap our own children when this process started them
        with contextlib.suppress(ChildProcessError):
            os.waitpid(p.pid, os.WNOHANG)
    return alive


def down(loaded: LoadedSite) -> list[LabProcess]:
    """Stop the lab's processes and remove its state and overlay."""
    state = status(loaded)
    stopped = _stop(state) if state else []
    overlay_mod.path_of(loaded.base_dir).unlink(missing_ok=True)
    shutil.rmtree(lab_dir(loaded), ignore_errors=True)
    return stopped


def kill_one(loaded: LoadedSite, role: str) -> LabProcess:
    """Kill one lab process by role (fault tests: a BMC dying mid-operation)."""
    state = status(loaded)
    for p in state.processes if state else []:
        if p.role == role and pids.send(p.pid, signal.SIGKILL, ticks=p.start_ticks):
            return p
    raise ConfigError(f"lab: no running process {role}")
