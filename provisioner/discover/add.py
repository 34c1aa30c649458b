"""`provision add`: turn one discovered (or named) BMC into an inventory node.

The node's block comes from discovery's fingerprint (or --block); place.py chooses the rack,
U, host name, addresses and switch ports within the budgets; writeback.py makes the
inventory change. Before anything is written, the added text must read back as the
proposed placement and the grown site must pass the site's own checks with no new error.
With `apply`, the file is replaced and the discovered node becomes the host in the state
store, moving on to enrolled (StateStore.adopt: its discovery id's events stay, the last
one `added`), ready for `up --limit`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from provisioner import discover as discover_mod
from provisioner.discover import place, writeback
from provisioner.errors import ConfigError, InventoryError, StateError
from provisioner.inventory import checks
from provisioner.inventory.fields import Mac
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import Bmc, NetworkKind, Placement, Tls
from provisioner.inventory.topology import nvlink_domain
from provisioner.inventory.valid import refusing
from provisioner.lifecycle import Phase
from provisioner.state import StateStore


@dataclass(frozen=True)
class Source:
    """What is known of the new node before placement (from discovery's event)."""

    id: str | None  # the discovered id, when it came from the state store
    bmc: Bmc
    block: str | None
    confidence: float | None
    reasons: tuple[str, ...]
    mgmt_mac: str | None
    serial: str | None
    # How the management MAC is known (the BMC's word, or the lease), or why it is not.
    mgmt_mac_how: str | None = None


@dataclass
class AddResult:
    source: Source
    proposal: place.Proposal
    change: writeback.Change
    applied: bool
    patch: Path | None = None
    # The NVLink domain's other IMEX nodes: their nodes_config.cfg lists the new node only
    # once `up` runs on them (imex_peers).
    imex_peers: tuple[str, ...] = ()


def from_discovered(store: StateStore, ident: str, credentials: str) -> Source:
    """The discovered node's endpoint, facts and block, from its discovery event."""
    events = store.events(ident)
    added = [e for e in events if e.kind == "added"]
    if added:
        raise ConfigError(f"--discovered {ident} was added already as "
                          f"{added[-1].detail.get('hostname')}")
    try:
        st = store.node(ident)
    except StateError:
        raise ConfigError(f"--discovered {ident}: no such discovered node",
                          hint="`provision discover` lists them") from None
    if st.phase is not Phase.DISCOVERED:
        raise ConfigError(f"--discovered {ident} is {st.phase.value}, not discovered")
    seen = [e for e in events if e.kind == "discovery"]
    if not seen:
        raise ConfigError(f"--discovered {ident}: no discovery record",
                          hint="run `provision discover` again")
    return _source(ident, seen[-1].detail, credentials)


def _source(ident: str | None, d: Mapping[str, Any], credentials: str) -> Source:
    ep = d["bmc"]
    scheme = ep.get("scheme") or "https"
    default_port = 623 if ep["protocol"] == "ipmi" else 443 if scheme == "https" else 80
    facts = d.get("facts") or {}
    mac, how = management_mac(facts, d.get("lease_mac"))
    return Source(
        id=ident,
        bmc=Bmc(protocol=ep["protocol"], address=ep["address"],
                port=None if ep["port"] == default_port else ep["port"],
                scheme=scheme if ep["protocol"] == "redfish" else "https",
                credentials=credentials),
        block=d.get("block"), confidence=d.get("confidence"),
        reasons=tuple(d.get("reasons") or ()),
        mgmt_mac=mac, serial=facts.get("serial"), mgmt_mac_how=how)


def management_mac(facts: Mapping[str, Any], lease_mac: str | None
                   ) -> tuple[str | None, str]:
    """The MAC the provisioning DHCP server must know the node by, and how it is known:
    the NIC the BMC says network-boots, else the discovery lease's MAC; never a MAC by its
    sort order (a GPU node's RoCE ports often sort before its management NIC, and a DHCP
    reservation on one of them leaves the node unable to PXE-boot)."""
    if facts.get("mgmt_mac"):
        return str(facts["mgmt_mac"]), f"the BMC says so: {facts.get('mgmt_mac_how')}"
    if lease_mac:
        return lease_mac, "the DHCP lease discovery found the node by"
    if "mgmt_mac" not in facts and facts.get("macs"):
        return None, ("its discovery record predates reading the management NIC: run "
                      "`provision discover` again")
    return None, str(facts.get("mgmt_mac_how") or "the BMC reports no NIC")


NAMED_BY_OPERATOR = "the operator named it (--mac)"


def parse_mac(mac: str) -> str:
    """`--mac` checked as the inventory checks a MAC (before any BMC is probed), in the
    inventory's form: lower case, colons."""
    try:
        return TypeAdapter(Mac).validate_python(mac)
    except ValidationError as exc:
        why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"--mac {mac!r}: {why}") from None


