"""One BMC operation over many nodes: a driver per node, a result per node.

The concurrency (bounded daemon threads, a deadline per node, a hung BMC abandoned without
holding up the others or the process exit) is the step engine's one fan-out; this module
adds what is BMC-specific: open and validate a driver, close it, and name the error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from provisioner.bmc.base import BmcDriver, BmcTarget
from provisioner.errors import BmcError, BmcTimeout
from provisioner.fanout import Done, fan_out

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


def _result(done: Done[T], node_timeout_s: float) -> NodeResult[T]:
    if done.timed_out:
        err = BmcTimeout(f"{done.key}: no result after {node_timeout_s:g} s; abandoned")
        return NodeResult(done.key, False, error=str(err), error_kind="BmcTimeout",
                          elapsed_s=done.elapsed_s)
    if isinstance(done.error, BmcError):
        return NodeResult(done.key, False, error=str(done.error),
                          error_kind=type(done.error).__name__, elapsed_s=done.elapsed_s)
    if done.error is not None:  # a bug or an unexpected library error: keep going
        return NodeResult(done.key, False,
                          error=f"{done.key}: unexpected {type(done.error).__name__}",
                          error_kind="InternalError", elapsed_s=done.elapsed_s)
    return NodeResult(done.key, True, done.value, elapsed_s=done.elapsed_s)


def run_many(targets: Sequence[BmcTarget], op: Callable[[BmcDriver], T],
             make_driver: Callable[[BmcTarget], BmcDriver], *,
             concurrency: int = DEFAULT_CONCURRENCY, node_timeout_s: float = 120.0,
             progress: ProgressFn | None = None) -> list[NodeResult[T]]:
    """Run `op` on every target's driver; results come back in the targets' order."""
    by_node = {t.node: t for t in targets}

    def work(node: str) -> T:
        driver: BmcDriver | None = None
        try:
            driver = make_driver(by_node[node])
            driver.validate()
            return op(driver)
        finally:
            if driver is not None:
                with contextlib.suppress(Exception):  # closing is best effort
                    driver.close()

    def on_done(done: Done[T]) -> None:
        if progress:
            r = _result(done, node_timeout_s)
            progress(r.node, "ok" if r.ok else "failed", r.error or "")

    done = fan_out([t.node for t in targets], work, concurrency=concurrency,
                   deadline_s=node_timeout_s,
                   on_start=(lambda n: progress(n, "start", "")) if progress else None,
                   on_done=on_done)
    return [_result(d, node_timeout_s) for d in done]
