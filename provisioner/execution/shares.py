"""Which execution node runs which hosts: whole racks (the failure domain) per node.

Pure: no I/O. A rack pinned to a node (`racks:` in the inventory) goes there; the other
racks go, largest first, to the node with the fewest hosts so far, so a rack's hosts share
one worker and an upgrade's failure domains stay intact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provisioner.errors import ConfigError
from provisioner.inventory.execution_models import ExecutionNode


def split(hosts: Sequence[str], rack_of: Mapping[str, str],
          nodes: Sequence[ExecutionNode]) -> dict[str, list[str]]:
    """{execution node name: its hosts, in the order given}; nodes without hosts left out."""
    if not nodes:
        raise ConfigError("no execution nodes to split the hosts across")
    racks: dict[str, list[str]] = {}
    for h in hosts:
        racks.setdefault(rack_of.get(h, ""), []).append(h)
    pinned = {r: n.name for n in nodes for r in n.racks}
    load = {n.name: 0 for n in nodes}
    owner: dict[str, str] = {}
    for rack in sorted(racks):
        if rack in pinned:
            owner[rack] = pinned[rack]
            load[pinned[rack]] += len(racks[rack])
    free = sorted((r for r in racks if r not in owner), key=lambda r: (-len(racks[r]), r))
    for rack in free:
        name = min(load, key=lambda n: (load[n], n))
        owner[rack] = name
        load[name] += len(racks[rack])
    out: dict[str, list[str]] = {}
    for h in hosts:
        out.setdefault(owner[rack_of.get(h, "")], []).append(h)
    return {n.name: out[n.name] for n in nodes if n.name in out}


def fallback(lost: str, nodes: Sequence[ExecutionNode], dead: set[str],
             load: Mapping[str, int]) -> ExecutionNode | None:
    """Where a lost node's share runs again: the least loaded node not known dead."""
    alive = [n for n in nodes if n.name != lost and n.name not in dead]
    if not alive:
        return None
    return min(alive, key=lambda n: (load.get(n.name, 0), n.name))