def named_mac(source: Source, mac: str) -> Source:
    """The operator's `--mac`: the management (PXE) NIC for a node whose BMC cannot say and
    whose discovery no lease names, recorded as the BMC's answer is (macs.<management
    network> in the inventory; the MAC and how it is known in the enroll event). One that
    differs from what the BMC or the lease says is refused: one of the two is wrong, and a
    DHCP reservation on the wrong NIC leaves the node unable to network-boot."""
    norm = parse_mac(mac)
    if source.mgmt_mac is not None and source.mgmt_mac != norm:
        raise ConfigError(
            f"--mac {norm} is not the management NIC discovery knows: {source.mgmt_mac} "
            f"({source.mgmt_mac_how}); nothing was written",
            hint="drop --mac to use that one, or correct the BMC's network boot order and "
            "run `provision discover` again")
    if source.mgmt_mac == norm:
        return source
    return dataclasses.replace(source, mgmt_mac=norm, mgmt_mac_how=NAMED_BY_OPERATOR)


def from_bmc(loaded: LoadedSite, env: Mapping[str, str], store: StateStore,
             plan: discover_mod.ProbePlan, credentials: str | None, tls: Tls) -> Source:
    """Discover the one address now (probe, facts, fingerprint, recorded as discovered)."""
    found = discover_mod.discover(loaded, env, store, plan, credentials=credentials, tls=tls)
    if not found.nodes:
        raise ConfigError(f"--bmc {plan.addresses[0]}: no BMC the inventory does not "
                          "already know answers there",
                          hint="check the address, --scheme and --redfish-port")
    node = found.nodes[0]
    if node.error:
        raise ConfigError(f"--bmc {plan.addresses[0]}: {node.error}")
    return from_discovered(store, node.id, found.credentials or "")


def _checked(loaded: LoadedSite, proposal: place.Proposal,
             change: writeback.Change) -> None:
    """The text added parses (YAML 1.1, as the loader reads it) to exactly the proposed
    placement, and the site grown by it has no error it did not have: refused otherwise.

    The grown site is checked in memory (the site's own checks, on the site as loaded plus
    the new placement), not re-parsed: re-reading a 1,000-node site would double the cost
    of an addition for nothing the first two checks do not already prove.
    """
    added = "".join(line[1:] for line in change.diff.splitlines(keepends=True)[2:]
                    if line.startswith("+"))
    parsed = yaml.safe_load(textwrap.dedent(added))
    if not (isinstance(parsed, list) and len(parsed) == 1
            and Placement.model_validate(parsed[0]) == proposal.placement()):
        raise InventoryError(f"{change.display}: the text to add does not read back as the "
                             "proposed placement; nothing was written")
    # the findings that refuse any command (valid.refusing); a budget the node would break
    # (its rack's, or an upstream circuit's) place.choose_rack refused first (exit 4)
    before = {(f.code, f.message) for f in refusing(checks.check(loaded))}
    site = loaded.site.model_copy(
        update={"placements": (*loaded.site.placements, proposal.placement())})
    grown = dataclasses.replace(loaded, site=site)
    new = [f for f in refusing(checks.check(grown)) if (f.code, f.message) not in before]
    if new:
        raise InventoryError(f"adding the node would make the inventory invalid: "
                             f"{new[0].message}; nothing was written", findings=new)


