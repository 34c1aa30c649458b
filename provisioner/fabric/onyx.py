"""NVIDIA Onyx CLI: `roce lossless` (NVIDIA's default classes) plus per-port MTU and trust."""

from __future__ import annotations

import re
from dataclasses import dataclass

from provisioner.fabric.base import (
    SwitchQos,
    SwitchSpec,
    can_express,
    require_expressible,
    template,
)
from provisioner.roce import RocePolicy

# What `roce lossless` programs (Onyx 3.10.4100 "RoCE Commands", show roce example).
ROCE_DEFAULT_MAP = {26: 3, 48: 6}
_MTU = re.compile(r"^interface ethernet (\S+) mtu (\d+)")
_TRUST = re.compile(r"^interface ethernet \S+ qos trust L3$")
_VLAN = re.compile(r"^interface ethernet (\S+) switchport (access vlan|trunk allowed-vlan) (\d+)$")


@dataclass(frozen=True)
class _Port:
    name: str
    cli: str
    description: str
    mtu_bytes: int
    vlan: int | None = None
    tagged: bool = False


_PORTS = re.compile(r"^(\s*interface ethernet )([0-9/,-]+)( .*)$")


def _ports(item: str) -> list[str] | None:
    """`1/1` -> [1/1]; `1/1-1/3` -> [1/1, 1/2, 1/3] (`1/1/1-1/1/2` for split ports)."""
    first, dash, last = item.partition("-")
    if not dash:
        return [first]
    a, b = first.split("/"), last.split("/")
    if (len(a) != len(b) or a[:-1] != b[:-1] or not (a[-1].isdigit() and b[-1].isdigit())
            or int(a[-1]) > int(b[-1])):
        return None  # not a range Onyx prints: the line is kept as it is
    return ["/".join([*a[:-1], str(n)]) for n in range(int(a[-1]), int(b[-1]) + 1)]


def expand_ranges(text: str) -> str:
    """Onyx prints ports that share a setting as one line with a port range or list
    (`interface ethernet 1/1-1/9 speed 40G force`, as in a running config of Onyx 3.9):
    one line per port, as rendered, so the diff and the read-back compare like with like."""
    out = []
    for line in text.splitlines():
        m = _PORTS.match(line)
        found = [_ports(i) for i in m.group(2).split(",")] if m else []
        if not m or any(p is None for p in found):
            out.append(line)
            continue
        out.extend(f"{m.group(1)}{port}{m.group(3)}" for ports in found for port in ports or ())
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def cli_port(name: str) -> str:
    """Inventory `Eth1/1` or `Eth1/1/2` -> CLI `1/1` or `1/1/2`."""
    return name.removeprefix("Eth")


class OnyxRenderer:
    nos = "onyx"
    file_name = "onyx.cfg"

    def can_express(self, policy: RocePolicy) -> bool:
        return can_express(self.nos, policy)

    def render(self, spec: SwitchSpec) -> str:
        require_expressible(spec)
        ports = [_Port(p.name, cli_port(p.name), p.description.replace('"', "'"), p.mtu_bytes,
                       p.vlan, p.tagged) for p in spec.ports]
        return template("onyx", "onyx.cfg.j2").render(spec=spec, ports=ports)

    def parse(self, text: str) -> SwitchQos:
        lines = [ln.strip() for ln in expand_ranges(text).splitlines()]
        mode = next((ln.split()[1] for ln in lines if ln.startswith("roce ")), None)
        mtus = {f"Eth{m.group(1)}": int(m.group(2)) for ln in lines if (m := _MTU.match(ln))}
        trust = any(_TRUST.match(ln) for ln in lines)
        vlans = {f"Eth{m.group(1)}": (int(m.group(3)), m.group(2) != "access vlan")
                 for ln in lines if (m := _VLAN.match(ln))}
        return SwitchQos(frozenset({3} if mode == "lossless" else set()),
                         dict(ROCE_DEFAULT_MAP) if mode else {}, mtus, trust, port_vlans=vlans)
