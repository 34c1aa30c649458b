"""JSON of `provision discover` and `provision lab add-unknown` (plug-and-play, issue 13)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from provisioner.results.base import Out

if TYPE_CHECKING:
    from provisioner.discover import DiscoverResult
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
