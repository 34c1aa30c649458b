"""The one bounded fan-out: run one piece of work per key on daemon threads, at most N at
once, each with a deadline. The ground floor: it imports nothing of the project, so the
engine, the BMC pool, the switch operations, the lab and the execution nodes all use it."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Done(Generic[T]):
    """How one item of a fan-out ended."""

    key: str
    value: T | None = None
    error: BaseException | None = None
    started: bool = True
    timed_out: bool = False
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.started and not self.timed_out and self.error is None


def fan_out(keys: Sequence[str], work: Callable[[str], T], *, concurrency: int,
            deadline_s: float | None = None, stop: threading.Event | None = None,
            on_start: Callable[[str], None] | None = None,
            on_done: Callable[[Done[T]], None] | None = None) -> list[Done[T]]:
    """Run `work(key)` for every key, at most `concurrency` at once; results in key order.

    Workers are daemon threads rather than a ThreadPoolExecutor, whose threads are joined
    at exit: an item that hangs past `deadline_s` (a BMC that never answers) is marked
    timed out and abandoned, a fresh worker takes its slot, and it never holds up the
    others or the process exit. With `stop` set, items not yet started end unstarted.
    `on_done` is called exactly once per key, from a worker or the watchdog.
    """
    if not keys:
        return []
    results: dict[str, Done[T]] = {}
    claimed: set[str] = set()
    started: dict[str, float] = {}
    callback_errors: list[BaseException] = []
    lock = threading.Lock()
    all_done = threading.Event()
    work_q: queue.Queue[str] = queue.Queue()
    for k in keys:
        work_q.put(k)

    def finish(done: Done[T]) -> None:
        with lock:
            if done.key in claimed:  # already timed out by the watchdog
                return
            claimed.add(done.key)
        try:  # the callback runs before the item counts as done: the caller sees its effect
            if on_done:
                on_done(done)
        except Exception as exc:  # a bug in the callback: raised to the caller at the end
            callback_errors.append(exc)
        finally:
            with lock:
                results[done.key] = done
                if len(results) == len(keys):
                    all_done.set()

    def worker() -> None:
        while True:
            try:
                key = work_q.get_nowait()
            except queue.Empty:
                return
            if stop is not None and stop.is_set():
                finish(Done(key, started=False))
                continue
            t0 = time.monotonic()
            with lock:
                started[key] = t0
            try:
                if on_start:
                    on_start(key)
                value = work(key)
            except Exception as exc:  # the item's failure; the fan-out goes on
                finish(Done(key, error=exc, elapsed_s=time.monotonic() - t0))
            else:
                finish(Done(key, value=value, elapsed_s=time.monotonic() - t0))

    def spawn() -> None:
        threading.Thread(target=worker, daemon=True, name="fan-out").start()

    for _ in range(max(1, min(concurrency, len(keys)))):
        spawn()
    while not all_done.wait(timeout=0.05):
        if deadline_s is None:
            continue
        now = time.monotonic()
        with lock:
            overdue = [k for k, t0 in started.items()
                       if k not in claimed and now - t0 > deadline_s]
        for key in overdue:
            finish(Done(key, timed_out=True, elapsed_s=now - started[key]))
            if not work_q.empty():
                spawn()  # the abandoned worker is stuck: keep the pool at its size
    if callback_errors:
        raise callback_errors[0]
    return [results[k] for k in keys]
