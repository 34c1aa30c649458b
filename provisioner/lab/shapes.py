"""Starting the lab's Redfish shape layer (redfish_shape.py) in front of sushy-tools: which
shape each lab system reports, and the one process that serves them all."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.errors import ConfigError
from provisioner.inventory import topology
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import Node
from provisioner.lab import procs, redfish_shape

if TYPE_CHECKING:
    import subprocess

    from provisioner.lab import LabState


def mgmt_mac(node: Node, fallback: str) -> str:
    """The MAC the node's management NIC reports: the declared one, else a lab one."""
    mac = node.macs.get("mgmt") or next(iter(sorted(node.macs.values())), None)
    return mac or fallback


def data_macs(node: Node, mgmt: str) -> list[str]:
    """The MACs the inventory declares for the node's other ports (bond members too)."""
    macs = [m for _, m in sorted(node.macs.items()) if m != mgmt]
    return macs + [m for _, nic in sorted(node.interfaces.items()) if nic.bond
                   for m in nic.bond.members]


def site_shapes(loaded: LoadedSite, state: LabState) -> dict[str, Any]:
    """system id -> shape, for every Redfish node the lab started."""
    out: dict[str, Any] = {}
    for i, plan in enumerate(topology.host_plans(loaded)):
        ep = state.endpoints.get(plan.hostname)
        if ep is None or "system_id" not in ep:
            continue
        fallback = f"52:54:00:fe:{(i >> 8) & 255:02x}:{i & 255:02x}"
        mgmt = mgmt_mac(plan.node, fallback)
        out[ep["system_id"]] = redfish_shape.shape(
            plan.block, f"{loaded.site.site.name}/{plan.hostname}", mgmt,
            data_macs(plan.node, mgmt))
    return out


def start(lab: Path, state: LabState, listen: list[list[int]], systems: dict[str, Any],
          timeout_s: float,
          record: Callable[[LabState, str, subprocess.Popen[bytes], Path], None],
          name: str = "shape") -> None:
    """One shape-layer process with a listener per [port, sushy port]; waits for it."""
    cfg = lab / f"{name}.json"
    cfg.write_text(json.dumps({"listen": listen, "systems": systems}))
    log = lab / f"{name}.log"
    proc = procs.spawn([sys.executable, "-m", "provisioner.lab.redfish_shape", str(cfg)], log)
    record(state, name, proc, log)
    for port, _ in listen:
        procs.wait_tcp(port, timeout_s, proc, "Redfish shape layer")
    deadline = time.monotonic() + timeout_s
    while "shape ready" not in log.read_text() and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError("lab: the Redfish shape layer exited at start", hint=f"see {log}")
        time.sleep(0.05)
