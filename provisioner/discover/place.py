"""Where a new node goes and what it is called: rack and U, host name, addresses, switch
port. Pure (no I/O); `provision add` writes the result back (writeback.py).

Budgets are `power.rack_budget`'s and `power.circuit_budgets`' (the one source of the
numbers `provision power` and `validate` print): a rack takes the node only if, after the
addition, every feed, every shared upstream circuit its feeds hang off (with the other
racks on it), the cooling, the airflow and the rack space stay within budget and a run of
free U is tall enough for the chassis. Switch ports come from the site's cabling rules
(inventory/cabling.resolve on the site with the node added), so the port proposed is the
port `validate`, `render` and the fabric renderers will use.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from provisioner import power
from provisioner.errors import BudgetError, ConfigError
from provisioner.inventory import cabling
from provisioner.inventory.block_models import BlockKind, BlockType
from provisioner.inventory.models import Bmc, Node, Placement, Rack, Site

# Prefix for a block kind no node of the site uses yet (host names then run 01, 02, ...).
KIND_PREFIX = {BlockKind.GPU_SERVER: "gpu", BlockKind.COMPUTE: "node", BlockKind.HCI: "hci",
               BlockKind.STORAGE: "stor", BlockKind.SWITCH: "sw"}
_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)$")


@dataclass(frozen=True)
class RackFit:
    """One rack's answer for the new chassis: the U it would take, or why not."""

    rack: str
    u: int | None
    failures: tuple[str, ...]  # budget messages after the addition (with the numbers)
    load_w_after: float
    usable_va: float
    cooling_limit_w: float

    @property
    def ok(self) -> bool:
        return self.u is not None and not self.failures


@dataclass(frozen=True)
class Proposal:
    hostname: str
    block: str
    rack: str
    u: int
    addresses: dict[str, str]
    macs: dict[str, str]
    bmc: Bmc
    links: tuple[tuple[str, str, str], ...]  # (nic, switch, switch port)
    fit: RackFit
    checked: tuple[RackFit, ...] = field(default=())  # every rack looked at, in site order

    def node(self) -> Node:
        return Node(hostname=self.hostname, bmc=self.bmc, addresses=self.addresses,
                    macs=self.macs)

    def placement(self) -> Placement:
        return Placement(rack=self.rack, u=self.u, block=self.block, nodes=(self.node(),))


def free_u(rack: Rack, placements: Sequence[Placement], catalog: Mapping[str, BlockType],
           height_u: int) -> int | None:
    """The lowest U where `height_u` free units in a row start (U1 is the bottom)."""
    taken = [False] * (rack.height_u + 1)
    for p in placements:
        block = catalog.get(p.block)
        for u in range(p.u, min(p.u + (block.rack_units if block else 1), rack.height_u + 1)):
            taken[u] = True
    run = 0
    for u in range(1, rack.height_u + 1):
        run = 0 if taken[u] else run + 1
        if run == height_u:
            return u - height_u + 1
    return None


CircuitCheck = Callable[[power.RackBudget], list[str]]


def fit(rack: Rack, placements: Sequence[Placement], catalog: Mapping[str, BlockType],
        block: BlockType, u: int | None = None, basis: power.Basis = "nameplate",
        circuits: CircuitCheck | None = None) -> RackFit:
    """Would the rack hold one more `block` chassis (at `u`, or the lowest free U)? With
    `circuits`, the shared circuits its feeds hang off are weighed too (on_circuits)."""
    mine = [p for p in placements if p.rack == rack.name]
    spot = free_u(rack, mine, catalog, block.rack_units) if u is None else u
    problems: list[str] = []
    if u is not None:
        top = u + block.rack_units - 1
        if top > rack.height_u:
            problems.append(f"rack {rack.name}: {block.name} ({block.rack_units} U) at U{u} "
                            f"reaches U{top}, above the top (U{rack.height_u})")
        elif _overlaps(mine, catalog, u, block.rack_units):
            problems.append(f"rack {rack.name}: U{u}-U{top} is not free")
    elif spot is None:
        problems.append(f"rack {rack.name}: no {block.rack_units} U run of free units")
    after = power.rack_budget(rack, [*mine, _probe(rack.name, spot or 1, block.name)],
                              catalog, basis)
    problems += [f.message for f in after.failures]
    problems += circuits(after) if circuits is not None else []
    return RackFit(rack.name, spot, tuple(problems), after.load_w, after.usable_va,
                   after.cooling_limit_w)


