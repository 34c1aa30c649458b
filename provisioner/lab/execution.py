"""Execution nodes in the lab: SSH hosts (lab/hosts.py) on the management bridge that run
`ansible-runner worker` for the controller.

How ansible-core and ansible-runner get there, honestly: the lab hosts share this
machine's filesystem, so the controller's own Python (sys.base_prefix) and virtual
environment (sys.prefix) are bind-mounted read-only at the same paths inside the node's
chroot; the overlay points `ansible_runner` at that environment's `bin/ansible-runner`.
The versions therefore always match the controller's; `provision doctor` still checks
them as it would on a real node, where they are installed with pip (README).

The node also gets a copy of the lab's SSH key at the path the rendered inventory names,
as a real execution node holds its own key for the managed hosts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from provisioner.errors import ConfigError
from provisioner.inventory.loader import LoadedSite
from provisioner.lab import hosts as hosts_mod

# Namespace numbers of execution nodes (pv-<tag><n>, the SSH hosts' pattern, so `lab prune`
# recognises their leftovers: lab/orphans.py), far above any server's index.
EXEC_INDEX = 9000


def planned(loaded: LoadedSite) -> list[tuple[str, IPv4Address]]:
    """(name, address) of every execution node the inventory names."""
    out = []
    for node in loaded.site.provisioning.execution.nodes:
        try:
            out.append((node.name, IPv4Address(node.address)))
        except ValueError:
            raise ConfigError(f"lab: execution node {node.name} needs an IPv4 address on the "
                              f"management network, not {node.address!r}") from None
    return out


def start(loaded: LoadedSite, lab: Path, tag: str, rootfs: Path, timeout_s: float,
          taken: set[str]) -> list[hosts_mod.SshHost]:
    """Start the inventory's execution nodes as lab hosts on the SSH hosts' bridge (the
    servers' hosts must be up: they made the bridge and the key)."""
    from provisioner.lab import ssh_plan  # the management network, as the hosts use it

    plan = planned(loaded)
    if not plan:
        return []
    _, network, gateway = ssh_plan(loaded)
    for name, address in plan:
        if address not in network or address == gateway or str(address) in taken:
            raise ConfigError(f"lab: execution node {name}'s address {address} must be a free "
                              f"address of the management network {network}")
    workdir = lab / "ssh"
    key = workdir / "id_ed25519"
    binds = sorted({sys.base_prefix, sys.prefix})
    started: list[hosts_mod.SshHost] = []
    try:
        for i, (name, address) in enumerate(plan):
            # its own copy of the lab's key, in place before its init runs
            h = hosts_mod._start_host(name, address, network, gateway, workdir, rootfs,
                                      hosts_mod.bridge_name(tag), f"{tag[:6]}{EXEC_INDEX + i}", key,
                                      ro_binds=binds,
                                      files={str(key.resolve()): key.read_bytes()})
            started.append(h)
        for h in started:
            hosts_mod._wait_ssh(h, timeout_s)
    except BaseException:
        hosts_mod.down(started, "")
        raise
    return started


def overlay(lab: Path, started: list[hosts_mod.SshHost]) -> dict[str, Any]:
    """The overlay's `execution` part: how the controller reaches each node."""
    if not started:
        return {}
    known = lab / "execution_known_hosts"
    lines = []
    for h in started:
        pub = (Path(h.upper) / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{h.address} {pub[0]} {pub[1]}\n")
    known.write_text("".join(lines))
    key = str((lab / "ssh" / "id_ed25519").resolve())
    runner = str(Path(sys.prefix) / "bin" / "ansible-runner")
    return {"execution": {h.name: {"user": "root", "private_key_file": key,
                                   "known_hosts_file": str(known.resolve()),
                                   "ansible_runner": runner} for h in started}}


def kill(started: list[hosts_mod.SshHost], name: str) -> list[int]:
    """Kill an execution node by PID: its sshd and every process in its namespace (the
    worker, ansible-playbook, its SSH connections). Fault tests and benches."""
    for h in started:
        if h.name != name:
            continue
        pids = {h.pid} if hosts_mod.start_ticks(h.pid) == h.start_ticks else set()
        listed = hosts_mod._run(["ip", "netns", "pids", h.netns], check=False).stdout.split()
        pids |= {int(p) for p in listed if p.isdigit()}
        for pid in sorted(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return sorted(pids)
    raise ConfigError(f"lab: no execution node {name}")
