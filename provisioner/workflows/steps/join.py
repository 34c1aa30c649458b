"""Join step of `provision add` in the lab: the cluster side of the join in check mode.

On a real site the join is part of the configure playbook (site.yml's kubernetes role: a
join token from the first control plane, kubeadm join, labels) and this step does not run.
The lab has no Kubernetes API server, so site.yml skips those tasks by their needs_cluster
tag; for a node `add` brings up, this step then runs them alone (playbooks/join.yml) with
Ansible's check mode and needs_cluster not skipped (the lab's other skip tags still apply):
the join configuration is templated for real and the delegated tasks reach the first
control plane, so an undefined variable or a wrong target fails the node; nothing changes
on either host. The new node's event says so, and the first control plane gets one event
(`join_delegated`): the only step the join runs on another node.
"""

from __future__ import annotations

from collections.abc import Mapping

from provisioner import runner as runner_mod
from provisioner.workflows.engine import Progress
from provisioner.workflows.steps import Context
from provisioner.workflows.steps.ansible import project

STEP = "join"
PLAYBOOK = "join.yml"
CLUSTER_TAG = "needs_cluster"
LAB_JOIN_NOTE = ("lab: the join ran in check mode (no Kubernetes API server in the lab): a "
                 "join token from the first control plane, kubeadm join and the node's labels "
                 "were templated and targeted for real, not applied")


def first_control_plane(ctx: Context) -> str | None:
    """What the role's kubernetes_first_control_plane is where no control plane holds a
    cluster (always in the lab, which has none; roles/kubernetes/tasks/holder.yml): the
    first of the kube_control_plane group (topology.groups sorts it)."""
    return min((h for h, p in ctx.plans.items() if p.control_plane), default=None)


def check_mode(ctx: Context, hosts: list[str], forks: int) -> Mapping[str, str]:
    """Run the join tasks over `hosts` in check mode; the hosts that failed, with why."""
    journal = ctx.journal
    via = first_control_plane(ctx)
    skip = [t for t in ctx.profile.skip_tags if t != CLUSTER_TAG]
    for h in hosts:
        journal.emit(Progress(h, STEP, "start", f"{PLAYBOOK} in check mode (lab)"))

    def on_task(ev: runner_mod.TaskEvent) -> None:
        journal.emit(Progress(ev.host, STEP, "task", f"{ev.status}: {ev.task}"))

    # ANSIBLE_SKIP_TAGS replaces the rendered ansible.cfg's [tags] skip for this run
    # only (Ansible's configuration reference: TAGS_SKIP; --skip-tags would add to it).
    result = runner_mod.run_playbook(
        project(ctx), PLAYBOOK, limit=",".join(hosts), forks=forks, check=True,
        envvars={"ANSIBLE_SKIP_TAGS": ",".join(skip)}, on_event=on_task,
        cancel=ctx.abort.is_set)
    ctx.artifact_dirs.append(result.artifact_dir)
    if LAB_JOIN_NOTE not in ctx.notes:
        ctx.notes.append(LAB_JOIN_NOTE)
    failed: dict[str, str] = {}
    for h in hosts:
        bad = result.failure_of(h)
        if bad is not None:
            failed[h] = f"join (check mode): {bad.describe()} (log: {result.artifact_dir})"
        elif not result.ok:
            failed[h] = (f"join (check mode): {PLAYBOOK} ended {result.status} (rc "
                         f"{result.rc}); see {result.artifact_dir}")
    joined = [h for h in hosts if h not in failed]
    for h in joined:
        mine = [e for e in result.events if e.host == h]
        journal.store.record(h, STEP, {
            "playbook": PLAYBOOK, "check_mode": True, "via": via,
            "tasks": {e.task: e.status for e in mine},
            "simulated": len([e for e in mine if e.check_mode])}, run_id=journal.run_id)
        journal.emit(Progress(h, STEP, "ok", f"check mode through {via}"))
    if joined and via is not None:
        journal.store.record(via, "join_delegated", {
            "for": joined, "check_mode": True, "playbook": PLAYBOOK,
            "why": "a join token and the node's labels come from the first control plane"},
            run_id=journal.run_id)
    return failed
