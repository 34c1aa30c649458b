"""`fabric check --live`, the pure part: what a host reports (`mlnx_qos -i <dev>`) and what a
switch shows (its running config, parsed by its renderer) compared link by link.

Gathering over SSH is at the edge (switches/live.py). An end that cannot be read, or that
cannot carry the RoCE settings (the lab's IOS-style stand-in, a host without mlnx_qos), is
reported as not verifiable, never as agreeing.

mlnx_qos output format: NVIDIA MLNX_OFED/DOCA "mlnx_qos" examples (Priority trust state,
dscp2prio mapping `prio:N dscp:..`, PFC configuration `enabled` row), and NVIDIA's
"Lossless RoCE Configuration for Linux Drivers in DSCP-Based QoS Mode" (enterprise-support
knowledge base): `mlnx_qos -i <if> --trust dscp --pfc 0,0,0,1,0,0,0,0`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from provisioner.fabric.base import Mismatch, SwitchQos, compare
from provisioner.roce import RocePolicy


@dataclass(frozen=True, slots=True)
class HostQos:
    """What one host NIC reports."""

    trust_dscp: bool
    dscp_to_priority: dict[int, int]
    pfc_priorities: frozenset[int]


@dataclass(frozen=True, slots=True)
class Unverifiable:
    end: str  # "host" or "switch"
    name: str  # host NIC ("dgx01 roce") or switch
    why: str


_TRUST = re.compile(r"Priority trust state:\s*(\w+)", re.IGNORECASE)
_PRIO = re.compile(r"prio:\s*(\d)\s+dscp:\s*([\d,\s]+)")
_PFC = re.compile(r"^\s*enabled\s+([01](?:\s+[01]){7})\s*$", re.MULTILINE)


def parse_mlnx_qos(text: str) -> HostQos:
    """Parse `mlnx_qos -i <dev>`; raise ValueError if it is not that output."""
    trust = _TRUST.search(text)
    pfc = _PFC.search(text)
    if trust is None or pfc is None:
        raise ValueError("not mlnx_qos output (no 'Priority trust state' or PFC 'enabled' row)")
    mapping: dict[int, int] = {}
    for prio, dscps in _PRIO.findall(text):
        for d in re.split(r"[,\s]+", dscps.strip()):
            if d:
                mapping[int(d)] = int(prio)
    enabled = frozenset(i for i, bit in enumerate(pfc.group(1).split()) if bit == "1")
    return HostQos(trust.group(1).lower() == "dscp", mapping, enabled)


def compare_live(policy: RocePolicy, host: str, nic: str, host_mtu_bytes: int,
                 seen: HostQos, switch: str, port: str, qos: SwitchQos) -> list[Mismatch]:
    """Both ends as they are: the host's reported values stand in for the policy in the
    static comparison (base.compare), so each mismatch names both ends and both values."""
    as_host = replace(
        policy, pfc_priorities=tuple(sorted(seen.pfc_priorities)),
        roce_priority=seen.dscp_to_priority.get(policy.roce_dscp, 0),
        cnp_priority=seen.dscp_to_priority.get(policy.cnp_dscp, 0))
    found = compare(host, nic, as_host, host_mtu_bytes, switch, port, qos)
    if not seen.trust_dscp:
        found.append(Mismatch(host, nic, switch, port, "trust", "host trusts pcp, not DSCP",
                              "DSCP trusted" if qos.trust_dscp else "DSCP not trusted"))
    return found
