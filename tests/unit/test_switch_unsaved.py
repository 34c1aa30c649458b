"""A push is saved or it is not done (switches/ops.py: the write-ahead `fabric_push_sending`).

`fabric push` killed (SIGKILL, in a child process) after the switch took its lines and
before the save: the running config holds the change, the saved one does not, and the
running config alone says "unchanged". The store says which switch was cut off: `fabric
diff` says so, the next push saves it with nothing to send, and after that nothing is
left to say. The switch is a file-backed stand-in (running and startup config as files,
so both processes see one switch); `write memory` into FRR's frr.conf is
tests/integration/test_switches_frr.py.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from provisioner.inventory import load
from provisioner.state import StateStore
from provisioner.switches import ops
from provisioner.switches.base import Endpoint, SentLines
from tests.conftest import ios_leaf_example

ENV = {"PROVISION_SWITCH_PASSWORD": "pw"}


class FileSwitch:
    """One switch whose running and startup configs are files: apply takes every line."""

    def __init__(self, d: Path, desired: str, die_on_save: bool) -> None:
        self.d, self.desired, self.die = d, desired, die_on_save

    def running_config(self) -> str:
        f = self.d / "running"
        return f.read_text() if f.exists() else "hostname leaf01\n"

    def apply(self, commands: Sequence[str]) -> SentLines:
        (self.d / "running").write_text(self.desired)
        return SentLines(tuple(commands))

    def save(self) -> None:
        if self.die:
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9 between the lines and the save
        (self.d / "startup").write_text(self.running_config())
        with (self.d / "saves").open("a") as f:
            f.write("saved\n")

    def close(self) -> None:
        pass


def _push(site: Path, d: Path, store_path: Path, *, push: bool = True,
          die_on_save: bool = False) -> list[ops.SwitchOutcome]:
    loaded = load(site)
    desired = ops.targets(loaded)["leaf01"].text

    def connect(ep: Endpoint) -> FileSwitch:
        return FileSwitch(d, desired, die_on_save)

    store = StateStore(store_path, read_only=not push)
    return ops.run(loaded, ENV, push=push, connect=connect, store=store)


def test_a_push_killed_before_its_save_is_found_said_and_saved(tmp_path: Path) -> None:
    site, d, store_path = ios_leaf_example(tmp_path), tmp_path / "switch", tmp_path / "state.db"
    d.mkdir()
    StateStore(store_path)  # made before the child, as `fabric push` makes it
    child = multiprocessing.get_context("fork").Process(
        target=_push, args=(site, d, store_path), kwargs={"die_on_save": True})
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert (d / "running").exists() and not (d / "startup").exists()  # taken, not saved

    store = StateStore(store_path)
    cut = ops.unsaved(store)
    assert list(cut) == ["leaf01"] and cut["leaf01"] is not None

    [diff] = _push(site, d, store_path, push=False)
    assert (diff.status, diff.saved) == ("unchanged", False)  # the running config agrees
    assert f"run {cut['leaf01']}" in diff.note and "saved one lacks" in diff.note
    assert not (d / "startup").exists()  # a diff changes nothing

    [push] = _push(site, d, store_path)
    assert (push.status, push.saved, push.commands) == ("unchanged", True, ())
    assert push.note.startswith("saved: ")
    assert (d / "startup").read_text() == (d / "running").read_text()
    assert ops.unsaved(store) == {}

    [again] = _push(site, d, store_path)
    assert (again.status, again.saved, again.note) == ("unchanged", False, "")
    assert (d / "saves").read_text().count("saved") == 1
    kinds = [e.kind for e in store.events("leaf01")]
    assert kinds == [ops.SENDING, ops.OUTCOME, ops.OUTCOME]


def test_a_push_writes_ahead_before_its_lines_and_its_outcome_after(tmp_path: Path) -> None:
    site, d = ios_leaf_example(tmp_path), tmp_path / "switch"
    d.mkdir()
    [out] = _push(site, d, tmp_path / "state.db")
    assert (out.status, out.saved) == ("pushed", True)
    store = StateStore(tmp_path / "state.db")
    events = store.events("leaf01")
    assert [e.kind for e in events] == [ops.SENDING, ops.OUTCOME]
    assert events[0].run_id == events[1].run_id is not None
    assert ops.unsaved(store) == {}
