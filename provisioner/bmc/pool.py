"""Fan-out over many BMCs: bounded concurrency, a deadline per node, a result per node.

Workers are daemon threads, so a BMC that hangs past its deadline is abandoned (marked
failed) and never holds up the others or the process exit.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from provisioner.bmc.base import BmcDriver, BmcTarget
from provisioner.errors import BmcError, BmcTimeout

T = TypeVar("T")

DEFAULT_CONCURRENCY = 256  # sized for hundreds of BMCs: threads mostly wait on the network


@dataclass(frozen=True)
class NodeResult(Generic[T]):
    node: str
    ok: bool
    value: T | None = None
    error: str | None = None
    error_kind: str | None = None
    elapsed_s: float = 0.0


ProgressFn = Callable[[str, str, str], None]  # (node, phase: start|ok|failed, detail)


def run_many(targets: Sequence[BmcTarget], op: Callable[[BmcDriver], T],
             make_driver: Callable[[BmcTarget], BmcDriver], *,
             concurrency: int = DEFAULT_CONCURRENCY, node_timeout_s: float = 120.0,
             progress: ProgressFn | None = None) -> list[NodeResult[T]]:
    """Run `op` on every target's driver; results come back in the targets' order."""
    results: dict[str, NodeResult[T]] = {}
    started: dict[str, float] = {}
    lock = threading.Lock()
    done = threading.Event()
    work: queue.Queue[BmcTarget] = queue.Queue()
    for t in targets:
        work.put(t)
    total = len(targets)

    def finish(result: NodeResult[T]) -> None:
        with lock:
            if result.node in results:  # already timed out by the watchdog
                return
            results[result.node] = result
            if len(results) == total:
                done.set()
        if progress:
            progress(result.node, "ok" if result.ok else "failed",
                     result.error or "")

    def worker() -> None:
        while True:
            try:
                target = work.get_nowait()
            except queue.Empty:
                return
            t0 = time.monotonic()
            with lock:
                started[target.node] = t0
            if progress:
                progress(target.node, "start", "")
            driver: BmcDriver | None = None
            try:
                driver = make_driver(target)
                driver.validate()
                value = op(driver)
                finish(NodeResult(target.node, True, value, elapsed_s=time.monotonic() - t0))
            except BmcError as exc:
                finish(NodeResult(target.node, False, error=str(exc),
                                  error_kind=type(exc).__name__,
                                  elapsed_s=time.monotonic() - t0))
            except Exception as exc:  # a bug or an unexpected library error: keep going
                finish(NodeResult(target.node, False,
                                  error=f"{target.node}: unexpected {type(exc).__name__}",
                                  error_kind="InternalError",
                                  elapsed_s=time.monotonic() - t0))
            finally:
                if driver is not None:
                    with contextlib.suppress(Exception):  # closing is best effort
                        driver.close()

    def spawn() -> None:
        threading.Thread(target=worker, daemon=True, name="bmc-worker").start()

    if total == 0:
        return []
    for _ in range(max(1, min(concurrency, total))):
        spawn()

    while not done.wait(timeout=0.1):
        now = time.monotonic()
        with lock:
            overdue = [n for n, t0 in started.items()
                       if n not in results and now - t0 > node_timeout_s]
        for node in overdue:
            err = BmcTimeout(f"{node}: no result after {node_timeout_s:g} s; abandoned")
            finish(NodeResult(node, False, error=str(err), error_kind="BmcTimeout",
                              elapsed_s=now - started[node]))
            if not work.empty():
                spawn()  # the abandoned worker is stuck: keep the pool at its size
    return [results[t.node] for t in targets]
