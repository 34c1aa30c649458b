"""JSON of `provision discover`, `provision add` and `provision lab add-unknown`
(plug-and-play, issue 13)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from provisioner.results.base import Out
from provisioner.results.workflow import UpReport

if TYPE_CHECKING:
    from provisioner.discover import DiscoverResult
    from provisioner.discover.add import AddResult
    from provisioner.lab.unknown import UnknownNode


class DiscoveredGpu(Out):
    model: str
    count: int


class DiscoveredNode(Out):
    id: str
    new: bool  # false: an earlier run recorded it already
    protocol: str
    address: str
    port: int
    lease_mac: str | None
    vendor: str | None
    model: str | None
    serial: str | None
    gpus: list[DiscoveredGpu]
    nvswitch_count: int | None
    macs: list[str]
    psus: int
    block: str | None  # null: unknown or ambiguous shape (see reasons)
    confidence: float | None
    reasons: list[str]
    candidates: list[tuple[str, float]]
    error: str | None


class DiscoverReport(Out):
    schema_: Literal["provisioner.discover/v1"] = Field("provisioner.discover/v1",
                                                        alias="schema")
    site: str
    probed_addresses: int
    known_skipped: int
    credentials: str | None  # the name of the login used (never its value)
    nodes: list[DiscoveredNode]


def discover_report(site: str, result: DiscoverResult) -> DiscoverReport:
    nodes = []
    for d in result.nodes:
        f, fp = d.facts, d.fingerprint
        nodes.append(DiscoveredNode(
            id=d.id, new=d.new, protocol=d.found.protocol, address=d.found.address,
            port=d.found.port, lease_mac=d.found.mac,
            vendor=f.vendor if f else d.found.vendor, model=f.model if f else None,
            serial=f.serial if f else None,
            gpus=[DiscoveredGpu(model=g.model, count=g.count) for g in f.gpus] if f else [],
            nvswitch_count=f.nvswitch_count if f else None,
            macs=list(f.macs) if f else [], psus=len(f.psus) if f else 0,
            block=fp.block if fp else None, confidence=fp.confidence if fp else None,
            reasons=list(fp.reasons) if fp else [],
            candidates=list(fp.candidates) if fp else [], error=d.error))
    return DiscoverReport(site=site, probed_addresses=result.probed,
                          known_skipped=result.known_skipped,
                          credentials=result.credentials, nodes=nodes)


class LabUnknownReport(Out):
    schema_: Literal["provisioner.lab-unknown/v1"] = Field("provisioner.lab-unknown/v1",
                                                           alias="schema")
    site: str
    name: str
    block: str
    address: str
    port: int
    scheme: str
    system_id: str
    mgmt_mac: str
    serial: str


def lab_unknown_report(site: str, node: UnknownNode) -> LabUnknownReport:
    return LabUnknownReport(site=site, name=node.name, block=node.block, address=node.address,
                            port=node.port, scheme=node.scheme, system_id=node.system_id,
                            mgmt_mac=node.mgmt_mac, serial=node.serial)


RESULTS: tuple[type[Out], ...] = (DiscoverReport, LabUnknownReport)


class AddLink(Out):
    nic: str
    switch: str
    switch_port: str


class AddRack(Out):
    rack: str
    u: int | None
    fits: bool
    load_w_after: float
    usable_va: float
    cooling_limit_w: float
    problems: list[str]


class AddReport(Out):
    schema_: Literal["provisioner.add/v1"] = Field("provisioner.add/v1", alias="schema")
    site: str
    discovered_id: str | None
    hostname: str
    block: str
    confidence: float | None  # the fingerprint's; null when --block named it
    rack: str
    u: int
    addresses: dict[str, str]
    macs: dict[str, str]
    bmc_address: str
    bmc_port: int | None
    links: list[AddLink]
    racks: list[AddRack]  # every rack looked at, with its budget after the addition
    file: str  # the inventory file changed (relative to the site)
    diff: str  # unified diff of that file
    applied: bool
    patch: str | None  # where the diff was written for review (without --yes)
    up: UpReport | None = None  # the bring-up of the new node alone (--yes without --no-up)
    # IMEX blocks: the NVLink domain's other nodes, whose nodes_config.cfg lists the new node
    # only after `provision up --limit` runs on them (their IMEX restarts)
    imex_peers_to_refresh: list[str] = Field(default_factory=list)


def add_report(site: str, result: AddResult, block_named: bool) -> AddReport:
    p = result.proposal
    return AddReport(
        site=site, discovered_id=result.source.id, hostname=p.hostname, block=p.block,
        confidence=None if block_named else result.source.confidence, rack=p.rack, u=p.u,
        addresses=p.addresses, macs=p.macs, bmc_address=p.bmc.address, bmc_port=p.bmc.port,
        links=[AddLink(nic=n, switch=s, switch_port=port) for n, s, port in p.links],
        racks=[AddRack(rack=f.rack, u=f.u, fits=f.ok, load_w_after=f.load_w_after,
                       usable_va=f.usable_va, cooling_limit_w=f.cooling_limit_w,
                       problems=list(f.failures)) for f in p.checked],
        file=result.change.display, diff=result.change.diff, applied=result.applied,
        patch=str(result.patch) if result.patch else None,
        imex_peers_to_refresh=list(result.imex_peers))


RESULTS = (*RESULTS, AddReport)
