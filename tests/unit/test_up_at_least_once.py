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

from provisioner import install
from provisioner.bmc.base import PowerAction, PowerState
from provisioner.inventory import load
from provisioner.state import Phase, StateStore
from provisioner.workflows import up as up_mod
from provisioner.workflows.steps import intent
from tests.conftest import EXAMPLE
from tests.unit.test_up_logic import (
    FakeDriver,
    answer_as_installed,
    no_ssh_answers,  # noqa: F401 - an autouse fixture: no node's OS answers unless told
    run_up,
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


def test_a_boot_killed_before_its_commit_is_not_sent_again_to_a_node_that_is_on(
        site_copy):
    """Killed after dgx01's power-on, before the commit: the intent written ahead of the
    BMC's calls names that boot; the next run finds dgx01 on (its installer running) and
    sends no second override (which would start the install again): it waits for it."""
    assert _killed_run(site_copy) == ["facts", "boot pxe once", "power on"]
    store = StateStore(up_mod.state_path(load(site_copy)))
    assert {n.hostname: n.phase for n in store.nodes()}["dgx01"] is Phase.INSPECTED
    (killed,) = [e for e in store.events("dgx01") if e.kind == install.INTENT]
    result, _ = run_up(site_copy)
    assert FakeDriver.calls["dgx01"] == []  # no power off, no override, no power on
    boots = [e for e in store.events("dgx01") if e.to_phase == "booting"]
    assert len(boots) == 1  # committed once, by the run that took it over
    assert boots[0].detail["boot"] == "under way"
    assert boots[0].detail["resumed_from_run"] == killed.run_id
    assert boots[0].detail["intent_id"] == killed.detail["intent_id"] != "***"
    assert {n.hostname: n for n in result.nodes}["dgx01"].failed_phase is Phase.BOOTING


def test_a_boot_killed_after_the_install_finished_goes_on_not_refused(site_copy,
                                                                      monkeypatch):
    """If the installer finished before the next run, dgx01 answers as installed by the
    boot the killed run asked for: the run goes on with it (no guard refusal, no second
    install), to os_ready and past."""
    assert _killed_run(site_copy)[-1] == "power on"
    answer_as_installed(monkeypatch, {"dgx01"})
    result, _ = run_up(site_copy)
    assert FakeDriver.calls["dgx01"] == []  # no boot override, no power change
    dgx01 = {n.hostname: n for n in result.nodes}["dgx01"]
    assert "wait_os" in dgx01.steps and dgx01.failed_phase is not Phase.INSPECTED
    assert dgx01.reason is None or "--reinstall" not in dgx01.reason


def _refused(site: Path, host: str) -> None:
    """What `pxe serve` records when host's installer reports its guard refused."""
    store = StateStore(up_mod.state_path(load(site)))
    intent.record_report(store, host, install.refusal("/dev/nvme0n1: gpt"))


class ReportsRefusal(FakeDriver):
    """dgx01's installer refuses its disks: at power-on its report reaches the store, as the
    boot server records it (intent.record_report); the boot's intent is already there."""

    site: Path

    def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
        state = super().set_power(action, timeout_s)
        if self.target.node == "dgx01" and action is PowerAction.ON:
            store = StateStore(up_mod.state_path(load(self.site)))
            last = intent.last(store, "dgx01")
            assert last is not None and last.run_id == store.runs(1)[0]["id"]  # ahead
            ReportsRefusal.grants.append(intent.served(store, "dgx01")[install.GRANT])
            _refused(self.site, "dgx01")
        return state

    grants: list[str] = []


def test_an_installer_refusal_fails_the_node_at_once_and_only_reinstall_boots_it_again(
        site_copy):
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    ReportsRefusal.site, ReportsRefusal.grants = site_copy, []

    def run(reinstall: str | None = None) -> up_mod.NodeOutcome:
        FakeDriver.calls = {}
        result = up_mod.up(load(site_copy), {"PROVISION_BMC_PASSWORD": "x"},
                           # the report, not a timeout, ends the wait
                           up_mod.UpOptions(os_timeout_s=3600, limit="dgx01",
                                            reinstall=reinstall),
                           make_driver=ReportsRefusal)
        return {n.hostname: n for n in result.nodes}["dgx01"]

    dgx01 = run()
    assert ReportsRefusal.grants == [""]  # not named: the installer was given no grant
    assert dgx01.failed_phase is Phase.BOOTING
    assert dgx01.reason is not None and dgx01.reason.startswith(install.REFUSED)
    assert "--reinstall" in dgx01.reason and "/dev/nvme0n1: gpt" in dgx01.reason
    again = run()  # not named again: left failed, no boot
    assert FakeDriver.calls.get("dgx01", []) == [] and again.failed_phase is Phase.BOOTING
    named = run("dgx01")  # named: booted again, this time with the grant (its own token)
    assert FakeDriver.calls["dgx01"][-2:] == ["boot pxe once", "power on"]
    store = StateStore(up_mod.state_path(load(site_copy)))
    assert ReportsRefusal.grants[-1] == intent.last(store, "dgx01").token != ""
    assert named.failed_phase is Phase.BOOTING  # the stand-in refuses again, as scripted
    # the grant lasts only while its run runs
    assert intent.served(store, "dgx01")[install.GRANT] == ""


def test_a_committed_boot_is_not_taken_for_one_under_way(site_copy):
    """The intent of a boot its run committed is history: a node rewound to `inspected`
    later (--from-phase) is booted anew (after the guard), not taken over."""
    store = StateStore(up_mod.state_path(load(site_copy)))
    run = store.start_run("up", backup=False)
    store.enroll(["dgx01"], run_id=run)
    store.transition("dgx01", Phase.INSPECTED, run_id=run)
    intent.record(store, "dgx01", run_id=run, token="aa", reinstall=False)
    assert intent.under_way(store, "dgx01", run + 1) is not None  # not committed: under way
    store.transition("dgx01", Phase.BOOTING, run_id=run)
    assert intent.under_way(store, "dgx01", run + 1) is None
