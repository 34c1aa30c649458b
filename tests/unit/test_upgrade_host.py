"""Which node the upgrade's reboot step reboots: the roles already reboot a node for its new
driver mid-play (their checks after it need the new module), so the step skips it; a node
whose roles' reboot did not come back is power cycled through its BMC and given the roles
again; a node that needs a reboot the roles did not give it (DOCA, a resumed run) gets one.
The playbook runs and the BMC cycle are recorded, not run (the lab tests run them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from provisioner.runner import RunResult, TaskEvent
from provisioner.upgrade import host as host_mod

ROLE = host_mod.ROLE_REBOOT_TASK


@dataclass
class Recorder(host_mod.AnsibleInstaller):
    """AnsibleInstaller with scripted playbook results and BMC outcomes."""

    scripted: list[RunResult] = field(default_factory=list)
    bmc_answers: dict[str, str | None] = field(default_factory=dict)
    runs: list[tuple[str, list[str]]] = field(default_factory=list)
    cycled: list[str] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)

    def _run(self, playbook: str, batch: Sequence[str]) -> RunResult:
        self.runs.append((playbook, list(batch)))
        return self.scripted.pop(0)

    def _bmc_cycle(self, host: str) -> str | None:
        self.cycled.append(host)
        return self.bmc_answers[host]


def result(playbook: str, *events: TaskEvent) -> RunResult:
    failed = any(e.status in ("failed", "unreachable") for e in events)
    return RunResult(playbook, "failed" if failed else "successful", 2 if failed else 0,
                     events=list(events))


def recorder(*scripted: RunResult, **bmc: str | None) -> Recorder:
    rec = Recorder.__new__(Recorder)  # no site: _run and _bmc_cycle are scripted
    rec.scripted, rec.bmc_answers = list(scripted), dict(bmc)
    rec.runs, rec.cycled, rec.notes = [], [], []
    rec.on_note = lambda h, t: rec.notes.append((h, t))
    return rec


def test_a_node_the_roles_rebooted_is_not_rebooted_again() -> None:
    rec = recorder(result("site.yml", TaskEvent("gpu1", ROLE, "nvidia_driver", "changed"),
                          TaskEvent("gpu2", "Install DOCA", "roce_host", "changed")),
                   result("upgrade_reboot.yml", TaskEvent("gpu2", "Reboot", "", "changed")))
    out = rec.install(["gpu1", "gpu2", "cpu1"], reboot=["gpu1", "gpu2"])
    assert out == {"gpu1": None, "gpu2": None, "cpu1": None}
    assert rec.runs == [("site.yml", ["gpu1", "gpu2", "cpu1"]),
                        ("upgrade_reboot.yml", ["gpu2"])]  # gpu1: once, by the roles
    assert rec.cycled == []


def test_a_roles_reboot_that_did_not_come_back_is_power_cycled_then_the_roles_rerun() -> None:
    rec = recorder(result("site.yml", TaskEvent("gpu1", ROLE, "nvidia_driver", "unreachable",
                                                "timed out waiting for the boot"),
                          TaskEvent("gpu2", ROLE, "nvidia_driver", "failed", "no answer"),
                          TaskEvent("gpu3", ROLE, "nvidia_driver", "changed")),
                   result("site.yml"), gpu1=None, gpu2="BMC refused: 503")
    out = rec.install(["gpu1", "gpu2", "gpu3"], reboot=["gpu1", "gpu2", "gpu3"])
    assert rec.cycled == ["gpu1", "gpu2"]
    assert rec.runs == [("site.yml", ["gpu1", "gpu2", "gpu3"]), ("site.yml", ["gpu1"])]
    assert out == {"gpu1": None, "gpu2": "BMC refused: 503", "gpu3": None}
    assert [h for h, _ in rec.notes] == ["gpu1", "gpu2"]
    assert "timed out waiting for the boot" in rec.notes[0][1]


def test_a_node_failing_elsewhere_in_the_roles_is_neither_rebooted_nor_cycled() -> None:
    rec = recorder(result("site.yml", TaskEvent("gpu1", "Install the driver packages "
                                                "(Ubuntu)", "nvidia_driver", "failed", "404")))
    out = rec.install(["gpu1"], reboot=["gpu1"])
    assert out["gpu1"] and "404" in out["gpu1"]
    assert rec.runs == [("site.yml", ["gpu1"])] and rec.cycled == []
