"""Plain progress for CI logs: never silent for more than a period while a node runs."""

from __future__ import annotations

import io

from rich.console import Console as RichConsole

from provisioner.console.plain import PlainProgress
from provisioner.runner import started_event
from provisioner.workflows.engine import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _plain() -> tuple[PlainProgress, Clock, io.StringIO]:
    buf, clock = io.StringIO(), Clock()
    err = RichConsole(file=buf, width=160, no_color=True, highlight=False, soft_wrap=True)
    return PlainProgress(err, period_s=30.0, clock=clock), clock, buf


def test_a_long_task_gets_a_line_every_period_with_tasks_done_and_the_current_one():
    show, clock, buf = _plain()
    show(Progress("dgx01", "configure", "start", "site.yml"))
    show(Progress("dgx01", "configure", "task", "started: Gather facts"))
    show(Progress("dgx01", "configure", "task", "ok: Gather facts"))
    show(Progress("dgx01", "configure", "task", "started: Install the driver"))
    clock.now += 29
    show.tick()
    assert buf.getvalue().splitlines() == ["dgx01: configure start: site.yml"]
    clock.now += 2  # 31 s: no event came, the timer speaks for the node
    show.tick()
    clock.now += 10
    show.tick()  # not again before another period
    show(Progress("dgx01", "configure", "task", "changed: Install the driver"))
    clock.now += 30
    show(Progress("dgx01", "configure", "task", "ok: Hold the driver"))
    show(Progress("dgx01", "configure", "ok", "configured"))
    clock.now += 60
    show.tick()  # done: nothing more for it
    assert buf.getvalue().splitlines() == [
        "dgx01: configure start: site.yml",
        "dgx01: configure running 31 s: 1 tasks done, on: Install the driver",
        "dgx01: configure running 71 s: 3 tasks done, on: Install the driver",
        "dgx01: configure ok: configured"]


def test_failed_tasks_are_said_at_once_and_routine_ones_are_not():
    show, _, buf = _plain()
    show(Progress("dgx02", "configure", "start", "site.yml"))
    show(Progress("dgx02", "configure", "task", "ok: Gather facts"))
    show(Progress("dgx02", "configure", "task", "failed: Install the driver - boom"))
    assert buf.getvalue().splitlines() == [
        "dgx02: configure start: site.yml",
        "dgx02: configure task: failed: Install the driver - boom"]


def test_runner_start_events_become_started_task_events():
    ev = started_event({"event": "runner_on_start",
                        "event_data": {"host": "dgx01", "task": "Install", "role": "x"}})
    assert ev is not None and (ev.host, ev.task, ev.status) == ("dgx01", "Install", "started")
    assert started_event({"event": "runner_on_ok", "event_data": {"host": "h"}}) is None
    assert started_event({"event": "runner_on_start", "event_data": {}}) is None
