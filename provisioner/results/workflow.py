"""Results of the commands that act on nodes: up (and its events), run, bmc, render,
artifacts, lab."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from provisioner.results.base import Out

if TYPE_CHECKING:
    from provisioner.bmc import NodeResult
    from provisioner.lab import LabState
    from provisioner.runner import RunResult
    from provisioner.workflows.engine import Progress
    from provisioner.workflows.up import UpResult


# ---------------------------------------------------------------- provision up

class UpEvent(Out):
    """One line of `up --json-events`."""

    schema_: Literal["provisioner.up-event/v1"] = Field("provisioner.up-event/v1",
                                                        alias="schema")
    at: float
    node: str | None
    step: str
    status: str
    detail: str


class UpNode(Out):
    hostname: str
    start_phase: str
    phase: str
    failed_phase: str | None
    reason: str | None
    steps: list[str]


class UpReport(Out):
    schema_: Literal["provisioner.up/v1"] = Field("provisioner.up/v1", alias="schema")
    site: str
    ok: bool
    lab: bool
    run_id: int
    interrupted: bool
    nothing_to_do: bool
    elapsed_s: float
    ansible_s: float
    state_path: str
    project_dir: str | None
    artifact_dirs: list[str]
    skipped_by_tag: dict[str, int]  # tasks the profile skipped by tag (the lab), per tag
    notes: list[str]
    nodes: list[UpNode]


def up_event(p: Progress) -> UpEvent:
    return UpEvent(at=round(p.at, 3), node=p.node, step=p.step, status=p.status,
                   detail=p.detail)


def up_report(result: UpResult) -> UpReport:
    return UpReport(
        site=result.site, ok=result.ok, lab=result.lab, run_id=result.run_id,
        interrupted=result.interrupted, nothing_to_do=result.nothing_to_do,
        elapsed_s=round(result.elapsed_s, 2), ansible_s=round(result.ansible_s, 2),
        state_path=str(result.state_path),
        project_dir=str(result.project_dir) if result.project_dir else None,
        artifact_dirs=result.artifact_dirs, skipped_by_tag=result.skipped_by_tag,
        notes=result.notes,
        nodes=[UpNode(hostname=n.hostname, start_phase=n.start_phase.value,
                      phase=n.phase.value,
                      failed_phase=n.failed_phase.value if n.failed_phase else None,
                      reason=n.reason, steps=n.steps) for n in result.nodes])


# ---------------------------------------------------------------- provision run

class HostStatsView(Out):
    """ansible-runner's per-host play recap."""

    ok: int
    changed: int
    failed: int
    unreachable: int
    skipped: int
    rescued: int
    ignored: int


class TaskEventView(Out):
    host: str
    task: str
    role: str
    status: str  # ok | changed | failed | unreachable | skipped
    message: str
    check_mode: bool  # a check-mode prediction, not a change


class RunReport(Out):
    schema_: Literal["provisioner.run/v1"] = Field("provisioner.run/v1", alias="schema")
    playbook: str
    ok: bool
    status: str
    rc: int
    hosts: dict[str, HostStatsView]
    failures: list[TaskEventView]
    real_changes: int
    simulated: list[str]
    artifact_dir: str


def run_report(result: RunResult) -> RunReport:
    return RunReport(playbook=result.playbook, ok=result.ok, status=result.status,
                     rc=result.rc,
                     hosts={h: HostStatsView.model_validate(_plain(s))
                            for h, s in result.hosts.items()},
                     failures=[TaskEventView.model_validate(_plain(e))
                               for e in result.failures],
                     real_changes=len(result.real_changes),
                     simulated=sorted({e.task for e in result.simulated}),
                     artifact_dir=result.artifact_dir)


# ---------------------------------------------------------------- provision bmc

class BmcNode(Out):
    node: str
    ok: bool
    result: Any
    error: str | None
    error_kind: str | None
    elapsed_s: float


