"""provision discover: find BMCs the inventory does not know and say what they are."""

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
    handle_errors,
    load_checked,
)
from provisioner.console.discover import discover_table
from provisioner.discover import leases as leases_mod
from provisioner.errors import ConfigError
from provisioner.inventory.models import Tls
from provisioner.state import StateStore


@handle_errors
def discover(
    site: SiteArg = None,
    ranges: Annotated[list[str] | None, typer.Option(
        "--range", help="CIDR range to probe (repeatable), e.g. 10.250.1.0/24.")] = None,
    from_leases: Annotated[Path | None, typer.Option(
        "--from-leases", help="The provisioning dnsmasq's lease file: probe its "
        "addresses.")] = None,
    redfish_ports: Annotated[list[int] | None, typer.Option(
        "--redfish-port", min=1, max=65535, help="Redfish port(s) to probe (default 443).")]
    = None,
    scheme: Annotated[str, typer.Option(
        "--scheme", help="https (real BMCs) or http (the lab).")] = "https",
    ipmi_port: Annotated[int, typer.Option(
        "--ipmi-port", min=0, max=65535, help="IPMI UDP port to ping (0: no IPMI probe).")]
    = 623,
    credentials: Annotated[str | None, typer.Option(
        "--credentials", help="Credentials entry to read new BMCs with (default: the one "
        "the site's BMCs share).")] = None,
    timeout_s: Annotated[float, typer.Option(
        "--timeout", min=0.1, max=30, help="Seconds one probe may take.")] = 1.0,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=1, max=256, help="Probes in flight at once.")] = 32,
    rate: Annotated[float, typer.Option(
        "--rate", min=0.1, max=10_000, help="New probes started per second, at most.")]
    = 100.0,
    insecure: Annotated[bool, typer.Option(
        "--tls-no-verify", help="Read facts from BMCs whose certificate is self-signed "
        "(the login is then sent to an unverified endpoint).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Find BMCs the inventory does not know (Redfish service root, RMCP ping), read their
    hardware with the site's BMC login, match each to a catalog block, and record them as
    `discovered`. Exit 0 (also when none is found), 2 on bad options, 5 if a found BMC
    could not be read."""
    if scheme not in ("https", "http"):
        raise ConfigError(f"--scheme {scheme!r}: https or http")
    if not ranges and from_leases is None:
        raise ConfigError("discover: say where to look", hint="--range CIDR and/or "
                          "--from-leases FILE (the provisioning dnsmasq's leases)")
    loaded = load_checked(site)
    leases = leases_mod.read(from_leases) if from_leases else []
    plan = discover_mod.ProbePlan(
        addresses=discover_mod.addresses(ranges or [], leases),
        redfish_ports=tuple(redfish_ports or [443 if scheme == "https" else 80]),
        scheme=scheme, ipmi_port=ipmi_port or None, timeout_s=timeout_s,
        concurrency=concurrency, rate_per_s=rate)
    if (plain := discover_mod.plain_http_warning(plan)) is not None:
        console(json_out).warn(plain)
    store = StateStore(profile_mod.for_site(loaded).state_path)
    result = discover_mod.discover(loaded, os.environ, store, plan, leases=leases,
                                   credentials=credentials, tls=Tls(verify=not insecure))
    report = results.discover_report(loaded.site.site.name, result)
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(report))
    else:
        discover_table(out, report)
    if any(n.error for n in report.nodes):
        raise typer.Exit(5)
