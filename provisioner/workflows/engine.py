"""The step engine: two kinds of stage over the one fan-out (provisioner/fanout.py).

A workflow (`up`, and next `add`, `upgrade`, `fabric push`) is an ordered list of stages
over the state store:

- a **node stage** runs, for each node in parallel (bounded), the step that leaves the
  node's phase, then the next, while the node's phase has a step in the stage. Each node
  has a deadline: one that hangs past it is failed and abandoned, the others go on. A stop
  request lets steps in flight finish and starts no new ones.
- a **batch stage** hands hosts to a batch runner (a playbook, an upgrade batch) in batches
  of `serial` hosts (a number or a percentage), control planes first, and stops between
  batches only: when the failure budget is spent or a stop was requested.

Every outcome goes through the `Journal`: one state-store transaction per move (the store
checks it against lifecycle.py), then a progress event for the console. Nothing here
prints, knows a protocol, or knows which workflow it runs.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from provisioner.errors import ConfigError, ProvisionerError
from provisioner.fanout import Done, fan_out
from provisioner.lifecycle import MOVES, Phase
from provisioner.state import StateStore

# ---------------------------------------------------------------- the journal

@dataclass(frozen=True)
class Progress:
    """One thing that happened, for the console (live table, plain lines or JSON lines)."""

    node: str | None
    step: str
    status: str  # start | ok | failed | note | task | interrupted
    detail: str = ""
    at: float = field(default_factory=time.time)


ProgressFn = Callable[[Progress], None]


@dataclass
class NodeOutcome:
    hostname: str
    start_phase: Phase
    phase: Phase
    failed_phase: Phase | None = None
    reason: str | None = None
    steps: list[str] = field(default_factory=list)


class StepFailed(Exception):
    """A node's step failed; the message is the reason recorded for it."""


class StepInterrupted(Exception):
    """A stop was requested before this step started or while it waited."""


def summary(detail: Mapping[str, Any] | None) -> str:
    """A step's detail in one line for the console."""
    if not detail:
        return ""
    keys = ("boot", "power", "ssh", "waited_s", "changed", "simulated", "gpus")
    parts = [f"{k}={detail[k]}" for k in keys if k in detail]
    parts += [str(n) for n in detail.get("not_verified", [])]
    parts += [str(n) for n in detail.get("notes", [])]
    return ", ".join(parts)


class Journal:
    """Each node's outcome in this run: state-store transactions, then progress events.
    Safe from worker threads; a node abandoned at its deadline takes no later move."""

    def __init__(self, store: StateStore, run_id: int, emit: ProgressFn | None) -> None:
        self.store = store
        self.run_id = run_id
        self.emit: ProgressFn = emit or (lambda _p: None)
        self.outcomes: dict[str, NodeOutcome] = {}
        self.interrupted: set[str] = set()
        self._abandoned: set[str] = set()
        self._lock = threading.Lock()

    def load(self, hosts: Iterable[str]) -> None:
        """Start each host's outcome from its recorded state."""
        for host in hosts:
            st = self.store.node(host)
            self.outcomes[host] = NodeOutcome(host, st.phase, st.phase, st.failed_phase,
                                              st.reason)

    def phase(self, host: str) -> Phase:
        return self.outcomes[host].phase

    def move(self, host: str, to: Phase, step: str, detail: dict[str, Any] | None = None,
             reason: str | None = None) -> None:
        with self._lock:
            if host in self._abandoned:
                return
            st = self.store.transition(host, to, run_id=self.run_id, reason=reason,
                                       detail=detail)
            out = self.outcomes[host]
            out.phase, out.failed_phase, out.reason = st.phase, st.failed_phase, st.reason
            if to is not Phase.FAILED:
                out.steps.append(step)
        self.emit(Progress(host, step, "failed" if to is Phase.FAILED else "ok",
                           reason or summary(detail)))

    def restart(self, host: str, to: Phase, detail: dict[str, Any]) -> None:
        """A failed node is retried: it starts this run from `to` (no step ran)."""
        st = self.store.transition(host, to, run_id=self.run_id, detail=detail)
        out = self.outcomes[host]
        out.phase, out.failed_phase, out.reason = st.phase, None, None
        out.start_phase = st.phase

    def fail(self, host: str, step: str, reason: str) -> None:
        self.move(host, Phase.FAILED, step, {"step": step}, reason=reason)

    def abandon(self, host: str, step: str, reason: str) -> None:
        """Fail a node whose step outran its deadline; its worker's later moves are dropped."""
        self.fail(host, step, reason)
        with self._lock:
            self._abandoned.add(host)

    def stopped(self, host: str, step: str, detail: str) -> None:
        """The node's step was not run or not finished because a stop was requested."""
        with self._lock:
            self.interrupted.add(host)
        self.store.record(host, "interrupted", {"step": step, "detail": detail},
                          run_id=self.run_id)
        self.emit(Progress(host, step, "interrupted", detail))

    def note(self, host: str | None, step: str, kind: str, text: str) -> None:
        self.store.record(host, kind, {"step": step, "note": text}, run_id=self.run_id)
        self.emit(Progress(host, step, "note", text))


# ---------------------------------------------------------------- stages

class NodeStep(Protocol):
    """A step that leaves `source` for its lifecycle target, for one node at a time."""

    name: str
    source: Phase

    def __call__(self, host: str, session: Any) -> dict[str, Any]: ...