class BmcReport(Out):
    schema_: Literal["provisioner.bmc/v1"] = Field("provisioner.bmc/v1", alias="schema")
    operation: str
    site: str
    ok: bool
    nodes: list[BmcNode]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def bmc_report(operation: str, site: str, results: Sequence[NodeResult[Any]]) -> BmcReport:
    return BmcReport(operation=operation, site=site, ok=all(r.ok for r in results),
                     nodes=[BmcNode(node=r.node, ok=r.ok, result=_plain(r.value),
                                    error=r.error, error_kind=r.error_kind,
                                    elapsed_s=round(r.elapsed_s, 3)) for r in results])


# ---------------------------------------------------------------- render, artifacts

class RenderReport(Out):
    schema_: Literal["provisioner.render/v1"] = Field("provisioner.render/v1",
                                                      alias="schema")
    out: str
    files: int
    groups: dict[str, list[str]]


class Artifact(Out):
    # package | kernel-package (named after each node's running kernel) | repository | image |
    # image-set | file | helm-chart
    kind: str
    name: str
    version: str
    role: str
    hosts: str  # comma-separated host names


class ArtifactsReport(Out):
    schema_: Literal["provisioner.artifacts/v1"] = Field("provisioner.artifacts/v1",
                                                         alias="schema")
    site: str
    artifacts: list[Artifact]


# ---------------------------------------------------------------- provision lab

class LabProcessView(Out):
    role: str
    pid: int
    start_ticks: int
    log: str
    alive: bool | None = None  # filled by `lab status`


class LabMirrorView(Out):
    """The lab's signed apt mirror (lab/mirror.py), as the overlay points the site at it."""

    url: str
    key_file: str
    real_debs: int
    standin_debs: int
    build_s: float
    # the cached Python wheelhouse the execution nodes install ansible from, served under
    # url + "wheels/" (lab/wheelhouse.py); absent without execution nodes
    wheelhouse: str | None = None
    wheels_install_s: float | None = None  # wall seconds to install it on every node at once


class LabReport(Out):
    schema_: Literal["provisioner.lab/v1"] = Field("provisioner.lab/v1", alias="schema")
    running: bool
    site: str
    latency_ms: int = 0
    processes: list[LabProcessView] = Field(default_factory=list)
    endpoints: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # name, address, netns, veth, pid and start ticks of its launcher, upper (its disk);
    # with `lab status`, alive too
    ssh_hosts: list[dict[str, Any]] = Field(default_factory=list)
    ssh_tag: str = ""
    # switch stand-ins (lab/switch.py): name, netns, SSH port on 127.0.0.1, pids
    switches: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # what the lab could not start, and why
    mirror: LabMirrorView | None = None
    # provisioning.execution's nodes as lab hosts (lab/execution.py), as ssh_hosts
    execution_hosts: list[dict[str, Any]] = Field(default_factory=list)
    # `lab status`: what no longer runs ("ipmi:dgx01", "ssh host dgx02", "execution node
    # ex1", "switch leaf1"); `running` is false when it is not empty
    dead: list[str] = Field(default_factory=list)


def lab_report(site: str, state: LabState | None, *, with_liveness: bool) -> LabReport:
    if state is None:
        return LabReport(running=False, site=site)
    procs = [LabProcessView(role=p.role, pid=p.pid, start_ticks=p.start_ticks, log=p.log,
                            alive=p.alive() if with_liveness else None)
             for p in state.processes]
    dead = state.dead() if with_liveness else []

    def hosts(kind: str, group: Sequence[Any]) -> list[dict[str, Any]]:
        return [h.to_json() | ({"alive": f"{kind} {h.name}" not in dead}
                               if with_liveness else {}) for h in group]

    return LabReport(running=not dead, site=state.site, latency_ms=state.latency_ms,
                     processes=procs, endpoints=state.endpoints,
                     ssh_hosts=hosts("ssh host", state.ssh_hosts), ssh_tag=state.ssh_tag,
                     switches=[s.to_json() for s in state.switches], notes=state.notes,
                     mirror=LabMirrorView(**state.mirror) if state.mirror else None,
                     execution_hosts=hosts("execution node", state.execution_hosts),
                     dead=dead)


RESULTS: tuple[type[Out], ...] = (UpReport, UpEvent, RunReport, BmcReport, RenderReport,
                                  ArtifactsReport, LabReport)
