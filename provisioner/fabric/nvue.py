"""Cumulus Linux NVUE: a YAML list for `nv config patch` (set qos roce, interfaces, MTU)."""

from __future__ import annotations

from typing import Any

import yaml

from provisioner.fabric.base import (
    SwitchQos,
    SwitchSpec,
    can_express,
    require_expressible,
    template,
)
from provisioner.roce import RocePolicy

# What `nv set qos roce` programs (Cumulus 5.14 RoCE page, default RoCE configuration table).
ROCE_DEFAULT_MAP = {26: 3, 48: 6}
ROCE_DEFAULT_PFC = 3


class NvueRenderer:
    nos = "cumulus"
    file_name = "nvue.yaml"

    def can_express(self, policy: RocePolicy) -> bool:
        return can_express(self.nos, policy)

    def render(self, spec: SwitchSpec) -> str:
        require_expressible(spec)
        return template("cumulus", "nvue.yaml.j2").render(spec=spec)

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
        mtus = {name: int(i["link"]["mtu"]) for name, i in (conf.get("interface") or {}).items()
                if "mtu" in i.get("link", {})}
        return SwitchQos(frozenset(pfc), mapping, mtus, trust_dscp=on)
