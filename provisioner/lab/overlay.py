"""What a running lab changes in its site, and the site with those changes: BMC and switch
endpoints, the lab's credentials, SSH login, apt mirror and execution nodes. `lab up` writes
the overlay (lab/__init__.py) into the lab's part of .provision/ (state.dir.running_lab_file);
`lab down` removes it. The inventory loader knows nothing of it: the CLI validates the site
as written, then, where a lab runs for it, hands the core the site loaded again with the
overlay applied to its data (`load`), and a profile that says so (profile.for_site).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.loader import load as load_site
from provisioner.inventory.yamlsafe import fail, parse_tree, read_file
from provisioner.state.dir import running_lab_file

HEADER = "# Written by `provision lab up`; removed by `provision lab down`.\n"


def path_of(base_dir: Path) -> Path:
    return running_lab_file(base_dir.resolve())


def read(base_dir: Path) -> dict[str, Any] | None:
    """The overlay of the lab running for the site in `base_dir`, or None when none runs;
    an InventoryError (exit 3) naming the file when it is damaged."""
    path = path_of(base_dir)
    if not path.is_file():
        return None
    data = parse_tree(read_file(path, str(path)), str(path))[0]
    if not isinstance(data, dict) or not isinstance(data.get("bmc"), dict):
        raise fail(str(path), 1, 1, "the lab overlay is damaged",
                   "run `provision lab down` and `provision lab up` again")
    return data


def load(path: str | Path) -> LoadedSite:
    """The site at `path` as the core acts on it: with the running lab's endpoints, login
    and mirror when a lab runs for it, else as written."""
    root = Path(path)
    data = read(root if root.is_dir() else root.parent)
    if data is None:
        return load_site(root)
    return load_site(root, amend=lambda merged: apply(merged, data))


def apply(merged: dict[str, Any], data: dict[str, Any]) -> None:
    """Overlay `data` onto `merged` (a site's merged data, before its schema check) in
    place."""
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
    for placement in merged.get("placements") or []:
        nodes = placement.get("nodes") if isinstance(placement, dict) else None
        for node in nodes if isinstance(nodes, list) else []:
            if not isinstance(node, dict):
                continue
            ep = endpoints.get(str(node.get("hostname")))
            if isinstance(ep, dict) and isinstance(node.get("bmc"), dict):
                node["bmc"] = {**{k: v for k, v in node["bmc"].items() if k != "tls"}, **ep}
            sw = switches.get(str(node.get("hostname")))
            if isinstance(sw, dict) and isinstance(node.get("management"), dict):
                node["management"] = {**node["management"],
                                      **{k: v for k, v in sw.items() if k != "stand_in"}}


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
