"""The running lab's overlay applied to a merged site: BMC and switch endpoints, the lab's
credentials, SSH login, apt mirror and execution nodes (written by provisioner/lab)."""

from __future__ import annotations

from typing import Any


def apply(merged: dict[str, Any], data: dict[str, Any]) -> tuple[frozenset[str], dict[str, str]]:
    """Overlay `data` onto `merged` in place. Returns the nodes whose BMC it set and the
    stood-in switches (name -> the dialect standing in)."""
    site = merged.get("site")
    creds = merged.setdefault("credentials", {})
    if isinstance(creds, dict) and isinstance(data.get("credentials"), dict):
        creds.update(data["credentials"])
    if isinstance(site, dict) and isinstance(data.get("ssh"), dict):
        site["ssh"] = {**(site.get("ssh") or {}), **data["ssh"]}
    software = merged.get("software")
    if isinstance(data.get("software"), dict) and isinstance(software, dict):
        # the lab's signed mirror, set exactly as an air-gapped site sets its own; a site's
        # own suites name its own mirror's: the lab's replace them (without them the role's
        # default, from the host's release, names the lab's suites itself)
        lab_sw = data["software"]
        software.update({k: v for k, v in lab_sw.items() if k in ("mirror", "mirror_key")})
        if "mirror_suites" in software and "mirror_suites" in lab_sw:
            software["mirror_suites"] = lab_sw["mirror_suites"]
    _overlay_execution(merged, data.get("execution"))
    endpoints: dict[str, Any] = data["bmc"]
    switches: dict[str, Any] = (data["switches"] if isinstance(data.get("switches"), dict)
                                else {})
    stood_in: dict[str, str] = {}
    applied = set()
    for placement in merged.get("placements") or []:
        nodes = placement.get("nodes") if isinstance(placement, dict) else None
        for node in nodes if isinstance(nodes, list) else []:
            if not isinstance(node, dict):
                continue
            ep = endpoints.get(str(node.get("hostname")))
            if isinstance(ep, dict) and isinstance(node.get("bmc"), dict):
                node["bmc"] = {**{k: v for k, v in node["bmc"].items() if k != "tls"}, **ep}
                applied.add(str(node["hostname"]))
            sw = switches.get(str(node.get("hostname")))
            if isinstance(sw, dict) and isinstance(node.get("management"), dict):
                node["management"] = {**node["management"],
                                      **{k: v for k, v in sw.items() if k != "stand_in"}}
                stood_in[str(node["hostname"])] = str(sw.get("stand_in", ""))
    return frozenset(applied), stood_in


def _overlay_execution(merged: dict[str, Any], lab: Any) -> None:
    """The lab's execution nodes (provisioner/lab/execution.py): how to reach each one
    named in provisioning.execution.nodes (user, key, known hosts, ansible-runner path)."""
    prov = merged.get("provisioning")
    ex = prov.get("execution") if isinstance(prov, dict) else None
    nodes = ex.get("nodes") if isinstance(ex, dict) else None
    if not isinstance(lab, dict) or not isinstance(nodes, list):
        return
    for node in nodes:
        entry = lab.get(str(node.get("name"))) if isinstance(node, dict) else None
        if isinstance(entry, dict):
            node.update(entry)