def on_circuits(site: Site, catalog: Mapping[str, BlockType],
                by_rack: Mapping[str, Sequence[Placement]],
                basis: power.Basis = "nameplate") -> CircuitCheck:
    """The declared circuits a rack's feeds hang off, weighed with that rack at its budget
    after the addition and every other rack on them as it is: the failures, in `validate`'s
    words (power.circuit_budgets). A rack within its own feeds can still overload the
    breaker upstream that it shares. Other racks' budgets are computed once, when needed."""
    racks = {r.name: r for r in site.racks}
    order = {name: i for i, name in enumerate(racks)}
    members: dict[str, set[str]] = {}
    for r in site.racks:
        for f in r.feeds:
            if f.circuit is not None:
                members.setdefault(f.circuit, set()).add(r.name)
    now: dict[str, power.RackBudget] = {}

    def before(name: str) -> power.RackBudget:
        if name not in now:
            now[name] = power.rack_budget(racks[name], by_rack.get(name, ()), catalog, basis)
        return now[name]

    def check(after: power.RackBudget) -> list[str]:
        mine = {f.circuit for f in racks[after.name].feeds if f.circuit is not None}
        if not mine:
            return []
        others = sorted({n for c in mine for n in members.get(c, ())} - {after.name},
                        key=order.__getitem__)
        budgets = sorted([after, *(before(n) for n in others)],
                         key=lambda b: order[b.name])
        return [f.message for cb in power.circuit_budgets(
            (c for c in site.circuits if c.name in mine), budgets) for f in cb.failures]

    return check


def _probe(rack: str, u: int, block: str) -> Placement:
    return Placement.model_construct(rack=rack, u=u, block=block, nodes=())


def _overlaps(mine: Sequence[Placement], catalog: Mapping[str, BlockType],
              u: int, height_u: int) -> bool:
    want = set(range(u, u + height_u))
    for p in mine:
        block = catalog.get(p.block)
        if want & set(range(p.u, p.u + (block.rack_units if block else 1))):
            return True
    return False


def choose_rack(site: Site, catalog: Mapping[str, BlockType], block: BlockType,
                rack: str | None, u: int | None) -> tuple[RackFit, tuple[RackFit, ...]]:
    """The admin's rack and U checked, or the first rack (site order) that holds it.

    Refused with BudgetError (exit 4) and the numbers; the message names a rack with room
    when there is one.
    """
    racks = {r.name: r for r in site.racks}
    if rack is not None and rack not in racks:
        raise ConfigError(f"--rack {rack!r}: no such rack",
                          hint=f"racks: {', '.join(racks)}")
    by_rack: dict[str, list[Placement]] = {}
    for p in site.placements:  # one pass: a site may have thousands of chassis
        by_rack.setdefault(p.rack, []).append(p)
    shared = on_circuits(site, catalog, by_rack)
    checked = tuple(fit(r, by_rack.get(r.name, []), catalog, block,
                        u if r.name == rack else None, circuits=shared) for r in site.racks)
    by_name = {f.rack: f for f in checked}
    if rack is not None:
        mine = by_name[rack]
        if mine.ok:
            return mine, checked
        other = next((f for f in checked if f.ok and f.rack != rack), None)
        raise BudgetError(
            f"adding a {block.name} ({block.max_power_w:,.0f} W, {block.rack_units} U) to "
            f"rack {rack}: " + "; ".join(mine.failures),
            hint=(f"rack {other.rack} has room at U{other.u} "
                  f"(load after {other.load_w_after:,.0f} W); use --rack {other.rack}")
            if other else "no rack of the site has room for it")
    for f in checked:
        if f.ok:
            return f, checked
    raise BudgetError(
        f"no rack has room for a {block.name} ({block.max_power_w:,.0f} W, "
        f"{block.rack_units} U): " + "; ".join(m for f in checked for m in f.failures),
        hint="add a rack, or free power, cooling or rack units")


def hostname(site: Site, catalog: Mapping[str, BlockType], block: BlockType) -> str:
    """The next name in the pattern the block's nodes already follow (dgx01, dgx02 ->
    dgx03), else that of the nodes of the same kind, else the kind's prefix (gpu01)."""
    same: Counter[tuple[str, int]] = Counter()
    kind: Counter[tuple[str, int]] = Counter()
    numbers: dict[str, int] = {}
    taken: set[str] = set()
    for p in site.placements:
        other = catalog.get(p.block)
        for n in p.nodes:
            taken.add(n.hostname)
            m = _NUMBERED.match(n.hostname)
            if m is None:
                continue
            numbers[m["prefix"]] = max(numbers.get(m["prefix"], 0), int(m["num"]))
            if p.block == block.name:
                same[(m["prefix"], len(m["num"]))] += 1
            elif other is not None and other.kind is block.kind:
                kind[(m["prefix"], len(m["num"]))] += 1
    same = same or kind
    if same:
        (prefix, width), _ = same.most_common(1)[0]
        start = numbers[prefix] + 1
    else:
        prefix, width, start = KIND_PREFIX[block.kind], 2, 1
    num = start
    while f"{prefix}{num:0{width}d}" in taken:
        num += 1
    return f"{prefix}{num:0{width}d}"


