"""`provision add` as one workflow, in order: the node's source (a BMC probed now, or a row
`discover` recorded), its place and inventory change (discover/add: rack and U within the
budgets, name, addresses, switch ports), the change written and the node enrolled, then
`up` limited to that node (its fabric step pushes the new node's switch ports alone).

The CLI parses and prints; what differs in the lab (the emulator answering for the new BMC)
is a step the CLI hands in (`adopt`), so nothing here asks whether a lab runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from provisioner import discover as discover_mod
from provisioner.discover import add as add_mod
from provisioner.discover import writeback
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import Tls
from provisioner.profile import Profile
from provisioner.state import StateStore
from provisioner.workflows import up as up_mod
from provisioner.workflows.up import ProgressFn


@dataclass(frozen=True)
class AddOptions:
    bmc: str | None = None  # the new node's BMC address, probed now
    discovered: str | None = None  # or a node `provision discover` recorded
    block: str | None = None
    rack: str | None = None
    u: int | None = None
    name: str | None = None
    mac: str | None = None  # the management (PXE) NIC, when the BMC cannot say
    credentials: str | None = None
    redfish_port: int | None = None
    scheme: str = "https"
    tls_verify: bool = True
    apply: bool = False  # write the change and enroll the node
    bring_up: bool = True  # with apply: `up` limited to the node


@dataclass
class AddRun:
    added: add_mod.AddResult
    up: up_mod.UpResult | None = None


def source_of(loaded: LoadedSite, store: StateStore, env: Mapping[str, str],
              opts: AddOptions, warn: Callable[[str], None]) -> add_mod.Source:
    """The node to add, from the recorded discovery or a probe of its BMC (`warn` hears,
    before the probe, that it sends credentials over plain HTTP)."""
    login = opts.credentials or discover_mod.default_credentials(loaded)
    if opts.discovered is not None:
        source = add_mod.from_discovered(store, opts.discovered, login)
    else:
        assert opts.bmc is not None
        plan = discover_mod.ProbePlan(
            addresses=discover_mod.addresses([f"{opts.bmc}/32"], []),
            redfish_ports=(opts.redfish_port or (443 if opts.scheme == "https" else 80),),
            scheme=opts.scheme, timeout_s=3.0, concurrency=2)
        if (plain := discover_mod.plain_http_warning(plan)) is not None:
            warn(plain)
        source = add_mod.from_bmc(loaded, env, store, plan, login,
                                  Tls(verify=opts.tls_verify))
    if opts.mac is not None:
        source = add_mod.named_mac(source, opts.mac)
    return source


# What the CLI opens around the new node's `up` once its name is known: the progress view
# and the Ctrl-C handling (stop: start nothing new; abort: cancel the playbook).
Attach = Callable[[str], AbstractContextManager[tuple[ProgressFn | None, threading.Event,
                                                      threading.Event]]]


def run(loaded: LoadedSite, store: StateStore, env: Mapping[str, str], opts: AddOptions,
        profile: Profile, *, reload: Callable[[], LoadedSite],
        adopt: Callable[[LoadedSite, add_mod.AddResult], LoadedSite] | None = None,
        attach: Attach | None = None, warn: Callable[[str], None] = lambda _: None
        ) -> AddRun:
    """Place the node and, with `opts.apply`, write and enroll it; then bring it up. The
    grown site is read once, by `reload` (the change is on disk); `adopt`, where given,
    returns it as the run acts on it (the lab: its emulator for the new BMC)."""
    if opts.mac is not None:
        add_mod.parse_mac(opts.mac)  # a typo is refused before any BMC is probed
    source = source_of(loaded, store, env, opts, warn)
    added = add_mod.add(loaded, store, source, block=opts.block, rack=opts.rack, u=opts.u,
                        name=opts.name, credentials=opts.credentials, lab=profile.lab,
                        apply=opts.apply)
    done = AddRun(added)
    if not opts.apply:
        return done
    grown = reload()
    if adopt is not None:
        grown = adopt(grown, added)
    if not opts.bring_up:
        return done
    host = added.proposal.hostname
    with (attach(host) if attach is not None
          else nullcontext((None, threading.Event(), threading.Event()))) as (progress, stop,
                                                                             abort):
        done.up = up_mod.up(grown, env, up_mod.UpOptions(limit=host, adding=True),
                            progress=progress, stop=stop, abort=abort, profile=profile)
    return done


def write_patch(added: add_mod.AddResult, path: Path | None) -> None:
    """Without --yes: the inventory change as a patch file for review."""
    added.patch = path or Path(f"add-{added.proposal.hostname}.patch")
    writeback.write_patch(added.change, added.patch)
