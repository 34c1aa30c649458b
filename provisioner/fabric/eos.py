"""Arista EOS CLI: DSCP -> traffic-class map, per-port trust, PFC no-drop, the queue
scheduling (the RoCE and default queues round-robin with their shares, CNP's strict above
them) and ECN, on the switch's queue form (tx-queue or uc-tx-queue: SwitchAccess.eos_queue)."""

from __future__ import annotations

import re
from dataclasses import replace

from provisioner.fabric.base import (
    SwitchQos,
    SwitchSpec,
    can_express,
    require_expressible,
    template,
)
from provisioner.roce import RocePolicy

EOS_MAX_MTU_BYTES = 9214  # EOS interface `mtu` accepts 68-9214
_MAP = re.compile(r"^qos map dscp (\d+) to traffic-class (\d+)$")
_PFC = re.compile(r"^priority-flow-control priority (\d+) no-drop$")
_VLAN = re.compile(r"^switchport (access|trunk allowed) vlan (\d+)$")


class EosRenderer:
    nos = "eos"
    file_name = "eos.cfg"

    def can_express(self, policy: RocePolicy) -> bool:
        return can_express(self.nos, policy)

    def render(self, spec: SwitchSpec) -> str:
        require_expressible(spec)
        ports = tuple(replace(p, mtu_bytes=min(p.mtu_bytes, EOS_MAX_MTU_BYTES))
                      for p in spec.ports)
        return template("eos", "eos.cfg.j2").render(spec=replace(spec, ports=ports),
                                                     spec_max_mtu=EOS_MAX_MTU_BYTES)

    def parse(self, text: str) -> SwitchQos:
        mapping: dict[int, int] = {}
        pfc: set[int] = set()
        mtus: dict[str, int] = {}
        vlans: dict[str, tuple[int, bool]] = {}
        trust = True
        port = None
        for raw in text.splitlines():
            ln = raw.strip()
            if m := _MAP.match(ln):
                mapping[int(m.group(1))] = int(m.group(2))
            elif ln.startswith("interface "):
                port = ln.split()[1]
                port = None if port.startswith("Vlan") else port  # an SVI: no port MTU
            elif port and ln.startswith("mtu "):
                mtus[port] = int(ln.split()[1])
            elif port and (m := _VLAN.match(ln)):
                vlans[port] = (int(m.group(2)), m.group(1) == "trunk allowed")
            elif port and ln == "no qos trust":
                trust = False
            elif m := _PFC.match(ln):
                pfc.add(int(m.group(1)))
        return SwitchQos(frozenset(pfc), mapping, mtus, trust, port_vlans=vlans)