def _lab_bmc(loaded: LoadedSite, proposal: place.Proposal) -> place.Proposal:
    """In the lab the new BMC answers on loopback; the inventory gets the out-of-band
    address a real one would have (the host number of its management address, the example
    site's convention) and the lab's overlay maps the host to the emulator (lab/unknown)."""
    nets = {n.kind: n for n in reversed(loaded.site.networks)}
    oob, mgmt = nets.get(NetworkKind.OOB), nets.get(NetworkKind.MANAGEMENT)
    try:
        loopback = ipaddress.ip_address(proposal.bmc.address).is_loopback
    except ValueError:
        loopback = False
    if not loopback or oob is None or mgmt is None or mgmt.name not in proposal.addresses:
        return proposal
    host_no = int(ipaddress.IPv4Address(proposal.addresses[mgmt.name])) \
        - int(mgmt.cidr.network_address)
    bmc = proposal.bmc.model_copy(update={
        "address": str(oob.cidr.network_address + host_no), "port": None,
        "scheme": "https"})
    return dataclasses.replace(proposal, bmc=bmc)


def imex_peers(loaded: LoadedSite, proposal: place.Proposal) -> tuple[str, ...]:
    """The other IMEX nodes of the new node's NVLink domain (its rack: `add` names no
    domain). Every node of a domain lists all of its nodes in nodes_config.cfg (NVIDIA IMEX
    guide, "Deployment models"), and `add` configures the new node alone: rewriting a peer's
    list restarts its IMEX, which ends the domain's running multi-node jobs, so that waits
    for the operator's `up --limit` in a maintenance window."""
    new = loaded.catalog.get(proposal.block)
    if new is None or not new.imex:
        return ()
    domain = nvlink_domain(proposal.placement())
    return tuple(n.hostname for p in loaded.site.placements
                 if (b := loaded.catalog.get(p.block)) is not None and b.imex
                 and nvlink_domain(p) == domain for n in p.nodes)


def add(loaded: LoadedSite, store: StateStore, source: Source, *, block: str | None = None,
        rack: str | None = None, u: int | None = None, name: str | None = None,
        credentials: str | None = None, lab: bool = False, apply: bool = False
        ) -> AddResult:
    """Propose the node's place and inventory change; with `apply`, write and enroll it.

    The BMC's credentials entry written is `credentials`, else the one the site's files
    give its other BMCs (not the lab's login, which only the lab's overlay defines)."""
    chosen = block or source.block
    if chosen is None:
        raise ConfigError(
            "the node's shape matches no catalog block"
            + (f" ({'; '.join(source.reasons[:3])})" if source.reasons else ""),
            hint="name its block with --block after checking `provision catalog`")
    if source.mgmt_mac is None:
        raise ConfigError(
            "cannot tell the node's management (PXE) NIC, whose MAC the provisioning DHCP "
            f"server must know: {source.mgmt_mac_how or 'the BMC does not say'}; nothing "
            "was written",
            hint="name it with --mac MAC (the NIC that network-boots), discover it from "
            "the provisioning DHCP server's leases (`provision discover --from-leases`), or "
            "set the NIC that network-boots first in the BMC's boot order and run "
            "`provision discover` again")
    written = credentials or writeback.file_credentials(loaded, chosen) \
        or source.bmc.credentials
    bmc = source.bmc.model_copy(update={"credentials": written})
    proposal = place.propose(loaded.site, loaded.catalog, chosen, bmc,
                             mgmt_mac=source.mgmt_mac, rack=rack, u=u, name=name)
    if lab:
        proposal = _lab_bmc(loaded, proposal)
    change = writeback.plan_change(loaded, proposal)
    _checked(loaded, proposal, change)
    result = AddResult(source, proposal, change, applied=False,
                       imex_peers=imex_peers(loaded, proposal))
    if not apply:
        return result
    writeback.apply(change)
    result.applied = True
    run_id = store.start_run(f"add {proposal.hostname}")
    try:
        detail = {"discovered_as": source.id, "rack": proposal.rack, "u": proposal.u,
                  "block": proposal.block, "file": change.display,
                  "mgmt_mac": source.mgmt_mac, "mgmt_mac_how": source.mgmt_mac_how}
        if source.id is not None:  # the discovered row becomes the host (history kept)
            store.adopt(source.id, proposal.hostname, run_id=run_id, detail=detail)
        else:
            store.enroll([proposal.hostname], run_id, phase=Phase.DISCOVERED)
            store.transition(proposal.hostname, Phase.ENROLLED, run_id=run_id, detail=detail)
    finally:
        store.end_run(run_id, "ok")
    return result
