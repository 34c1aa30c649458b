"""provision upgrade plan | apply: move the site to a release bundle in rolling batches.

Never asks a question (CI runs it); `--json` prints the typed result. Exit codes: 0 every
selected node upgraded, 9 some nodes failed (or were left waiting) within the budget,
11 the plan was refused (nothing touched), 12 the failure budget was spent and the run
stopped, 13 the Kubernetes API failed, 130 interrupted (resumable).
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from provisioner import profile as profile_mod
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    graceful_stop,
    handle_errors,
    load_checked,
)
from provisioner.errors import ConfigError, ExitCode
from provisioner.results import dump
from provisioner.results.upgrade import UpgradeNode, plan_report, upgrade_report
from provisioner.secrets import Secret
from provisioner.upgrade.plan import PlanOptions
from provisioner.workflows.upgrade import apply as apply_mod
from provisioner.workflows.upgrade.rolling import DrainOptions

app = typer.Typer(help="Rolling upgrades to a release bundle (bundles/<name>.yaml).",
                  no_args_is_help=True)


class Fallback(StrEnum):
    none = "none"
    delete = "delete"


ToOpt = Annotated[str, typer.Option("--to", help="The bundle: bundles/<name>.yaml.")]
LimitOpt = Annotated[str | None, typer.Option(
    "--limit", "-l", help="Only these nodes: comma-separated globs, '!glob' excludes.")]
BatchOpt = Annotated[str, typer.Option(
    "--batch", help="Workers per batch: a number or a percentage (N or P%).")]
MaxUnavailOpt = Annotated[str, typer.Option(
    "--max-unavailable", help="Nodes of one failure domain down at once (N or P%); "
    "failed nodes count, they stay cordoned.")]
DomainOpt = Annotated[str | None, typer.Option(
    "--failure-domain", help="A node label whose value is the failure domain "
    "(default: the rack).")]
StateOpt = Annotated[Path | None, typer.Option(
    "--state", help="State database (default .provision/state.db beside the site; CI "
    "runners sharing a site point this at one persistent path).")]


def _plan_opts(batch: str, max_unavailable: str, domain: str | None) -> PlanOptions:
    return PlanOptions(batch=batch, max_unavailable=max_unavailable, domain_label=domain)


@app.command("plan")
@handle_errors
def plan_cmd(site: SiteArg = None, to: ToOpt = "", limit: LimitOpt = None,
             batch: BatchOpt = "10%", max_unavailable: MaxUnavailOpt = "1",
             failure_domain: DomainOpt = None, state: StateOpt = None,
             json_out: JsonOpt = False) -> None:
    """Check a bundle and say what would change where, in which batches, and how long it
    should take. Exit 11 when a rule refuses it."""
    if not to:
        raise ConfigError("--to BUNDLE is required", hint="for example --to 2026.11")
    loaded = load_checked(site)
    prof = apply_mod.state_file(profile_mod.for_site(loaded), state)
    the_plan, _ = apply_mod.plan(loaded, to, _plan_opts(batch, max_unavailable,
                                                        failure_domain), limit, prof)
    rep = plan_report(the_plan)
    out = console(json_out)
    if json_out:
        out.emit_json(dump(rep))
    else:
        for r in rep.refusals:
            out.err.print(f"[bold red]refused[/] {r.code}: {escape(r.message)}"
                          + (f" (hint: {escape(r.hint)})" if r.hint else ""))
        for w in rep.warnings + [f"cannot roll back: {x}" for x in rep.rollback]:
            out.out.print(f"[yellow]warning:[/] {escape(w)}")
        if rep.nothing_to_do:  # no order, batches or time of nothing
            out.out.print(escape(rep.summary))
        else:
            for c in rep.changes:
                where = f"{len(c.nodes)} node(s)" if c.nodes else "cluster"
                out.out.print(f"{c.component}: {c.old} -> {c.new} ({c.direction}, {where})")
            for m in rep.firmware:
                out.out.print(escape(f"firmware {m.hostname} {m.component}: "
                                     f"{m.old or 'unknown'} -> {m.new} ({m.direction}, "
                                     f"then {m.reset.replace('_', ' ')})"))
            out.out.print(f"order: {escape(rep.order)}")
            for i, b in enumerate(rep.batches, 1):
                out.out.print(f"batch {i}: {', '.join(b)}")
            out.out.print(f"max unavailable per domain: {rep.max_unavailable}; planned "
                          f"{rep.planned_s / 60:.0f} min for {len(rep.batches)} batch(es)")
    if not rep.ok:
        raise typer.Exit(int(ExitCode.UPGRADE_REFUSED))


def moved(node: UpgradeNode, not_started: list[str]) -> str:
    """A node's line in apply's summary: a move only where one happened."""
    if node.hostname in not_started:
        return f"{node.phase}, not started (the run stopped before its batch)"
    if not node.steps and node.start_phase == node.phase:
        return f"{node.phase}, untouched by this run"
    return f"{node.start_phase} -> {node.phase}"


@app.command("apply")
@handle_errors
def apply_cmd(site: SiteArg = None, to: ToOpt = "", limit: LimitOpt = None,
              batch: BatchOpt = "10%", max_unavailable: MaxUnavailOpt = "1",
              failure_domain: DomainOpt = None, state: StateOpt = None,
              max_failures: Annotated[int, typer.Option(
                  "--max-failures", min=1, help="Stop between batches once this many nodes "
                  "failed (the failure budget).")] = 1,
              drain_timeout: Annotated[float, typer.Option(
                  "--drain-timeout", min=1.0, help="Seconds to retry evictions a "
                  "PodDisruptionBudget blocks.")] = 600.0,
              gate_timeout: Annotated[float, typer.Option(
                  "--gate-timeout", min=0.0, help="Seconds the health gate waits for the "
                  "node to be Ready with its GPUs allocatable again after the roles and "
                  "the reboot.")] = 300.0,
              drain_fallback: Annotated[Fallback, typer.Option(
                  "--drain-fallback", help="After the drain timeout: 'none' fails the node "
                  "(it stays cordoned); 'delete' deletes the blocked pods (logged).")]
              = Fallback.none,
              drain_force: Annotated[bool, typer.Option(
                  "--drain-force", help="Evict pods no controller owns too (kubectl "
                  "drain's --force): nothing recreates them.")] = False,
              drain_delete_emptydir_data: Annotated[bool, typer.Option(
                  "--drain-delete-emptydir-data", help="Evict pods with emptyDir volumes "
                  "too (kubectl drain's option of that name): their data goes with them.")]
              = False,
              kube_api: Annotated[str | None, typer.Option(
                  "--kube-api", help="API server URL (the lab's stand-in, or a real one "
                  "with --kube-token-env).")] = None,
              kubeconfig: Annotated[Path | None, typer.Option(
                  "--kubeconfig", help="kubeconfig file for the API server.")] = None,
              kube_token_env: Annotated[str | None, typer.Option(
                  "--kube-token-env", help="Name of the environment variable holding a "
                  "bearer token for --kube-api (never the token itself).")] = None,
              kube_ca: Annotated[Path | None, typer.Option(
                  "--kube-ca", help="CA certificate the --kube-api server's certificate "
                  "must chain to (kubeadm's ca.crt in /etc/kubernetes/pki); default: the "
                  "system's CAs.")] = None,
              forks: Annotated[int, typer.Option(min=1, max=1000)] = 20,
              no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
              json_out: JsonOpt = False) -> None:
    """Upgrade the nodes to the bundle in rolling batches: cordon, drain, roles at the new
    versions, reboot, health gate, uncordon. Resumable; a failed node stays cordoned."""
    from provisioner.kube.official import OfficialClient

    if not to:
        raise ConfigError("--to BUNDLE is required", hint="for example --to 2026.11")
    if (kube_api is None) == (kubeconfig is None):
        raise ConfigError("give exactly one of --kube-api URL and --kubeconfig FILE")
    token = None
    if kube_token_env:
        value = os.environ.get(kube_token_env)
        if not value:
            raise ConfigError(f"environment variable {kube_token_env} is not set")
        token = Secret(value)
    if kube_ca is not None and kube_api is None:
        raise ConfigError("--kube-ca goes with --kube-api (a kubeconfig names its own CA)")
    kube = OfficialClient(kubeconfig=kubeconfig, url=kube_api, token=token, ca_file=kube_ca)
    loaded = load_checked(site)
    prof = apply_mod.state_file(profile_mod.for_site(loaded), state)
    opts = apply_mod.ApplyOptions(
        plan=_plan_opts(batch, max_unavailable, failure_domain), limit=limit,
        max_failures=max_failures, forks=forks, gate_timeout_s=gate_timeout,
        drain=DrainOptions(timeout_s=drain_timeout,
                           fallback_delete=drain_fallback is Fallback.delete,
                           force=drain_force,
                           delete_emptydir_data=drain_delete_emptydir_data))
    out = console(json_out)
    notice = ("stopping: the batch in flight finishes its step and is recorded; nodes stay "
              "cordoned where they are; `provision upgrade apply` resumes")
    with graceful_stop(notice) as stop, out.up_progress(
            [], live=False if no_progress else None) as progress:
        result = apply_mod.apply(loaded, to, kube, os.environ, opts, progress=progress,
                                 stop=stop, profile=prof)
    rep = upgrade_report(result)
    if json_out:
        out.emit_json(dump(rep))
    else:
        for n in rep.nodes:
            out.out.print(f"{n.hostname}: {moved(n, rep.not_started)}"
                          + (f" ({escape(n.reason)})" if n.reason else ""))
        for note in rep.notes:
            out.out.print(f"note: {escape(note)}")
        if rep.stopped:
            out.out.print(f"stopped: {escape(rep.stopped)}")
    code = (ExitCode.INTERRUPTED if rep.interrupted
            else ExitCode.FAILURE_BUDGET if rep.budget_spent
            else ExitCode.NODES_FAILED if rep.failed or rep.not_started else ExitCode.OK)
    raise typer.Exit(int(code))
