"""The host network role's netplan document, and what the running host lacks of it.

Python rather than a Jinja template: a netplan document is nested YAML whose shape
depends on bonds, VLANs and rails, and a filter can be tested on its own
(tests/unit/test_host_network.py). Each entry of host_network_interfaces is one network
on the host as provisioner/hostnet.py plans it (name, port, mac or match_name, bond
members, address, mtu, vlan, rail table, routes).
"""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Interface
from typing import Any

IFNAMSIZ = 15


def member_name(port: str, i: int) -> str:
    """A bond member's interface name (provisioner/hostnet.py names them the same)."""
    return f"{port[:IFNAMSIZ - 3]}-p{i}"


def _addressing(i: dict[str, Any]) -> dict[str, Any]:
    """Address, MTU and routes of the interface holding the address; a rail's own table and
    its rule `from <address>` (source-based routing)."""
    out: dict[str, Any] = {"dhcp4": False, "addresses": [i["address"]], "mtu": i["mtu"]}
    routes = [{"to": r["to"], "via": r["via"]} for r in i.get("routes", [])]
    table = i.get("table") or 0
    if table:
        net = str(IPv4Interface(i["address"]).network)
        routes.append({"to": net, "scope": "link", "table": table})
        if i.get("gateway"):
            routes.append({"to": "default", "via": i["gateway"], "table": table})
        routes += [{"to": r["to"], "via": r["via"], "table": table}
                   for r in i.get("routes", [])]
        out["routing-policy"] = [{"from": str(IPv4Interface(i["address"]).ip),
                                  "table": table}]
    if routes:
        out["routes"] = routes
    return out


def netplan_document(interfaces: list[dict[str, Any]]) -> dict[str, Any]:
    """The netplan document (networkd) for every planned interface."""
    ethernets: dict[str, Any] = {}
    bonds: dict[str, Any] = {}
    vlans: dict[str, Any] = {}
    for i in interfaces:
        port, vlan = i["port"], i.get("vlan") or 0
        holder = _addressing(i)
        if i.get("members"):
            for k, mac in enumerate(i["members"]):
                name = member_name(port, k)
                ethernets[name] = {"match": {"macaddress": mac}, "set-name": name,
                                   "dhcp4": False, "mtu": i["mtu"]}
            params: dict[str, Any] = {"mode": i.get("bond_mode") or "802.3ad",
                                      "mii-monitor-interval": 100}
            if params["mode"] == "802.3ad":
                params |= {"lacp-rate": "fast", "transmit-hash-policy": "layer3+4"}
            bond: dict[str, Any] = {
                "interfaces": [member_name(port, k) for k in range(len(i["members"]))],
                "parameters": params}
            if i.get("mac"):
                bond["macaddress"] = i["mac"]
            bonds[port] = bond | (holder if not vlan else {"dhcp4": False, "mtu": i["mtu"]})
        else:
            match = ({"macaddress": i["mac"]} if i.get("mac")
                     else {"name": i["match_name"]})
            eth: dict[str, Any] = {"match": match}
            if i.get("mac"):
                eth["set-name"] = port
            ethernets[port] = eth | (holder if not vlan else {"dhcp4": False,
                                                              "mtu": i["mtu"]})
        if vlan:
            vlans[i["name"]] = {"id": vlan, "link": port} | holder
    doc: dict[str, Any] = {"version": 2, "renderer": "networkd", "ethernets": ethernets}
    if bonds:
        doc["bonds"] = bonds
    if vlans:
        doc["vlans"] = vlans
    return {"network": doc}


def netplan_drift(interfaces: list[dict[str, Any]], addr: list[dict[str, Any]],
                       rules: list[dict[str, Any]]) -> list[str]:
    """What the running host lacks of the plan, read from `ip -j addr` and `ip -j rule`:
    an interface missing, another MTU, the address missing, a rail's rule missing."""
    links = {a.get("ifname"): a for a in addr}
    out: list[str] = []
    for i in interfaces:
        link = links.get(i["name"])
        if link is None:
            out.append(f"{i['name']} ({i['network']}): no such interface")
            continue
        if link.get("mtu") != i["mtu"]:
            out.append(f"{i['name']} ({i['network']}): MTU {link.get('mtu')}, "
                       f"not {i['mtu']}")
        ip = IPv4Interface(i["address"])
        have = {f"{a.get('local')}/{a.get('prefixlen')}" for a in link.get("addr_info", [])
                if a.get("family") == "inet"}
        if str(ip) not in have:
            out.append(f"{i['name']} ({i['network']}): no address {ip} "
                       f"(has {', '.join(sorted(have)) or 'none'})")
        table = i.get("table") or 0
        if table and not any(r.get("src") == str(ip.ip) and str(r.get("table")) == str(table)
                             for r in rules):
            out.append(f"{i['name']} ({i['network']}): no rule from {ip.ip} lookup {table}")
    return out


class FilterModule:
    """Ansible's filter plugin entry point."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"netplan_document": netplan_document, "netplan_drift": netplan_drift}
