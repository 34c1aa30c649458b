"""SONiC config_db: the RoCE tables as JSON, applied as an RFC 6902 JSON Patch
(`config apply-patch`) computed against the switch's running config_db.

Built in Python, not a template: JSON is data, and a template could emit invalid JSON.
Based on SONiC's community defaults as sonic-net/SONiC doc "Configuration.md" shows them
(PORT, PORT_QOS_MAP, QUEUE, WRED_PROFILE tables): PORT_QOS_MAP pfc_enable "3,4",
dscp_to_tc_map AZURE, lossless queues on WRED_PROFILE AZURE_LOSSLESS with ecn_all.
Map references are plain names (SONiC 202012 and later), not the older "[TABLE|NAME]".
No BUFFER_PG: SONiC's buffer manager gives priorities 3 and 4 their lossless profiles
(headroom from the port's speed and cable length) by itself, in both buffer models (NVIDIA
SONiC 202012 "QoS and Buffers"); ingress_lossless_profile is a pool profile without headroom,
and a PG "3" beside its "3-4" overlaps it. validate refuses a lossless priority outside 3-4.
"""

from __future__ import annotations

import json
from typing import Any

from provisioner.fabric.base import SwitchQos, SwitchSpec, can_express, require_expressible
from provisioner.roce import RocePolicy

MAP = "AZURE"  # SONiC's default QoS map and profile names, kept so buffer templates match
WRED = "AZURE_LOSSLESS"
Json = dict[str, Any]


def tables(spec: SwitchSpec) -> Json:
    p = spec.policy
    lossless = ",".join(map(str, p.pfc_priorities))
    dscp = {str(d): "0" for d in range(64)}
    dscp.update({str(d): str(prio) for d, prio in p.dscp_to_priority})
    identity = {str(i): str(i) for i in range(8)}
    # TC -> priority group as in SONiC's own AZURE map (sonic-buildimage
    # files/build_templates/qos_config.j2; sonic-buildimage#2650 "Map tc 1, 2, 5, and 6 back
    # to pg 0"): its buffer templates give PG 0 (lossy) and 3-4 (lossless) profiles and no
    # other, so an identity map left the CNP class (6) in a group without buffer, where
    # congestion notifications are dropped at ingress under load and DCQCN stops working.
    to_pg = {str(tc): str(tc) if tc in (3, 4, 7) or tc in p.pfc_priorities else "0"
             for tc in range(8)}
    port_qos: Json = {"dscp_to_tc_map": MAP, "tc_to_queue_map": MAP, "tc_to_pg_map": MAP}
    if lossless:
        port_qos |= {"pfc_to_queue_map": MAP, "pfc_enable": lossless, "pfcwd_sw_enable": lossless}
    queues: Json = {}
    for port in spec.ports:
        queues[f"{port.name}|0"] = {"scheduler": "scheduler.default"}
        queues[f"{port.name}|{p.roce_priority}"] = {"scheduler": "scheduler.roce",
                                                    "wred_profile": WRED}
        for q in p.pfc_priorities:
            queues[f"{port.name}|{q}"] = {"scheduler": "scheduler.roce", "wred_profile": WRED}
        queues[f"{port.name}|{p.cnp_priority}"] = {"scheduler": "scheduler.cnp"}
    out: Json = {
        "DSCP_TO_TC_MAP": {MAP: dscp},
        "TC_TO_QUEUE_MAP": {MAP: identity},
        "TC_TO_PRIORITY_GROUP_MAP": {MAP: to_pg},
        "MAP_PFC_PRIORITY_TO_QUEUE": {MAP: identity},
        "SCHEDULER": {
            "scheduler.default": {"type": "DWRR", "weight": str(p.default_ets_weight_pct)},
            "scheduler.roce": {"type": "DWRR", "weight": str(p.roce_ets_weight_pct)},
            "scheduler.cnp": {"type": "STRICT"},
        },
        "WRED_PROFILE": {WRED: {
            "ecn": "ecn_all", "wred_green_enable": "true",
            "green_min_threshold": str(p.ecn_min_bytes),
            "green_max_threshold": str(p.ecn_max_bytes),
            "green_drop_probability": str(p.ecn_probability_pct)}},
        "PORT": {port.name: {"mtu": str(port.mtu_bytes), "description": port.description}
                 for port in spec.ports},
        "PORT_QOS_MAP": {port.name: dict(port_qos) for port in spec.ports},
        "QUEUE": queues,
    }
    return out | _vlans(spec)


