"""`provision doctor`: each execution node's health, as JSON for CI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from provisioner.results.base import Out

if TYPE_CHECKING:  # doctor imports ssh and ansible_runner code: not at every CLI start
    from provisioner.execution.doctor import NodeHealth, Versions


class NodeHealthView(Out):
    node: str
    address: str
    ok: bool
    reachable: bool
    ansible_runner: str | None = None
    ansible_core: str | None = None
    free_mb: int | None = None
    problems: list[str] = Field(default_factory=list)


class DoctorReport(Out):
    schema_: Literal["provisioner.doctor/v1"] = Field("provisioner.doctor/v1", alias="schema")
    site: str
    ok: bool
    controller_ansible_runner: str
    controller_ansible_core: str
    # Empty: the site names no execution nodes, and playbooks run on the controller.
    nodes: list[NodeHealthView] = Field(default_factory=list)


def doctor_report(site: str, controller: Versions, nodes: list[NodeHealth]) -> DoctorReport:
    return DoctorReport(
        site=site, ok=all(n.ok for n in nodes),
        controller_ansible_runner=controller.ansible_runner,
        controller_ansible_core=controller.ansible_core,
        nodes=[NodeHealthView(node=n.node, address=n.address, ok=n.ok, reachable=n.reachable,
                              ansible_runner=n.ansible_runner, ansible_core=n.ansible_core,
                              free_mb=n.free_mb, problems=list(n.problems)) for n in nodes])


RESULTS: tuple[type[Out], ...] = (DoctorReport,)
