"""NVIDIA Onyx CLI: `roce lossless` (NVIDIA's default classes) plus per-port MTU and trust."""

from __future__ import annotations

import re
from dataclasses import dataclass

from provisioner.fabric.base import SwitchQos, SwitchSpec, require_default_classes, template

# What `roce lossless` programs (Onyx 3.10.4100 "RoCE Commands", show roce example).
ROCE_DEFAULT_MAP = {26: 3, 48: 6}
_MTU = re.compile(r"^interface ethernet (\S+) mtu (\d+)")
_TRUST = re.compile(r"^interface ethernet \S+ qos trust L3$")


@dataclass(frozen=True)
class _Port:
    name: str
    cli: str
    description: str
    mtu_bytes: int


def cli_port(name: str) -> str:
    """Inventory `Eth1/1` or `Eth1/1/2` -> CLI `1/1` or `1/1/2`."""
    return name.removeprefix("Eth")


class OnyxRenderer:
    nos = "onyx"
    file_name = "onyx.cfg"

    def render(self, spec: SwitchSpec) -> str:
        require_default_classes(spec, "Onyx", "Onyx")
        ports = [_Port(p.name, cli_port(p.name), p.description.replace('"', "'"), p.mtu_bytes)
                 for p in spec.ports]
        return template("onyx", "onyx.cfg.j2").render(spec=spec, ports=ports)

    def parse(self, text: str) -> SwitchQos:
        lines = [ln.strip() for ln in text.splitlines()]
        mode = next((ln.split()[1] for ln in lines if ln.startswith("roce ")), None)
        mtus = {f"Eth{m.group(1)}": int(m.group(2)) for ln in lines if (m := _MTU.match(ln))}
        trust = any(_TRUST.match(ln) for ln in lines)
        return SwitchQos(frozenset({3} if mode == "lossless" else set()),
                         dict(ROCE_DEFAULT_MAP) if mode else {}, mtus, trust)