def _vlans(spec: SwitchSpec) -> Json:
    """VLAN, VLAN_MEMBER (untagged: an access port; tagged where the hosts tag it) and, for
    a network the leaf routes, VLAN_INTERFACE with its gateway (SONiC Configuration.md:
    "VLAN", "VLAN_MEMBER", "VLAN_INTERFACE" tables)."""
    if not spec.vlans:
        return {}
    out: Json = {"VLAN": {f"Vlan{v}": {"vlanid": str(v)} for v in spec.vlans},
                 "VLAN_MEMBER": {
                     f"Vlan{p.vlan}|{p.name}": {"tagging_mode": "tagged" if p.tagged
                                                else "untagged"}
                     for p in spec.ports if p.vlan is not None}}
    for s in spec.svis:
        out["VLAN"][f"Vlan{s.vlan}"]["mtu"] = str(s.mtu_bytes)
    if spec.svis:
        out["VLAN_INTERFACE"] = {k: {} for s in spec.svis
                                 for k in (f"Vlan{s.vlan}", f"Vlan{s.vlan}|{s.address}")}
    return out


def _pointer(parts: list[str]) -> str:
    return "".join("/" + s.replace("~", "~0").replace("/", "~1") for s in parts)


def json_patch(running: Json, desired: Json, _at: list[str] | None = None) -> list[Json]:
    """RFC 6902 operations that make `running` hold every value of `desired`. Keys the
    renderer does not manage are left alone (no remove ops): other config stays as it is."""
    at = _at or []
    ops: list[Json] = []
    for key in sorted(desired):
        want = desired[key]
        if key not in running:
            ops.append({"op": "add", "path": _pointer([*at, key]), "value": want})
        elif isinstance(want, dict) and isinstance(running[key], dict):
            ops.extend(json_patch(running[key], want, [*at, key]))
        elif running[key] != want:
            ops.append({"op": "replace", "path": _pointer([*at, key]), "value": want})
    return ops


def _retired(running: Json) -> list[Json]:
    """Remove what an earlier renderer wrote and this one no longer does: BUFFER_PG entries
    of one priority on the pool profile ingress_lossless_profile (no headroom, and overlapping
    SONiC's own "3-4"). Entries an operator wrote (another profile, a range) stay."""
    return [{"op": "remove", "path": _pointer(["BUFFER_PG", key])}
            for key, entry in sorted(running.get("BUFFER_PG", {}).items())
            if key.rpartition("|")[2].isdigit() and isinstance(entry, dict)
            and entry.get("profile") == "ingress_lossless_profile"]


def patch(running: Json, desired: Json) -> list[Json]:
    """The RFC 6902 operations `config apply-patch` applies to the running config_db."""
    return json_patch(running, desired) + _retired(running)


class SonicRenderer:
    nos = "sonic"
    file_name = "config_db.json"

    def can_express(self, policy: RocePolicy) -> bool:
        return can_express(self.nos, policy)

    def render(self, spec: SwitchSpec) -> str:
        require_expressible(spec)
        return json.dumps(tables(spec), indent=2, sort_keys=True) + "\n"

    def parse(self, text: str) -> SwitchQos:
        db: Json = json.loads(text)
        pfc: set[int] = set()
        mapping: dict[int, int] = {}
        for qos in db.get("PORT_QOS_MAP", {}).values():
            pfc |= {int(x) for x in qos.get("pfc_enable", "").split(",") if x}
            name = qos.get("dscp_to_tc_map", "")
            mapping |= {int(d): int(t) for d, t in
                        db.get("DSCP_TO_TC_MAP", {}).get(name, {}).items()}
        mtus = {name: int(v["mtu"]) for name, v in db.get("PORT", {}).items() if "mtu" in v}
        vlans = {key.partition("|")[2]: (int(key.partition("|")[0].removeprefix("Vlan")),
                                         v.get("tagging_mode") == "tagged")
                 for key, v in db.get("VLAN_MEMBER", {}).items()
                 if key.startswith("Vlan") and key.partition("|")[0][4:].isdigit()}
        return SwitchQos(frozenset(pfc), mapping, mtus, bool(mapping), port_vlans=vlans)
