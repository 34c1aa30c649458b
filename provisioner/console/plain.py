"""`up`'s progress as plain lines, for pipes and CI logs: each step's start and end, every
failed task, and for a node whose step is running, one line at least every PERIOD_S with
the tasks done and the task it is on, so a CI log is never silent for minutes while a long
playbook (an apt install, a kubeadm join) runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console as RichConsole
from rich.markup import escape

if TYPE_CHECKING:
    from provisioner.workflows.engine import Progress

PERIOD_S = 30.0  # the longest a running node goes without a line


@dataclass
class _Running:
    step: str
    since: float
    said_at: float
    done: int = 0
    current: str = ""


@dataclass
class PlainProgress:
    """Called from worker threads; `tick` from the console's own timer thread."""

    err: RichConsole
    period_s: float = PERIOD_S
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: dict[str, _Running] = field(default_factory=dict)

    def __call__(self, p: Progress) -> None:
        now = self.clock()
        with self._lock:
            node = p.node or "-"
            if p.status == "task":
                self._task(node, p, now)
                if not p.detail.startswith(("failed", "unreachable")):
                    return
            elif p.status == "start":
                self._running[node] = _Running(p.step, now, now)
            elif p.status in ("ok", "failed", "interrupted"):
                self._running.pop(node, None)
            self.err.print(f"{node}: {p.step} {p.status}"
                           + (f": {escape(p.detail)}" if p.detail else ""))

    def _task(self, node: str, p: Progress, now: float) -> None:
        run = self._running.setdefault(node, _Running(p.step, now, now))
        status, _, task = p.detail.partition(": ")
        if status == "started":
            run.current = task.split(" - ", 1)[0]
        else:
            run.done += 1
        self._say(node, run, now)

    def tick(self) -> None:
        """A line for every running node not heard of for a period (a long task)."""
        now = self.clock()
        with self._lock:
            for node, run in self._running.items():
                self._say(node, run, now)

    def _say(self, node: str, run: _Running, now: float) -> None:
        if now - run.said_at < self.period_s:
            return
        run.said_at = now
        on = f", on: {escape(run.current)}" if run.current else ""
        self.err.print(f"{node}: {run.step} running {now - run.since:.0f} s: "
                       f"{run.done} tasks done{on}")


def ticking(show: PlainProgress, stop: threading.Event) -> threading.Thread:
    """The timer thread that calls show.tick() until stop is set."""
    def loop() -> None:
        while not stop.wait(min(5.0, show.period_s)):
            show.tick()

    thread = threading.Thread(target=loop, daemon=True, name="plain-progress")
    thread.start()
    return thread
