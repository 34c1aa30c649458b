"""The site's hosts as every consumer sees them: each node with its chassis, block type,
roles, management address and Ansible groups. Render, PXE, the lab, the BMC layer and the
reports read this instead of walking placements on their own, so a rule (which address
Ansible uses, which hosts are servers, who is in roce_nodes) is written once.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from provisioner.errors import RenderError
from provisioner.inventory.kube_checks import node_roles
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import (
    HOSTNAME_RE,
    BlockKind,
    BlockType,
    NetworkKind,
    Node,
    Placement,
    Role,
)

GROUP_RE = re.compile(r"[^a-z0-9_]")
WELL_KNOWN_GROUPS = ("servers", "switches", "kube_control_plane", "kube_node", "gpu_nodes",
                     "nvswitch_nodes", "imex_nodes", "roce_nodes", "storage_nodes")


@dataclass(frozen=True)
class HostPlan:
    """One node with its chassis, block type and roles (defaults applied)."""

    node: Node
    placement: Placement
    block: BlockType
    roles: tuple[Role, ...]

    @property
    def hostname(self) -> str:
        return self.node.hostname

    @property
    def control_plane(self) -> bool:
        return Role.CONTROL_PLANE in self.roles

    @property
    def is_server(self) -> bool:
        return self.block.kind is not BlockKind.SWITCH


def select(hostnames: list[str], limit: str | None) -> list[str]:
    """Ansible-style --limit: comma-separated glob patterns; '!pattern' excludes."""
    if not limit:
        return hostnames
    pats = [p.strip() for p in limit.split(",") if p.strip()]
    include = [p for p in pats if not p.startswith("!")]
    exclude = [p[1:] for p in pats if p.startswith("!")]
    return [h for h in hostnames
            if (not include or any(fnmatch.fnmatchcase(h, p) for p in include))
            and not any(fnmatch.fnmatchcase(h, p) for p in exclude)]


def group_name(*parts: str) -> str:
    """Ansible group names: lower case, [a-z0-9_] only."""
    return GROUP_RE.sub("_", "_".join(parts).lower())


def ansible_host(node: Node) -> str | None:
    """The address Ansible (and `up`'s SSH wait) reaches a node on: mgmt, else the first."""
    addr = node.addresses.get("mgmt") or next(iter(node.addresses.values()), None)
    return None if addr is None else str(addr)


def nvlink_domain(p: Placement) -> str:
    """The NVLink (IMEX) domain of a placement's nodes: its own, else its rack."""
    return p.nvlink_domain or p.rack


def host_plans(loaded: LoadedSite) -> list[HostPlan]:
    """Every node of the site in inventory order, switches included."""
    out = []
    for p in loaded.site.placements:
        block = loaded.catalog.get(p.block)
        if block is None:
            raise RenderError(f"placement of unknown block type {p.block!r}",
                              hint="run `provision validate` first")
        for node in p.nodes:
            if not HOSTNAME_RE.match(node.hostname):  # belt and braces: reaches shells
                raise RenderError(f"refusing host name {node.hostname!r}")
            out.append(HostPlan(node, p, block, node_roles(node, block.kind)))
    return out


def servers(loaded: LoadedSite) -> list[HostPlan]:
    """Every node `up` brings up: all but switches, in inventory order."""
    return [h for h in host_plans(loaded) if h.is_server]


def bmc_nodes(loaded: LoadedSite) -> list[Node]:
    """Nodes that have a BMC, in inventory order (servers and any managed chassis)."""
    return [n for p in loaded.site.placements for n in p.nodes if n.bmc is not None]


def network_of_kind(loaded: LoadedSite, *kinds: NetworkKind) -> str | None:
    """The name of the first network of the first kind given that the site has."""
    for kind in kinds:
        for net in loaded.site.networks:
            if net.kind is kind:
                return net.name
    return None


def has_roce(loaded: LoadedSite, node: Node) -> bool:
    """A node with an address on a RoCE network gets the host QoS role."""
    kinds = {n.name: n.kind for n in loaded.site.networks}
    return any(kinds.get(net) is NetworkKind.ROCE for net in node.addresses)


def groups(loaded: LoadedSite, hosts: list[HostPlan]) -> dict[str, list[str]]:
    """Ansible groups by block, rack, role, GPU model and capability; sorted members."""
    out: dict[str, list[str]] = {}

    def add(group: str, host: str) -> None:
        out.setdefault(group, []).append(host)

    for h in hosts:
        name, block = h.node.hostname, h.block
        add(group_name(block.name), name)
        add(group_name("rack", h.placement.rack), name)
        if not h.is_server:
            add("switches", name)
            add(group_name(block.switch_role or "other", "switches"), name)
            continue
        add("servers", name)
        if Role.CONTROL_PLANE in h.roles:
            add("kube_control_plane", name)
        if Role.WORKER in h.roles:
            add("kube_node", name)
        if Role.STORAGE in h.roles:
            add("storage_nodes", name)
        if block.gpu is not None:
            add("gpu_nodes", name)
            add(group_name("gpu", block.gpu.model), name)
        if block.nvswitch:
            add("nvswitch_nodes", name)
        if block.imex:
            add("imex_nodes", name)
        if has_roce(loaded, h.node):
            add("roce_nodes", name)
    for always in WELL_KNOWN_GROUPS:  # plays target these even when a site has none
        out.setdefault(always, [])
    return {g: sorted(set(v)) for g, v in sorted(out.items())}
