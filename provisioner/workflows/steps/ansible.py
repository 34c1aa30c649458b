"""Ansible step: a playbook of the rendered project over one batch of hosts, each host's
outcome recorded from ansible-runner's per-host result."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner import render as render_mod
from provisioner import runner as runner_mod
from provisioner.errors import StateError
from provisioner.execution import dispatch
from provisioner.lifecycle import Phase
from provisioner.workflows.engine import Progress
from provisioner.workflows.steps import Context


def project(ctx: Context) -> Path:
    """The rendered project for this run (rendered once, on first use, beside the state)."""
    if ctx.project_dir is None:
        ctx.project_dir = render_mod.render(ctx.loaded,
                                            ctx.profile.state_path.parent / "ansible",
                                            lab=ctx.profile.lab).out
    return ctx.project_dir


RUN_VARS = "zz_run.yml"  # in the project's inventory/: what the run knows, per batch
# Phases in which a node has not (or not successfully) run the roles in this run.
UNCONFIGURED = frozenset({Phase.DISCOVERED, Phase.ENROLLED, Phase.INSPECTED, Phase.BOOTING,
                          Phase.OS_READY, Phase.FAILED})


def run_vars(ctx: Context, batch: Sequence[str]) -> dict[str, Any]:
    """The control planes outside this batch that the run could not configure (failed, or
    not installed yet) and, of them, those no run ever configured (the state store's word):
    the kubernetes role delegates to none of them and starts no cluster on them, and the
    second kind cannot hold a cluster (roles/kubernetes/defaults/main.yml)."""
    store = ctx.journal.store
    unavailable, never = [], []
    for host in sorted(h for h, p in ctx.plans.items() if p.control_plane and h not in batch):
        try:
            phase = store.node(host).phase
        except StateError:
            phase = Phase.DISCOVERED  # not enrolled: never installed by the tool
        if phase in UNCONFIGURED:
            unavailable.append(host)
            if not any(e.to_phase == Phase.CONFIGURED.value for e in store.events(host)):
                never.append(host)
    return {"kubernetes_unavailable_control_planes": unavailable,
            "kubernetes_never_configured_control_planes": never}


def write_run_vars(ctx: Context, proj: Path, batch: Sequence[str]) -> None:
    """inventory/zz_run.yml for this batch (read with the inventory, locally and on an
    execution node alike)."""
    (proj / "inventory" / RUN_VARS).write_text(
        "# Written by provisioner up for one batch (steps/ansible.py run_vars)\n"
        + yaml.safe_dump({"all": {"vars": run_vars(ctx, batch)}}, sort_keys=True))


def playbook_detail(result: runner_mod.RunResult, host: str) -> dict[str, Any]:
    """What a playbook did on one host: counts, and the checks it could not make."""
    stats = result.hosts.get(host)
    mine = [e for e in result.events if e.host == host]
    detail: dict[str, Any] = {
        "playbook": result.playbook,
        "changed": len([e for e in mine if e.status == "changed" and not e.check_mode]),
        "simulated": len([e for e in mine if e.check_mode]),
        "ok": stats.ok if stats else 0,
    }
    not_verified = [e.message for e in mine if e.message.startswith("not verified:")]
    if not_verified:
        detail["not_verified"] = not_verified
    checks_ok = [e.task for e in mine if e.task.startswith("Verify") and e.status == "ok"]
    if checks_ok:
        detail["checks"] = checks_ok
    return detail


@dataclass
class Playbook:
    """A batch runner for the engine's batch stage: `playbook` over the batch, moving each
    host that passed from `source` to `target` through `step`. A stop request lets the
    playbook run to its end (never interrupt dpkg on a node) and its outcomes are recorded;
    only `ctx.abort` cancels it, and then its hosts are recorded interrupted."""

    ctx: Context
    playbook: str
    step: str
    source: Phase
    target: Phase
    forks: int
    # Safe to run twice on a host (the roles are idempotent): a lost execution node's
    # hosts may then run again on another node.
    idempotent: bool = True
    # Run over the hosts that passed, before they move: the hosts it returns (with why)
    # fail instead (`add` in the lab: the join in check mode, steps/join.py).
    then: Callable[[list[str]], Mapping[str, str]] | None = None

    def __call__(self, batch: list[str]) -> None:
        ctx = self.ctx
        proj = project(ctx)
        write_run_vars(ctx, proj, batch)
        for h in batch:
            ctx.journal.emit(Progress(h, self.step, "start", self.playbook))

        def on_task(ev: runner_mod.TaskEvent) -> None:
            ctx.journal.emit(Progress(ev.host, self.step, "task", f"{ev.status}: {ev.task}"
                                      + (f" - {ev.message}" if ev.message else "")))

        t0 = time.monotonic()
        if ctx.loaded.site.provisioning.execution.nodes:
            self._distributed(proj, batch, on_task)
        else:
            result = runner_mod.run_playbook(proj, self.playbook, limit=",".join(batch),
                                             forks=self.forks, on_event=on_task,
                                             cancel=ctx.abort.is_set)
            ctx.artifact_dirs.append(result.artifact_dir)
            self.apply(result, batch)
        ctx.ansible_s += time.monotonic() - t0

    def _distributed(self, proj: Path, batch: list[str], on_task: runner_mod.EventFn) -> None:
        """The batch split by rack across the execution nodes (execution/dispatch.py)."""
        ctx, journal = self.ctx, self.ctx.journal

        def record(a: dispatch.Attempt, number: int) -> None:
            for h in a.hosts:
                journal.store.record(h, "execution", {
                    "step": self.step, "playbook": self.playbook, "worker": a.worker,
                    "attempt": number, "lost": a.lost,
                    "artifact_dir": a.result.artifact_dir if a.result else None},
                    run_id=journal.run_id)
            if a.lost is not None:
                journal.note(None, self.step, "execution_lost", a.lost)

        # The control planes first, in one share: kubeadm init before any join, one
        # certificate upload for the control-plane joins; then the rest, split as usual.
        cps = [h for h in batch if ctx.plans[h].control_plane]
        rest = [h for h in batch if h not in cps]
        outcomes: list[dispatch.ShareOutcome] = []
        for group in (cps, rest):
            if group:
                outcomes += dispatch.run_batch(
                    ctx.loaded.site.provisioning.execution,
                    {h: p.placement.rack for h, p in ctx.plans.items()}, proj, self.playbook,
                    group, idempotent=self.idempotent, forks=self.forks, on_event=on_task,
                    cancel=ctx.abort.is_set, record=record, together=cps,
                    lost=ctx.lost_workers)
        for out in outcomes:
            final = out.final
            if final.result is not None:
                ctx.artifact_dirs.append(final.result.artifact_dir)
                self.apply(final.result, out.hosts, worker=final.worker)
                continue
            why = "; ".join(a.lost or "" for a in out.attempts)
            if len(out.attempts) == 1 and not self.idempotent:
                why += f" ({self.playbook} is not safe to repeat: not retried)"
            for h in out.hosts:
                journal.fail(h, self.step, why)

    def apply(self, result: runner_mod.RunResult, batch: list[str],
              worker: str | None = None) -> None:
        journal, step = self.ctx.journal, self.step
        where = f" on execution node {worker}" if worker else ""
        passed: dict[str, dict[str, Any]] = {}
        for h in batch:
            failure = result.failure_of(h)
            if failure is not None:
                journal.fail(h, step, f"{failure.describe()} (log{where}: "
                             f"{result.artifact_dir})")
            elif result.status == "canceled":  # aborted (a second Ctrl-C), not just stopped
                journal.stopped(h, step, "playbook canceled")
            elif not result.ok and not result.any_host_failed:
                journal.fail(h, step, f"{result.playbook} ended {result.status} (rc "
                             f"{result.rc}) without a task failure; see {result.artifact_dir}")
            elif not result.ok and result.aborted:
                journal.note(h, step, "not_finished", "the playbook stopped after another "
                             "host failed; this node runs again next time")
            else:
                passed[h] = playbook_detail(result, h) | ({"worker": worker} if worker else {})
        failed = self.then(list(passed)) if passed and self.then is not None else {}
        for h, detail in passed.items():
            if h in failed:
                journal.fail(h, step, failed[h])
            else:
                journal.move(h, self.target, step, detail)
