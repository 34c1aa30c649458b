"""provision up | plan | status: bring the site up, say what up would do, say where it is."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated

import typer

from provisioner import profile, results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    graceful_stop,
    handle_errors,
    load_checked,
)
from provisioner.errors import ExitCode
from provisioner.state import LIFECYCLE, Phase
from provisioner.workflows import report as report_mod
from provisioner.workflows import up as up_mod


class PhaseChoice(StrEnum):
    """The lifecycle phases --from-phase accepts (state.LIFECYCLE)."""

    enrolled = "enrolled"
    inspected = "inspected"
    booting = "booting"
    os_ready = "os_ready"
    configured = "configured"
    verified = "verified"
    ready = "ready"


assert [c.value for c in PhaseChoice] == [p.value for p in LIFECYCLE]


@handle_errors
def up(site: SiteArg = None,
       limit: Annotated[str | None, typer.Option(
           "--limit", "-l", help="Only these nodes: comma-separated globs, '!glob' excludes.")]
       = None,
       from_phase: Annotated[PhaseChoice | None, typer.Option(
           "--from-phase", help="Take nodes past this phase back to it and run on from there "
           "(for example os_ready re-runs the playbooks).")] = None,
       reinstall: Annotated[str | None, typer.Option(
           "--reinstall", help="Nodes the boot step may reinstall although they answer as "
           "installed (comma-separated globs); without it an installed node is refused.")]
       = None,
       adopt: Annotated[str | None, typer.Option(
           "--adopt", help="Nodes that already run the site's OS (a factory DGX OS): taken "
           "as installed, powered on from their own disk if off, never network-booted; the "
           "playbooks run over SSH (comma-separated globs).")] = None,
       allow_downgrade: Annotated[str | None, typer.Option(
           "--allow-downgrade", help="Nodes this run may configure at the site's pins "
           "although `upgrade apply` put a newer bundle on them (comma-separated globs); "
           "without it such a run is refused (exit 11).")] = None,
       forks: Annotated[int, typer.Option(min=1, max=1000,
                                          help="Hosts per playbook wave.")] = 20,
       concurrency: Annotated[int | None, typer.Option(
           min=1, max=4096, help="Nodes in the BMC and boot steps at once "
           "(default: the site's provisioning: concurrency).")] = None,
       os_timeout: Annotated[float | None, typer.Option(
           "--os-timeout", min=1.0, help="Seconds to wait for SSH after power on (default: "
           "the site's provisioning: os_timeout_s; 60 in the lab).")] = None,
       request_timeout: Annotated[float, typer.Option(
           "--request-timeout", min=0.5, help="Seconds for one BMC request.")] = 10.0,
       playbook: Annotated[str, typer.Option(
           help="Configure with this playbook of the rendered project.")] = "site.yml",
       verify_playbook: Annotated[str, typer.Option(
           help="Verify with this playbook (the checks that gate ready).")] = "verify.yml",
       no_progress: Annotated[bool, typer.Option(
           "--no-progress", help="One plain line per step, even on a terminal.")] = False,
       json_events: Annotated[bool, typer.Option(
           "--json-events", help="JSON lines on stdout as steps happen, then the result.")]
       = False,
       json_out: JsonOpt = False) -> None:
    """Bring every server from power-off to ready: check the rack budget, inspect through
    the BMC, network-boot, wait for the OS, run the playbooks, verify. Resumable."""
    loaded = load_checked(site)
    opts = up_mod.UpOptions(
        limit=limit, from_phase=Phase(from_phase.value) if from_phase else None, forks=forks,
        concurrency=concurrency, os_timeout_s=os_timeout, playbook=playbook,
        verify_playbook=verify_playbook, request_timeout_s=request_timeout,
        reinstall=reinstall, adopt=adopt, allow_downgrade=allow_downgrade)
    prof = profile.for_site(loaded)
    out = console(json_out or json_events)
    hosts = [s.hostname for s in up_mod.servers(loaded)]
    notice = ("stopping: steps in flight finish and are recorded, a playbook in flight runs "
              "to its end (Ctrl-C again to abort now); `provision up` resumes")
    abort_notice = ("aborting: the playbook in flight is canceled and its nodes are recorded "
                    "interrupted; `provision up` resumes")
    with graceful_stop(notice, abort_notice) as stop, out.up_progress(
            hosts, live=False if no_progress else None, json_events=json_events) as progress:
        result = up_mod.up(loaded, os.environ, opts, progress=progress, stop=stop,
                           abort=stop.abort, profile=prof)
    if json_out or json_events:
        out.emit_json(results.dump(results.up_report(result)))
    else:
        out.up_result(result)
    code = (ExitCode.INTERRUPTED if result.interrupted
            else ExitCode.NODES_FAILED if result.failed else ExitCode.OK)
    raise typer.Exit(int(code))


@handle_errors
def plan(site: SiteArg = None,
         refresh: Annotated[bool, typer.Option(
             "--refresh", help="Also ask every BMC for power state and hardware facts.")]
         = False,
         json_out: JsonOpt = False) -> None:
    """What `provision up` would do now, per node: add, resume, retry, unchanged, blocked."""
    loaded = load_checked(site)
    rep = report_mod.plan(loaded, refresh=refresh, env=os.environ,
                          profile=profile.for_site(loaded))
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(rep))
    else:
        out.plan(rep)


@handle_errors
def status(site: SiteArg = None, json_out: JsonOpt = False) -> None:
    """Every node's phase, when it last changed, failures with reasons, rack power in use."""
    loaded = load_checked(site)
    rep = report_mod.status(loaded, profile.for_site(loaded))
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(rep))
    else:
        out.status(rep)
