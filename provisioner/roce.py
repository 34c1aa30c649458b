"""The RoCE QoS contract as pure functions: one RocePolicy that host vars and switch renderers
both read, so the two ends of a link cannot disagree by construction.

Sources:
- NVIDIA Cumulus Linux 5.x "RDMA over Converged Ethernet - RoCE" (docs.nvidia.com/
  networking-ethernet-software/cumulus-linux-514/.../RDMA-over-Converged-Ethernet-RoCE):
  `nv set qos roce` = mode lossless; trust dscp; SP3->TC3 (RoCE), SP6->TC6 (CNP), others->TC0;
  ETS TC6 strict, TC3 WRR 50 %, TC0 WRR 50 %; ECN on TC3 absolute 150 KB min / 1,500 KB max;
  PFC on SP3 only in lossless mode; LLDP App TLV UDP 4791 priority 3.
- NVIDIA Onyx "RoCE Commands" (docs.nvidia.com/networking/display/Onyxv31040100/RoCE+Commands:
  `roce lossless`, `show roce`): the same figures.
- SONiC community config_db defaults (sonic-net/SONiC doc "Configuration.md", PORT_QOS_MAP):
  pfc_enable "3,4", i.e. two lossless queues; Dell Enterprise SONiC Ansible module
  dellemc.enterprise_sonic.sonic_roce (docs.ansible.com): pfc_priority "3,4".
- Host: `mlnx_qos --trust dscp --pfc 0,0,0,1,0,0,0,0`; RDMA-CM ToS = (DSCP << 2) | ECT(0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from provisioner.inventory.models import Roce

Nos = Literal["cumulus", "onyx", "sonic", "eos", "cisco_ios"]

ECT0 = 2  # ECN-capable transport (0) codepoint, RFC 3168
ROCE_V2_UDP_PORT = 4791  # IANA; the LLDP Application TLV carries it with the RoCE priority
ECN_MIN_BYTES = 150_000  # Cumulus/Onyx lossless default, TC3 (the RoCE pages above)
ECN_MAX_BYTES = 1_500_000
ECN_MARK_PROBABILITY_PCT = 100
ROCE_ETS_WEIGHT_PCT = 50  # TC3 WRR 50 %, TC0 WRR 50 %, CNP strict
DEFAULT_ETS_WEIGHT_PCT = 50
SONIC_LOSSLESS_DEFAULT = (3, 4)  # SONiC buffer templates provision lossless queues 3 and 4
SWITCH_MTU_BYTES = 9216  # Spectrum/EOS maximum L2 frame; hosts at 9000 fit under it


@dataclass(frozen=True, slots=True)
class RocePolicy:
    """Everything both ends must agree on, with units in the names."""

    mode: Literal["lossless", "lossy"]
    roce_dscp: int
    roce_priority: int
    cnp_dscp: int
    cnp_priority: int
    tos: int
    pfc_priorities: tuple[int, ...]
    dscp_to_priority: tuple[tuple[int, int], ...]
    ecn_min_bytes: int = ECN_MIN_BYTES
    ecn_max_bytes: int = ECN_MAX_BYTES
    ecn_probability_pct: int = ECN_MARK_PROBABILITY_PCT
    roce_ets_weight_pct: int = ROCE_ETS_WEIGHT_PCT
    default_ets_weight_pct: int = DEFAULT_ETS_WEIGHT_PCT
    mtu_bytes: int = SWITCH_MTU_BYTES

    @property
    def pfc_vector(self) -> str:
        return ",".join("1" if i in self.pfc_priorities else "0" for i in range(8))

    def dscp_map(self) -> dict[int, int]:
        return dict(self.dscp_to_priority)


def tos(dscp: int) -> int:
    """RDMA-CM ToS byte: DSCP in the upper six bits, ECT(0) in the lower two (26 -> 106)."""
    if not 0 <= dscp <= 63:
        raise ValueError(f"DSCP {dscp} is outside 0-63")
    return (dscp << 2) | ECT0


def pfc_vector(priority: int) -> str:
    """mlnx_qos --pfc argument: 1 for the lossless priority, 0 elsewhere (3 -> 0,0,0,1,...)."""
    if not 0 <= priority <= 7:
        raise ValueError(f"priority {priority} is outside 0-7")
    return ",".join("1" if i == priority else "0" for i in range(8))


def dscp_to_priority(roce: Roce) -> dict[int, int]:
    """DSCP -> switch priority for the two classes RoCE needs; all others go to priority 0."""
    return {roce.dscp: roce.priority, roce.cnp_dscp: roce.cnp_priority}


def lossless_priorities(roce: Roce, nos: Nos | None = None) -> tuple[int, ...]:
    """Priorities with PFC on. Hosts and NVIDIA switches: the RoCE priority only. SONiC keeps
    its two default lossless queues (3, 4) so its buffer templates stay valid; the extra
    lossless priority carries no host traffic, so it is compatible with a host on 3 only."""
    if roce.mode == "lossy":
        return ()
    if nos == "sonic":
        # ...but never the CNP priority: CNPs must not be paused.
        return tuple(sorted({*SONIC_LOSSLESS_DEFAULT, roce.priority} - {roce.cnp_priority}))
    return (roce.priority,)


def policy(roce: Roce, nos: Nos | None = None, *,
           mtu_bytes: int = SWITCH_MTU_BYTES) -> RocePolicy:
    """The policy for one end: `nos=None` is the host side (what roles/roce_host gets)."""
    return RocePolicy(
        mode=roce.mode,
        roce_dscp=roce.dscp,
        roce_priority=roce.priority,
        cnp_dscp=roce.cnp_dscp,
        cnp_priority=roce.cnp_priority,
        tos=tos(roce.dscp),
        pfc_priorities=lossless_priorities(roce, nos),
        dscp_to_priority=tuple(sorted(dscp_to_priority(roce).items())),
        mtu_bytes=mtu_bytes,
    )


def host_vars(p: RocePolicy) -> dict[str, object]:
    """The roce_host role's variables derived from a policy (same names as render uses)."""
    return {
        "roce_host_dscp": p.roce_dscp,
        "roce_host_priority": p.roce_priority,
        "roce_host_cnp_dscp": p.cnp_dscp,
        "roce_host_cnp_priority": p.cnp_priority,
        "roce_host_tos": p.tos,
        "roce_host_pfc": p.pfc_vector,
        "roce_host_mode": p.mode,
    }