def addresses(site: Site, catalog: Mapping[str, BlockType], block: BlockType,
              wanted: Sequence[str] | None = None) -> dict[str, str]:
    """An address in each network the block's nodes use (else those of the site's nodes of
    the same kind, else management only), from each network's free space.

    One host number free in every one of those networks is preferred (the site then reads
    .23 on mgmt, roce and storage alike), next after the highest of the block's (or kind's)
    nodes; failing that, the lowest free address of each network on its own.
    """
    nets = {n.name: n for n in site.networks}
    used: dict[str, set[int]] = {name: set() for name in nets}
    block_offsets: list[int] = []
    block_nets: Counter[str] = Counter()
    kind_offsets: list[int] = []
    kind_nets: Counter[str] = Counter()
    for p in site.placements:
        other = catalog.get(p.block)
        same_kind = other is not None and other.kind is block.kind
        for node in p.nodes:
            for name, ip in node.addresses.items():
                net = nets.get(name)
                if net is None:
                    continue
                offset = int(ipaddress.IPv4Address(str(ip))) - int(net.cidr.network_address)
                used[name].add(offset)
                if p.block == block.name:
                    block_nets[name] += 1
                    block_offsets.append(offset)
                if same_kind:
                    kind_nets[name] += 1
                    kind_offsets.append(offset)
    for n in site.networks:
        if n.gateway is not None:
            used[n.name].add(int(ipaddress.IPv4Address(str(n.gateway)))
                             - int(n.cidr.network_address))
    if not block_offsets:
        block_nets, block_offsets = kind_nets, kind_offsets
    names = list(wanted) if wanted else [n for n in nets if block_nets[n]] or [
        n.name for n in site.networks if n.kind.value == "management"]
    for name in names:
        if name not in nets:
            raise ConfigError(f"no network {name!r} in the site",
                              hint=f"networks: {', '.join(nets)}")

    def free(name: str, offset: int) -> bool:
        size = nets[name].cidr.num_addresses
        return 0 < offset < size - 1 and offset not in used[name]

    sizes = [nets[k].cidr.num_addresses for k in names]
    start = max(block_offsets) + 1 if block_offsets else 1
    for offset in [*range(start, min(sizes) - 1), *range(1, start)]:
        if all(free(k, offset) for k in names):
            return {k: str(nets[k].cidr.network_address + offset) for k in names}
    out: dict[str, str] = {}
    for k in names:
        alone = next((o for o in range(1, nets[k].cidr.num_addresses - 1) if free(k, o)),
                     None)
        if alone is None:
            raise ConfigError(f"network {k} ({nets[k].cidr}) has no free address")
        out[k] = str(nets[k].cidr.network_address + alone)
    return out


def links_of(site: Site, catalog: dict[str, BlockType], host: str
             ) -> tuple[tuple[str, str, str], ...]:
    """The switch ports the site's cabling gives the host (rules and explicit links)."""
    return tuple((link.nic, link.switch, link.switch_port)
                 for link in cabling.resolve(site, catalog) if link.node == host)


def propose(site: Site, catalog: dict[str, BlockType], block_name: str, bmc: Bmc, *,
            mgmt_mac: str | None = None, rack: str | None = None, u: int | None = None,
            name: str | None = None) -> Proposal:
    """Rack, U, host name, addresses and switch ports for one new node of `block_name`."""
    block = catalog.get(block_name)
    if block is None:
        raise ConfigError(f"no block {block_name!r} in the catalog",
                          hint="`provision catalog` lists them")
    if block.kind is BlockKind.SWITCH:
        raise ConfigError(f"{block_name} is a switch; `provision add` adds servers")
    chosen, checked = choose_rack(site, catalog, block, rack, u)
    assert chosen.u is not None
    host = name or hostname(site, catalog, block)
    if any(n.hostname == host for p in site.placements for n in p.nodes):
        raise ConfigError(f"host name {host} is taken", hint="choose another with --name")
    addrs = addresses(site, catalog, block)
    mgmt = next((n.name for n in site.networks if n.kind.value == "management"), None)
    macs = {mgmt: mgmt_mac} if mgmt and mgmt_mac else {}
    draft = Proposal(host, block.name, chosen.rack, chosen.u, addrs, macs, bmc, (), chosen,
                     checked)
    grown = site.model_copy(update={"placements": (*site.placements, draft.placement())})
    return Proposal(host, block.name, chosen.rack, chosen.u, addrs, macs, bmc,
                    links_of(grown, catalog, host), chosen, checked)
