"""Execution nodes in the lab: SSH hosts (lab/hosts.py) on the management bridge that run
`ansible-runner worker` for the controller.

ansible-core and ansible-runner come from the lab's package sources, as on an air-gapped
site: the controller's exact versions as a Python wheelhouse (lab/wheelhouse.py) served by
the lab mirror's HTTP server, installed with pip into a virtual environment on each node
(`/opt/provisioner/venv`, over SSH, all nodes at once); the overlay points `ansible_runner`
at that environment's `bin/ansible-runner`, and `provision doctor` checks what is there.

The node also gets a copy of the lab's SSH key at the path the rendered inventory names,
as a real execution node holds its own key for the managed hosts.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from provisioner.errors import ConfigError
from provisioner.fanout import fan_out
from provisioner.inventory.execution_models import Execution, ExecutionNode
from provisioner.inventory.loader import LoadedSite
from provisioner.lab import hosts as hosts_mod
from provisioner.lab import hostwatch, wheelhouse

# Namespace numbers of execution nodes (pv-<tag><n>, the SSH hosts' pattern, so `lab prune`
# recognises their leftovers: lab/orphans.py), far above any server's index.
EXEC_INDEX = 9000
KNOWN_HOSTS = "execution_known_hosts"  # in the lab's directory: the nodes' host keys


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
          taken: set[str], mirror_root: Path, mirror: dict[str, Any], cache: Path,
          on_start: Callable[[hosts_mod.SshHost], None] | None = None
          ) -> list[hosts_mod.SshHost]:
    """Start the inventory's execution nodes as lab hosts on the SSH hosts' bridge (the
    servers' hosts must be up: they made the bridge and the key) and install ansible-core
    and ansible-runner in them from the lab mirror (served from `mirror_root` at
    mirror["url"]; mirror["wheelhouse"] records the wheelhouse, for a rebuilt mirror).
    Each node goes to `on_start` as soon as it runs (the lab records it at once)."""
    from provisioner.lab import ssh_plan  # the management network, as the hosts use it

    plan = planned(loaded)
    if not plan:
        return []
    _, network, gateway = ssh_plan(loaded)
    for name, address in plan:
        if address not in network or address == gateway or str(address) in taken:
            raise ConfigError(f"lab: execution node {name}'s address {address} must be a free "
                              f"address of the management network {network}")
    house = wheelhouse.ensure(rootfs, cache)  # before any host: a failed download starts none
    wheelhouse.publish(house.root, mirror_root)
    mirror["wheelhouse"] = str(house.root)
    workdir = lab / "ssh"
    key = workdir / "id_ed25519"
    started: list[hosts_mod.SshHost] = []
    booting: list[hostwatch.Booting] = []
    try:
        for i, (name, address) in enumerate(plan):
            # its own copy of the lab's key, in place before its init runs
            h, b = hosts_mod.start_host(name, address, network, gateway, workdir, rootfs,
                                        hosts_mod.bridge_name(tag),
                                        f"{tag[:6]}{EXEC_INDEX + i}", key,
                                        files={str(key.resolve()): key.read_bytes()},
                                        record=lab / "lab.json")
            started.append(h)
            booting.append(b)
            if on_start is not None:
                on_start(h)
        hostwatch.wait_ssh(booting, timeout_s)
        _known_hosts(lab, started)
        t0 = time.monotonic()
        install(lab, started, house, mirror["url"])
        mirror["wheels_install_s"] = round(time.monotonic() - t0, 1)
    except BaseException:
        hosts_mod.down(started, "")
        raise
    return started


def _reach(lab: Path, h: hosts_mod.SshHost) -> ExecutionNode:
    """How the controller reaches a lab execution node (the overlay says the same)."""
    return ExecutionNode(name=h.name, address=h.address,
                         private_key_file=str((lab / "ssh" / "id_ed25519").resolve()),
                         known_hosts_file=str((lab / KNOWN_HOSTS).resolve()),
                         ansible_runner=wheelhouse.VENV + "/bin/ansible-runner")


def install(lab: Path, started: list[hosts_mod.SshHost], house: wheelhouse.Wheelhouse,
            mirror_url: str, timeout_s: float = 600.0) -> None:
    """pip-install the wheelhouse's pins on every node at once, over SSH, from the mirror."""
    from provisioner.execution.stream import ssh_argv  # imports ansible_runner: not at start

    script = wheelhouse.install_script(house, mirror_url)
    hosts = {h.name: h for h in started}

    def one(name: str) -> None:
        argv = ssh_argv(_reach(lab, hosts[name]), Execution(), "sh -s")
        proc = subprocess.run(argv, input=script, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if proc.returncode != 0:
            raise ConfigError(f"lab: installing {' '.join(sorted(house.pins))} on execution "
                              f"node {name} from {mirror_url} failed (exit "
                              f"{proc.returncode}): "
                              + " ".join((proc.stderr or proc.stdout).split())[-400:])

    for d in fan_out(list(hosts), one, concurrency=len(hosts)):
        if d.error is not None:
            raise d.error


def _known_hosts(lab: Path, started: list[hosts_mod.SshHost]) -> Path:
    """The nodes' host keys, as ssh's known_hosts."""
    known = lab / KNOWN_HOSTS
    lines = []
    for h in started:
        pub = (Path(h.upper) / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{h.address} {pub[0]} {pub[1]}\n")
    known.write_text("".join(lines))
    return known


def overlay(lab: Path, started: list[hosts_mod.SshHost]) -> dict[str, Any]:
    """The overlay's `execution` part: how the controller reaches each node."""
    if not started:
        return {}
    _known_hosts(lab, started)
    return {"execution": {h.name: _reach(lab, h).model_dump(
        include={"user", "private_key_file", "known_hosts_file", "ansible_runner"})
        for h in started}}


def kill(started: list[hosts_mod.SshHost], name: str) -> list[int]:
    """Kill an execution node by PID: its sshd and every process in its namespace (the
    worker, ansible-playbook, its SSH connections). Fault tests and benches."""
    for h in started:
        if h.name == name:
            return hosts_mod.kill(h)
    raise ConfigError(f"lab: no execution node {name}")
