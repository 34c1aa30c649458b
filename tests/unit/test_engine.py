"""The step engine: per-node stages (bounded, a deadline per node, stop on request) and
batch stages (serial, a failure budget, stopping only between batches), on a real state
store."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from provisioner import fanout
from provisioner.errors import ConfigError
from provisioner.lifecycle import Phase
from provisioner.state import StateStore
from provisioner.workflows import engine
from provisioner.workflows.engine import BatchStage, Journal, NodeStage, StepFailed


def journal_for(tmp_path, hosts, phase=Phase.ENROLLED) -> Journal:
    store = StateStore(tmp_path / "state.db")
    store.enroll(hosts)
    for h in hosts:
        p = Phase.ENROLLED
        while p is not phase:
            nxt = {Phase.ENROLLED: Phase.INSPECTED, Phase.INSPECTED: Phase.BOOTING,
                   Phase.BOOTING: Phase.OS_READY}[p]
            store.transition(h, nxt)
            p = nxt
    run_id = store.start_run("test")
    j = Journal(store, run_id, None)
    j.load(hosts)
    return j


@dataclass
class Inspect:
    """A step that hangs for the hosts in `hang` until released, fails for `fail`."""

    hang: set[str] = field(default_factory=set)
    fail: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    name: str = "inspect"
    source: Phase = Phase.ENROLLED

    def __call__(self, host: str, session: object) -> dict[str, object]:
        if host in self.hang:
            self.release.wait(30)
        if host in self.fail:
            raise StepFailed(f"{host}: the BMC said no")
        return {"host": host}


def test_a_hung_node_fails_at_its_deadline_and_the_others_finish(tmp_path):
    hosts = [f"n{i}" for i in range(6)]
    j = journal_for(tmp_path, hosts)
    step = Inspect(hang={"n2"}, fail={"n4"})
    try:
        NodeStage([step], concurrency=2, deadline_s=0.5).run(j, hosts, threading.Event())
        assert j.phase("n2") is Phase.FAILED
        assert "deadline" in (j.outcomes["n2"].reason or "")
        assert j.phase("n4") is Phase.FAILED and "said no" in (j.outcomes["n4"].reason or "")
        for h in ("n0", "n1", "n3", "n5"):
            assert j.phase(h) is Phase.INSPECTED, h
    finally:
        step.release.set()  # the abandoned worker wakes up and tries to record its move
    time.sleep(0.3)
    assert j.store.node("n2").phase is Phase.FAILED  # its late move was dropped
    assert j.store.check_consistency() == []


def test_a_stop_request_starts_no_new_node_and_records_why(tmp_path):
    hosts = [f"n{i}" for i in range(5)]
    j = journal_for(tmp_path, hosts)
    stop = threading.Event()

    @dataclass
    class StopAfterFirst(Inspect):
        def __call__(self, host: str, session: object) -> dict[str, object]:
            stop.set()
            return {}

    NodeStage([StopAfterFirst()], concurrency=1).run(j, hosts, stop)
    assert j.phase("n0") is Phase.INSPECTED  # the step in flight finished
    assert all(j.phase(h) is Phase.ENROLLED for h in hosts[1:])
    assert j.interrupted == set(hosts[1:])
    kinds = [e.kind for e in j.store.events() if e.hostname in hosts[1:]]
    assert kinds.count("interrupted") == 4


def batch_runner(j: Journal, fail: set[str], seen: list[list[str]],
                 stop: threading.Event | None = None, stop_after: int | None = None):
    def run(batch: list[str]) -> None:
        seen.append(batch)
        for h in batch:
            if h in fail:
                j.fail(h, "configure", "playbook failed")
            else:
                j.move(h, Phase.CONFIGURED, "configure")
        if stop is not None and len(seen) == stop_after:
            stop.set()
    return run


def test_a_batch_stage_stops_when_the_failure_budget_is_spent(tmp_path):
    hosts = [f"n{i}" for i in range(10)]
    j = journal_for(tmp_path, hosts, Phase.OS_READY)
    seen: list[list[str]] = []
    out = BatchStage(Phase.OS_READY, batch_runner(j, {"n2", "n3"}, seen), serial=2,
                     max_failures=2).run(j, hosts, threading.Event())
    assert seen == [["n0", "n1"], ["n2", "n3"]]  # no batch after the budget was spent
    assert out.stopped is not None and "failure budget spent: 2 failed" in out.stopped
    assert all(j.phase(h) is Phase.OS_READY for h in hosts[4:])  # never touched


def test_a_batch_stage_with_budget_left_runs_every_batch(tmp_path):
    hosts = [f"n{i}" for i in range(6)]
    j = journal_for(tmp_path, hosts, Phase.OS_READY)
    seen: list[list[str]] = []
    out = BatchStage(Phase.OS_READY, batch_runner(j, {"n1"}, seen), serial="50%",
                     max_failures=2).run(j, hosts, threading.Event())
    assert seen == [["n0", "n1", "n2"], ["n3", "n4", "n5"]] and out.stopped is None


def test_a_stop_request_lets_the_batch_in_flight_finish_and_starts_no_other(tmp_path):
    hosts = [f"n{i}" for i in range(6)]
    j = journal_for(tmp_path, hosts, Phase.OS_READY)
    stop = threading.Event()
    seen: list[list[str]] = []
    out = BatchStage(Phase.OS_READY, batch_runner(j, set(), seen, stop, stop_after=1),
                     serial=2).run(j, hosts, stop)
    assert seen == [["n0", "n1"]] and out.stopped == "stop requested"
    assert j.phase("n0") is j.phase("n1") is Phase.CONFIGURED
    assert all(j.phase(h) is Phase.OS_READY for h in hosts[2:])


def test_batches_put_control_planes_first_and_read_percentages():
    hosts = ["w1", "w2", "cp1", "w3", "cp2"]
    assert engine.batches(hosts, 2, first=["cp1", "cp2"]) == [["cp1", "cp2"], ["w1", "w2"],
                                                              ["w3"]]
    assert engine.batch_size("25%", 10) == 2
    assert engine.batch_size("1%", 10) == 1  # never zero
    assert engine.batch_size("3", 10) == 3
    for bad in ("0%", "150%", "x", 0):
        with pytest.raises(ConfigError):
            engine.batch_size(bad, 10)


def test_fan_out_reports_unstarted_items_and_raises_a_callback_bug():
    stop = threading.Event()
    stop.set()
    done = fanout.fan_out(["a", "b"], lambda k: k, concurrency=2, stop=stop)
    assert [d.started for d in done] == [False, False]

    def bad_callback(_d: fanout.Done[str]) -> None:
        raise RuntimeError("bug in the callback")

    with pytest.raises(RuntimeError, match="bug in the callback"):
        fanout.fan_out(["a", "b", "c"], lambda k: k, concurrency=1, on_done=bad_callback)


def test_fan_out_bounds_concurrency():
    running, peak, lock = [0], [0], threading.Lock()

    def work(_k: str) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    done = fanout.fan_out([str(i) for i in range(20)], work, concurrency=3)
    assert all(d.ok for d in done) and 1 < peak[0] <= 3
