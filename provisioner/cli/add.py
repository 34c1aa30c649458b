"""provision add: place one discovered (or named) BMC's node, write it into the inventory,
and bring up that node alone."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from provisioner import profile as profile_mod
from provisioner import results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    graceful_stop,
    handle_errors,
    load_checked,
    resolve_site,
)
from provisioner.console.discover import add_summary
from provisioner.discover.add import AddResult
from provisioner.errors import ConfigError, ExitCode
from provisioner.inventory.loader import LoadedSite
from provisioner.lab import overlay, unknown
from provisioner.state import StateStore
from provisioner.workflows import add as add_wf
from provisioner.workflows.up import ProgressFn


@handle_errors
def add(
    site: SiteArg = None,
    bmc: Annotated[str | None, typer.Option(
        "--bmc", help="The new node's BMC address (probed and read now).")] = None,
    discovered: Annotated[str | None, typer.Option(
        "--discovered", help="A node `provision discover` recorded (its id).")] = None,
    block: Annotated[str | None, typer.Option(
        "--block", help="Catalog block, when the fingerprint is unknown or to override "
        "it.")] = None,
    rack: Annotated[str | None, typer.Option(
        "--rack", help="Rack to place it in (default: the first with room).")] = None,
    u: Annotated[int | None, typer.Option(
        "--u", min=1, max=60, help="Lowest rack unit (with --rack; default: the lowest "
        "free run).")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="Host name (default: next in the site's naming pattern).")] = None,
    mac: Annotated[str | None, typer.Option(
        "--mac", help="The management (PXE) NIC's MAC, when the BMC cannot say which NIC "
        "network-boots and no DHCP lease names it.")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", help="Write the change into the inventory and bring the node up.")] = False,
    patch: Annotated[Path | None, typer.Option(
        "--patch", help="Without --yes: write the diff here (default "
        "./add-HOSTNAME.patch).")] = None,
    no_up: Annotated[bool, typer.Option(
        "--no-up", help="With --yes: write and enroll only; bring up later with "
        "`provision up --limit HOST`.")] = False,
    redfish_port: Annotated[int | None, typer.Option(
        "--redfish-port", min=1, max=65535, help="With --bmc: Redfish port (default 443, "
        "80 for http).")] = None,
    scheme: Annotated[str, typer.Option(
        "--scheme", help="With --bmc: https (real BMCs) or http (the lab).")] = "https",
    credentials: Annotated[str | None, typer.Option(
        "--credentials", help="Credentials entry for the new BMC (default: the one the "
        "site's BMCs share).")] = None,
    insecure: Annotated[bool, typer.Option(
        "--tls-no-verify", help="With --bmc: read a BMC with a self-signed certificate.")]
    = False,
    json_out: JsonOpt = False,
) -> None:
    """Place a new node (rack and U within power, cooling and space; host name; addresses;
    switch ports), print the inventory diff, and with --yes write it and bring up that node
    alone. Exit 4 when no rack (or not --rack) has room, with the numbers."""
    if (bmc is None) == (discovered is None):
        raise ConfigError("add: name the node with exactly one of --bmc ADDR or "
                          "--discovered ID")
    if u is not None and rack is None:
        raise ConfigError("--u needs --rack")
    if scheme not in ("https", "http"):
        raise ConfigError(f"--scheme {scheme!r}: https or http")
    opts = add_wf.AddOptions(bmc=bmc, discovered=discovered, block=block, rack=rack, u=u,
                             name=name, mac=mac, credentials=credentials,
                             redfish_port=redfish_port, scheme=scheme,
                             tls_verify=not insecure, apply=yes, bring_up=not no_up)
    loaded = load_checked(site)
    prof = profile_mod.for_site(loaded)
    out = console(json_out)

    @contextmanager
    def attach(host: str) -> Iterator[tuple[ProgressFn | None, threading.Event,
                                            threading.Event]]:
        with graceful_stop("stopping: `provision up --limit " + host + "` resumes",
                           "aborting") as stop, out.up_progress(
                [host], live=False, json_events=False) as progress:
            yield progress, stop, stop.abort

    def adopt(grown: LoadedSite, added: AddResult) -> LoadedSite:
        """The lab's emulator answers for the new BMC (the one discovery found), and the
        site the run acts on has it (the lab's overlay, written again; the inventory itself,
        which `reload` has just checked, is unchanged)."""
        found_at = added.source.bmc
        unknown.adopt(grown, added.proposal.hostname, found_at.address,
                      found_at.endpoint_key()[1])
        return overlay.load(resolve_site(site))

    done = add_wf.run(loaded, StateStore(prof.state_path), os.environ, opts, prof,
                      reload=lambda: load_checked(site), adopt=adopt if prof.lab else None,
                      attach=attach, warn=out.warn)
    if not yes:
        add_wf.write_patch(done.added, patch)
    report = results.add_report(loaded.site.site.name, done.added,
                                block_named=block is not None)
    code = ExitCode.OK
    if done.up is not None:
        report = report.model_copy(update={"up": results.up_report(done.up)})
        code = (ExitCode.INTERRUPTED if done.up.interrupted
                else ExitCode.NODES_FAILED if done.up.failed else ExitCode.OK)
    if json_out:
        out.emit_json(results.dump(report))
    else:
        add_summary(out, report)
        if done.up is not None:
            out.up_result(done.up)
    raise typer.Exit(int(code))
