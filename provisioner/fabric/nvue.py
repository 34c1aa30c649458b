"""Cumulus Linux NVUE: a YAML list for `nv config patch` (set qos roce, interfaces, MTU, and
the breakout of each port whose sub-ports are cabled)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from provisioner.errors import RenderError
from provisioner.fabric.base import (
    PortSpec,
    SwitchQos,
    SwitchSpec,
    can_express,
    require_expressible,
    template,
)
from provisioner.inventory.cabling import parse_port
from provisioner.roce import RocePolicy

# What `nv set qos roce` programs (Cumulus 5.14 RoCE page, default RoCE configuration table).
ROCE_DEFAULT_MAP = {26: 3, 48: 6}
ROCE_DEFAULT_PFC = 3
# `nv set interface <swp> link breakout <mode-id>`: 1x (not split, the default), 2x, 4x, 8x
# (NVIDIA Cumulus Linux 5.14 "Switch Port Attributes", Breakout Ports,
# https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-514/Layer-1-and-Switch-Ports/Interface-Configuration-and-Management/Switch-Port-Attributes/).
BREAKOUT_WAYS = (2, 4, 8)


@dataclass(frozen=True, slots=True)
class _Port:
    port: PortSpec
    breakout: tuple[str, str] | None  # (parent, mode), written before its first sub-port


def _breakouts(spec: SwitchSpec) -> list[_Port]:
    """The ports in order, each parent port's breakout before its first cabled sub-port
    (swp1 `2x` before swp1s0). A sub-port whose split is not known (PortSpec.breakout None:
    its block lists no `breakout`) gets none: the switch must have it set already."""
    whole: set[str] = set()
    split: set[str] = set()
    modes: dict[str, str] = {}
    out: list[_Port] = []
    for p in spec.ports:
        name = parse_port("cumulus", p.name)
        if name is not None:
            (whole if name.sub is None else split).add(f"swp{name.number}")
        if name is None or name.sub is None or p.breakout is None:
            out.append(_Port(p, None))
            continue
        if p.breakout not in BREAKOUT_WAYS or name.sub >= p.breakout:
            raise RenderError(
                f"{spec.hostname}: {p.name} is not a sub-port of a {p.breakout}-way breakout",
                hint="NVUE breaks a port out 2x, 4x or 8x (sub-ports from s0); check the "
                     "switch block's breakout in the catalog")
        parent, mode = f"swp{name.number}", f"{p.breakout}x"
        if parent not in modes:
            modes[parent] = mode
            out.append(_Port(p, (parent, mode)))
            continue
        if modes[parent] != mode:
            raise RenderError(f"{spec.hostname}: {parent} is broken out both "
                              f"{modes[parent]} and {mode}")
        out.append(_Port(p, None))
    both = sorted(whole & split, key=lambda n: int(n[3:]))
    if both:
        raise RenderError(f"{spec.hostname}: {both[0]} is cabled both whole and broken out "
                          f"({both[0]} and its sub-ports)",
                          hint="cable the port whole or use its sub-ports, not both")
    return out


class NvueRenderer:
    nos = "cumulus"
    file_name = "nvue.yaml"

    def can_express(self, policy: RocePolicy) -> bool:
        return can_express(self.nos, policy)

    def render(self, spec: SwitchSpec) -> str:
        require_expressible(spec)
        return template("cumulus", "nvue.yaml.j2").render(spec=spec, ports=_breakouts(spec))

    def parse(self, text: str) -> SwitchQos:
        doc = yaml.safe_load(text) or []
        conf: dict[str, Any] = {}
        for item in doc:
            conf.update(item.get("set", {}))
        qos = conf.get("qos", {})
        roce = qos.get("roce", {})
        on = roce.get("enable") in (True, "on")
        mapping: dict[int, int] = dict(ROCE_DEFAULT_MAP) if on else {}
        pfc = {ROCE_DEFAULT_PFC} if on and roce.get("mode") == "lossless" else set()
        interfaces = conf.get("interface") or {}
        mtus = {name: int(i["link"]["mtu"]) for name, i in interfaces.items()
                if "mtu" in i.get("link", {})}
        return SwitchQos(frozenset(pfc), mapping, mtus, trust_dscp=on,
                         port_vlans=_vlans(interfaces))


def _vlans(interfaces: dict[str, Any]) -> dict[str, tuple[int, bool]]:
    """Each port's VLAN on the default bridge: `access N` untagged, else its one `vlan`."""
    out: dict[str, tuple[int, bool]] = {}
    for name, i in interfaces.items():
        domain = (((i or {}).get("bridge") or {}).get("domain") or {}).get("br_default") or {}
        access, tagged = domain.get("access"), [str(v) for v in domain.get("vlan") or {}]
        if access is not None and str(access).isdigit():
            out[name] = (int(access), False)
        elif len(tagged) == 1 and tagged[0].isdigit():  # a range or list is not one VLAN
            out[name] = (int(tagged[0]), True)
    return out