def target_of(step: NodeStep) -> Phase:
    """Where the lifecycle says this step takes a node."""
    for m in MOVES:
        if m.source is step.source and m.step == step.name:
            return m.target
    raise ConfigError(f"the lifecycle has no step {step.name!r} from {step.source.value}")


Session = Callable[[str], contextlib.AbstractContextManager[Any]]


@contextlib.contextmanager
def _no_session(_host: str) -> Iterator[None]:
    yield None


@dataclass
class NodeStage:
    """Per-node steps, nodes in parallel; `session(host)` holds what a node's steps share
    (a BMC connection), opened once per node and closed when its steps end."""

    steps: Sequence[NodeStep]
    concurrency: int
    deadline_s: float | None = None
    session: Session = _no_session

    def run(self, journal: Journal, hosts: Sequence[str], stop: threading.Event) -> None:
        by_phase = {s.source: s for s in self.steps}
        todo = [h for h in hosts if journal.phase(h) in by_phase]

        def current(host: str) -> str:
            step = by_phase.get(journal.phase(host))
            return step.name if step else "-"

        def work(host: str) -> None:
            with self.session(host) as session:
                while (step := by_phase.get(journal.phase(host))) is not None:
                    if stop.is_set():
                        raise StepInterrupted
                    journal.emit(Progress(host, step.name, "start"))
                    journal.move(host, target_of(step), step.name, step(host, session))

        def done(d: Done[None]) -> None:
            step = current(d.key)
            if d.ok:
                return
            if not d.started:
                journal.stopped(d.key, step, "not started")
            elif d.timed_out:
                journal.abandon(d.key, step, f"no result after {self.deadline_s:g} s "
                                "(the node's deadline); abandoned, the others went on")
            elif isinstance(d.error, StepInterrupted):
                journal.stopped(d.key, step, "stopped before it finished")
            elif isinstance(d.error, StepFailed | ProvisionerError):
                journal.fail(d.key, step, str(d.error))
            else:  # a bug or an unexpected library error: this node only
                journal.fail(d.key, step,
                             f"unexpected {type(d.error).__name__}: {d.error}"[:300])

        fan_out(todo, work, concurrency=self.concurrency, deadline_s=self.deadline_s,
                stop=stop, on_done=done)


def batches(hosts: Sequence[str], serial: int | str, first: Iterable[str] = ()
            ) -> list[list[str]]:
    """Split hosts into batches of `serial` (a number, or 'P%' of the hosts, at least one),
    the `first` ones (control planes) leading, as Ansible's `serial` does."""
    lead = set(first)
    ordered = [h for h in hosts if h in lead] + [h for h in hosts if h not in lead]
    size = batch_size(serial, len(ordered))
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def batch_size(serial: int | str, total: int) -> int:
    """The hosts per batch for a number or a percentage of `total` (never below one)."""
    if isinstance(serial, str):
        text = serial.strip()
        try:
            if text.endswith("%"):
                pct = float(text[:-1])
                if not 0 < pct <= 100:
                    raise ValueError(text)
                return max(1, int(total * pct / 100))
            serial = int(text)
        except ValueError:
            raise ConfigError(f"batch size {serial!r} is neither a number nor a percentage",
                              hint="for example 5 or 20%") from None
    if serial < 1:
        raise ConfigError(f"batch size {serial} must be at least 1")
    return serial


@dataclass(frozen=True)
class BatchOutcome:
    """What a batch stage did: the batches it ran, and why it stopped early (if it did)."""

    ran: list[list[str]]
    stopped: str | None


@dataclass
class BatchStage:
    """Hosts in batches handed to `run_batch`, which records each host's outcome in the
    journal. Stops only between batches: when `max_failures` failed hosts are reached in
    this stage, or a stop was requested; a batch in flight always finishes."""

    source: Phase
    run_batch: Callable[[list[str]], None]
    serial: int | str
    first: Sequence[str] = ()
    max_failures: int | None = None
    # Chooses each next batch from the hosts not yet run, after the last batch ended (an
    # upgrade's failure-domain limits depend on what failed); an empty answer stops the
    # stage. Without it the batches are fixed up front by `serial` and `first`.
    pick: Callable[[Sequence[str]], list[str]] | None = None

    def run(self, journal: Journal, hosts: Sequence[str], stop: threading.Event
            ) -> BatchOutcome:
        todo = [h for h in hosts if journal.phase(h) is self.source]
        fixed = None if self.pick else batches(todo, self.serial, self.first)
        ran: list[list[str]] = []
        done: set[str] = set()
        while len(done) < len(todo):
            if stop.is_set():
                return BatchOutcome(ran, "stop requested")
            failed = sum(journal.phase(h) is Phase.FAILED for b in ran for h in b)
            if self.max_failures is not None and failed >= self.max_failures:
                return BatchOutcome(ran, f"failure budget spent: {failed} failed, "
                                    f"{self.max_failures} allowed")
            if fixed is not None:
                batch = fixed[len(ran)]
            else:
                assert self.pick is not None
                batch = self.pick([h for h in todo if h not in done])
                if not batch:
                    return BatchOutcome(ran, "no node may go down now without exceeding "
                                        "--max-unavailable or control-plane quorum")
            self.run_batch(batch)
            ran.append(batch)
            done.update(batch)
        return BatchOutcome(ran, None)
