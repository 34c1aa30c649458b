"""The steps `up` may run twice, and that running them twice is harmless (docs/up.md,
"What a resumed run repeats"). A step's effect comes before the commit that moves the
node on; a run killed in between leaves the node in the phase before, and the next run
redoes that step. The one with an effect on the machine is boot: killed after power-on,
before its commit, the next run finds the node on and at `inspected`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from provisioner.bmc.base import PowerAction, PowerState
from provisioner.inventory import load
from provisioner.inventory.topology import ansible_host
from provisioner.state import Phase, StateStore
from provisioner.workflows import up as up_mod
from provisioner.workflows.steps import guard
from tests.conftest import EXAMPLE
from tests.unit.test_up_logic import (
    FakeDriver,
    answer_as_installed,
    no_ssh_answers,  # noqa: F401 - an autouse fixture: no node's OS answers unless told
    run_up,
    server,
)


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    return dest


class KilledAfterPowerOn(FakeDriver):
    """dgx01's BMC powers on, and the process dies at once (os._exit: like SIGKILL, no
    handler, no commit) before the boot step records it."""

    def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
        state = super().set_power(action, timeout_s)
        if self.target.node == "dgx01" and action is PowerAction.ON:
            os._exit(137)
        return state


def _killed_run(site) -> list[str]:
    """`up` in a forked child that dies after dgx01's power-on; what the child asked of
    dgx01's BMC. dgx01 stays on: the next run's BMC says so."""
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    FakeDriver.calls = {}
    log = site / "dgx01-calls.json"
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            class Logged(KilledAfterPowerOn):
                def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
                    if self.target.node == "dgx01":
                        log.write_text(json.dumps([*self.log, f"power {action.value}"]))
                    return super().set_power(action, timeout_s)

            up_mod.up(load(site), {"PROVISION_BMC_PASSWORD": "x"},
                      up_mod.UpOptions(os_timeout_s=0.2), make_driver=Logged)
        finally:
            os._exit(1)  # not killed: the test below fails on the exit status
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 137, "the run was not killed"
    FakeDriver.on = {"dgx01"}
    return list(json.loads(log.read_text()))


def test_a_boot_killed_before_its_commit_is_redone_for_a_node_not_yet_installed(
        site_copy):
    assert _killed_run(site_copy) == ["facts", "boot pxe once", "power on"]
    store = StateStore(up_mod.state_path(load(site_copy)))
    assert {n.hostname: n.phase for n in store.nodes()}["dgx01"] is Phase.INSPECTED
    # The next run: dgx01 is on, running its installer (no login with the site's key yet),
    # so the guard lets the boot step run again: off, PXE once, on.
    result, _ = run_up(site_copy)
    assert FakeDriver.calls["dgx01"] == ["power off", "boot pxe once", "power on"]
    boots = [e for e in store.events("dgx01") if e.to_phase == "booting"]
    assert len(boots) == 1  # committed once, by the run that finished it
    assert boots[0].detail["was"] == "on" and boots[0].detail["installed_check"] == "silent"
    assert {n.hostname: n for n in result.nodes}["dgx01"].failed_phase is not Phase.INSPECTED


def test_a_boot_killed_after_the_install_finished_is_refused_not_repeated(
        site_copy, monkeypatch):
    """If the installer finished before the next run, the node answers as installed: the
    redone boot is refused (the reinstall guard), with the reason and the way on."""
    assert _killed_run(site_copy)[-1] == "power on"
    asked = answer_as_installed(monkeypatch, {"dgx01"})
    result, _ = run_up(site_copy)
    assert FakeDriver.calls["dgx01"] == []  # no boot override, no power change
    assert ansible_host(server("dgx01").node) in asked
    dgx01 = {n.hostname: n for n in result.nodes}["dgx01"]
    assert dgx01.failed_phase is Phase.INSPECTED
    assert dgx01.reason is not None and "--reinstall dgx01" in dgx01.reason
    assert guard.MARKER in dgx01.reason
