"""Cumulus Linux NVUE: a YAML list for `nv config patch` (set qos roce, interfaces, MTU)."""

from __future__ import annotations

from typing import Any

import yaml

from provisioner.errors import RenderError
from provisioner.fabric.base import SwitchQos, SwitchSpec, default_classes, template

# What `nv set qos roce` programs (Cumulus 5.14 RoCE page, default RoCE configuration table).
ROCE_DEFAULT_MAP = {26: 3, 48: 6}
ROCE_DEFAULT_PFC = 3


class NvueRenderer:
    nos = "cumulus"
    file_name = "nvue.yaml"

    def render(self, spec: SwitchSpec) -> str:
        # `qos roce` programs NVIDIA's classes and keeps PFC on SP3 whatever else is set, so a
        # custom class (say CNP on 3) would conflict; refuse rather than render a broken pair.
        if not default_classes(spec.policy):
            raise RenderError(
                f"{spec.hostname}: the NVUE renderer sets NVIDIA's default RoCE classes only "
                "(DSCP 26 -> 3, CNP 48 -> 6)",
                hint="use the default software.roce values for Cumulus switches")
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
