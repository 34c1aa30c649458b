"""What every switch OS renderer gets and gives back, and the host-vs-switch comparison.

A renderer turns a SwitchSpec (neutral: ports, MTU, RocePolicy) into its OS's text and parses
that text back into SwitchQos, so `fabric check` compares what would really be pushed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import jinja2

from provisioner import resources
from provisioner.errors import RenderError
from provisioner.inventory.fabric_checks import cannot_express
from provisioner.roce import RocePolicy


@dataclass(frozen=True, slots=True)
class PortSpec:
    name: str  # as written in the inventory (swp1s0, Eth1/1, Ethernet8)
    description: str
    mtu_bytes: int
    # A breakout sub-port (swp1s0): the ways its parent port is split, from the switch
    # block's catalog `breakout` (fabric.switch_specs); None for a whole port, or unknown.
    breakout: int | None = None
    # The VLAN of the host's network on this port: untagged (an access port) unless the
    # network is tagged at the hosts (host_tagged: a trunk carrying it); None for none.
    vlan: int | None = None
    tagged: bool = False


@dataclass(frozen=True, slots=True)
class Svi:
    """A network's gateway on the switch its hosts are cabled to (switch_gateway)."""

    network: str
    vlan: int
    address: str  # the gateway with the network's prefix length, as 10.250.2.1/24
    mtu_bytes: int


@dataclass(frozen=True, slots=True)
class SwitchSpec:
    hostname: str
    nos: str
    policy: RocePolicy
    ports: tuple[PortSpec, ...]
    queue: str = "tx-queue"  # EOS: the egress queue command (SwitchAccess.eos_queue)
    svis: tuple[Svi, ...] = ()

    @property
    def vlans(self) -> tuple[int, ...]:
        """Every VLAN the switch's ports or SVIs carry, in order."""
        return tuple(sorted({p.vlan for p in self.ports if p.vlan is not None}
                            | {s.vlan for s in self.svis}))


@dataclass(frozen=True, slots=True)
class SwitchQos:
    """The QoS a rendered switch config sets, as read back from the text."""

    lossless_priorities: frozenset[int]
    dscp_to_priority: dict[int, int]
    port_mtu_bytes: dict[str, int] = field(default_factory=dict)
    trust_dscp: bool = True
    # port -> (VLAN, tagged) as the text sets it; None where the dialect's text is not read
    # for VLANs (the IOS-style one renders none)
    port_vlans: dict[str, tuple[int, bool]] | None = None


class SwitchRenderer(Protocol):
    nos: str
    file_name: str  # rendered file name, e.g. nvue.yaml

    def can_express(self, policy: RocePolicy) -> bool: ...

    def render(self, spec: SwitchSpec) -> str: ...

    def parse(self, text: str) -> SwitchQos: ...


def template(nos: str, name: str) -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resources.templates_dir("switch", nos)),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True, autoescape=False)  # noqa: S701 - not HTML
    return env.get_template(name)


def classes(policy: RocePolicy) -> tuple[int, int, int, int]:
    """RoCE DSCP and priority, CNP DSCP and priority: what a renderer may not be able to set."""
    return policy.roce_dscp, policy.roce_priority, policy.cnp_dscp, policy.cnp_priority


def can_express(nos: str, policy: RocePolicy) -> bool:
    """Whether the renderer of switch OS `nos` sets this policy's classes: the same table
    `validate` refuses a site by (inventory/fabric_checks.py)."""
    return cannot_express(nos, classes(policy)) is None


def require_expressible(spec: SwitchSpec) -> None:
    """NVUE's `qos roce` and Onyx's `roce lossless` program NVIDIA's classes whatever else is
    set, so a custom class (say CNP on 3) would conflict: refuse rather than render a
    broken pair. `validate` refuses such a site first, by the same table."""
    why = cannot_express(spec.nos, classes(spec.policy))
    if why is not None:
        raise RenderError(f"{spec.hostname}: {why}",
                          hint=f"use the default software.roce values for {spec.nos} switches")


@dataclass(frozen=True, slots=True)
class Mismatch:
    host: str
    nic: str
    switch: str
    port: str
    what: str  # pfc, dscp-map, cnp, mtu, trust, gid, vlan
    host_value: str
    switch_value: str

    def format(self) -> str:
        return (f"{self.host} {self.nic} <-> {self.switch} {self.port}: {self.what}: "
                f"host {self.host_value}, switch {self.switch_value}")


def compare(host: str, nic: str, host_policy: RocePolicy, host_mtu_bytes: int,
            switch: str, port: str, qos: SwitchQos) -> list[Mismatch]:
    """Every way one host port and its switch port disagree on the RoCE contract."""
    out: list[Mismatch] = []

    def bad(what: str, hv: object, sv: object) -> None:
        out.append(Mismatch(host, nic, switch, port, what, str(hv), str(sv)))

    def prios(values: frozenset[int] | tuple[int, ...]) -> str:
        return ",".join(map(str, sorted(values))) or "none"

    host_pfc = set(host_policy.pfc_priorities)
    # A switch may have more lossless priorities than the host uses (SONiC's 3,4), never fewer.
    if not host_pfc <= qos.lossless_priorities:
        bad("pfc", prios(host_policy.pfc_priorities), prios(qos.lossless_priorities))
    got = qos.dscp_to_priority.get(host_policy.roce_dscp, 0)
    if got != host_policy.roce_priority:
        bad("dscp-map", f"DSCP {host_policy.roce_dscp} -> priority {host_policy.roce_priority}",
            f"DSCP {host_policy.roce_dscp} -> priority {got}")
    cnp = qos.dscp_to_priority.get(host_policy.cnp_dscp, 0)
    if cnp != host_policy.cnp_priority:
        bad("cnp", f"DSCP {host_policy.cnp_dscp} -> priority {host_policy.cnp_priority}",
            f"DSCP {host_policy.cnp_dscp} -> priority {cnp}")
    elif cnp in qos.lossless_priorities:
        bad("cnp", f"CNP priority {cnp} lossy", f"CNP priority {cnp} lossless (PFC on)")
    if not qos.trust_dscp:
        bad("trust", "DSCP marked", "switch does not trust DSCP")
    mtu = qos.port_mtu_bytes.get(port)
    if mtu is None:
        bad("mtu", host_mtu_bytes, "port not configured")
    elif mtu < host_mtu_bytes:
        bad("mtu", host_mtu_bytes, mtu)
    return out


def vlan_text(vlan: tuple[int, bool] | None) -> str:
    return "no VLAN" if vlan is None else f"VLAN {vlan[0]} {'tagged' if vlan[1] else 'untagged'}"


def vlan_mismatches(host: str, nic: str, expected: tuple[int, bool] | None, switch: str,
                    port: str, qos: SwitchQos) -> list[Mismatch]:
    """The switch port's VLAN against the one the link's network has (VLAN, tagged at the
    hosts); nothing where the network has none (a switch's default VLAN is not printed) or
    the dialect's text is not read for VLANs."""
    if expected is None or qos.port_vlans is None:
        return []
    got = qos.port_vlans.get(port)
    if got == expected:
        return []
    return [Mismatch(host, nic, switch, port, "vlan", vlan_text(expected), vlan_text(got))]
