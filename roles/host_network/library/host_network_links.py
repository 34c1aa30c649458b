#!/usr/bin/python
"""Ansible module: bring the host's data ports to the netplan configuration netplan
generate wrote, touching only those links (the management NIC, which Ansible's own session
rides on, is never reconfigured): each port found by its permanent MAC is renamed to its
planned name, networkd reloads its files (creating the bonds and VLANs they define) and
reconfigures exactly the planned links. `netplan apply` would replug every netplan device
and run `udevadm trigger`, which a container's read-only /sys refuses."""

from __future__ import annotations

import json
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: host_network_links
short_description: Rename the data ports and have networkd apply their configuration
options:
  interfaces:
    description: host_network_interfaces, as provisioner renders them
    type: list
    elements: dict
    required: true
"""

IFNAMSIZ = 15
NOT_PORTS = frozenset({"vlan", "bond", "bridge", "macvlan", "ipvlan", "vxlan", "dummy",
                       "team", "tun"})


def member_name(port: str, i: int) -> str:
    return f"{port[:IFNAMSIZ - 3]}-p{i}"


def wanted_names(interfaces: list[dict[str, Any]]) -> dict[str, str]:
    """MAC -> the name its port gets (plain ports and bond members, by MAC)."""
    out: dict[str, str] = {}
    for i in interfaces:
        for k, mac in enumerate(i.get("members") or []):
            out[mac.lower()] = member_name(i["port"], k)
        if not i.get("members") and i.get("mac"):
            out[i["mac"].lower()] = i["port"]
    return out


def ports_by_mac(links: list[dict[str, Any]]) -> dict[str, str]:
    """Permanent MAC -> name of the physical port that has it (a VLAN or a bond shares its
    port's MAC, and an enslaved port shows its bond's: `permaddr` is its own)."""
    out: dict[str, str] = {}
    for link in links:
        kind = ((link.get("linkinfo") or {}).get("info_kind") or "")
        if link.get("link_type") != "ether" or kind in NOT_PORTS:
            continue
        mac = str(link.get("permaddr") or link.get("address") or "").lower()
        if mac:
            out.setdefault(mac, str(link["ifname"]))
    return out


def renames(interfaces: list[dict[str, Any]], links: list[dict[str, Any]]
            ) -> list[tuple[str, str]]:
    have = ports_by_mac(links)
    return [(have[mac], name) for mac, name in sorted(wanted_names(interfaces).items())
            if mac in have and have[mac] != name]


def all_names(interfaces: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for i in interfaces:
        names += [member_name(i["port"], k) for k in range(len(i.get("members") or []))]
        names += [i["port"]] + ([i["name"]] if i["name"] != i["port"] else [])
    return list(dict.fromkeys(names))


def main() -> None:
    module = AnsibleModule(argument_spec={"interfaces": {"type": "list", "elements": "dict",
                                                         "required": True}},
                           supports_check_mode=True)
    interfaces: list[dict[str, Any]] = module.params["interfaces"]

    def ip_links() -> list[dict[str, Any]]:
        _rc, out, _err = module.run_command(["ip", "-j", "-d", "link", "show"],
                                            check_rc=True)
        links: list[dict[str, Any]] = json.loads(out)
        return links

    todo = renames(interfaces, ip_links())
    if module.check_mode:
        module.exit_json(changed=True, renamed=[f"{a} -> {b}" for a, b in todo])
    for old, new in todo:
        module.run_command(["ip", "link", "set", "dev", old, "down"], check_rc=True)
        module.run_command(["ip", "link", "set", "dev", old, "name", new], check_rc=True)
    module.run_command(["networkctl", "reload"], check_rc=True)
    present: set[str] = set()
    for _ in range(10):  # reload creates the bonds and VLANs; they appear shortly after
        present = {str(link["ifname"]) for link in ip_links()}
        if set(all_names(interfaces)) <= present:
            break
        time.sleep(0.5)
    names = [n for n in all_names(interfaces) if n in present]
    if names:
        module.run_command(["networkctl", "reconfigure", *names], check_rc=True)
    module.exit_json(changed=True, renamed=[f"{a} -> {b}" for a, b in todo],
                     reconfigured=names)


if __name__ == "__main__":
    main()
