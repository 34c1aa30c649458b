"""provision add: place one discovered (or named) BMC's node, write it into the inventory,
and bring up that node alone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from provisioner import discover as discover_mod
from provisioner import profile as profile_mod
from provisioner import results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    graceful_stop,
    handle_errors,
    load_checked,
)
from provisioner.console.discover import add_summary
from provisioner.discover import add as add_mod
from provisioner.discover import writeback
from provisioner.errors import ConfigError, ExitCode
from provisioner.inventory.models import Tls
from provisioner.state import StateStore
from provisioner.workflows import up as up_mod


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
    if mac is not None:
        add_mod.parse_mac(mac)  # a typo is refused before any BMC is probed
    loaded = load_checked(site)
    prof = profile_mod.for_site(loaded)
    store = StateStore(prof.state_path)
    login = credentials or discover_mod.default_credentials(loaded)
    if discovered is not None:
        source = add_mod.from_discovered(store, discovered, login)
    else:
        assert bmc is not None
        plan = discover_mod.ProbePlan(
            addresses=discover_mod.addresses([f"{bmc}/32"], []),
            redfish_ports=(redfish_port or (443 if scheme == "https" else 80),),
            scheme=scheme, timeout_s=3.0, concurrency=2)
        if (plain := discover_mod.plain_http_warning(plan)) is not None:
            console(json_out).warn(plain)
        source = add_mod.from_bmc(loaded, os.environ, store, plan, login,
                                  Tls(verify=not insecure))
    if mac is not None:
        source = add_mod.named_mac(source, mac)
    result = add_mod.add(loaded, store, source, block=block, rack=rack, u=u, name=name,
                         credentials=credentials, lab=prof.lab, apply=yes)
    if not yes:
        result.patch = patch or Path(f"add-{result.proposal.hostname}.patch")
        writeback.write_patch(result.change, result.patch)
    report = results.add_report(loaded.site.site.name, result, block_named=block is not None)
    out = console(json_out)
    code = ExitCode.OK
    host = result.proposal.hostname
    if yes and prof.lab:
        from provisioner.lab import unknown

        found_at = source.bmc  # the emulator's loopback endpoint discovery found
        unknown.adopt(load_checked(site), host, found_at.address,
                      found_at.endpoint_key()[1])
    if yes and not no_up:
        grown = load_checked(site)
        with graceful_stop("stopping: `provision up --limit " + host + "` resumes",
                           "aborting") as stop, out.up_progress(
                [host], live=False, json_events=False) as progress:
            up = up_mod.up(grown, os.environ, up_mod.UpOptions(limit=host, adding=True),
                           progress=progress, stop=stop, abort=stop.abort,
                           profile=profile_mod.for_site(grown))
        report = report.model_copy(update={"up": results.up_report(up)})
        code = (ExitCode.INTERRUPTED if up.interrupted
                else ExitCode.NODES_FAILED if up.failed else ExitCode.OK)
        if not json_out:
            add_summary(out, report)
            out.up_result(up)
    elif not json_out:
        add_summary(out, report)
    if json_out:
        out.emit_json(results.dump(report))
    raise typer.Exit(int(code))
