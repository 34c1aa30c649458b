"""The switch driver interface (a Protocol, like bmc/base.py) and what a push reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from provisioner.secrets import Secret


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to reach one switch. The password stays a Secret until the edge."""

    hostname: str
    nos: str
    address: str
    port: int
    username: str
    password: Secret
    timeout_s: float = 20.0


Status = Literal["unchanged", "changes", "pushed", "rolled_back", "failed"]


@dataclass(frozen=True, slots=True)
class SwitchOutcome:
    switch: str
    nos: str
    status: Status
    diff: str = ""
    commands: tuple[str, ...] = ()
    # CLI dialects: lines the switch accepted; NVUE/SONiC: managed settings that changed
    applied: tuple[str, ...] = ()
    undone: tuple[str, ...] = ()  # compensating lines or rollback commands after a failure
    error: str | None = None
    # CLI dialects: lines like the rendered ones that the rendering lacks (cli_diff.stale),
    # as "block > line"; left in place unless pruned, and then listed in `pruned`
    stale: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()
    # this run saved the switch's config (a push; or, with nothing to send, a push killed
    # between its lines and the save: ops.unsaved); `note` says so, or that diff found one
    saved: bool = False
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("unchanged", "changes", "pushed")


@dataclass(frozen=True, slots=True)
class SentLines:
    """Commands sent in order: `applied` were accepted; `failed` (if any) was refused with
    `error` and nothing after it was sent."""

    applied: tuple[str, ...]
    failed: str | None = None
    error: str | None = None


class SwitchDriver(Protocol):
    def running_config(self) -> str: ...

    def apply(self, commands: Sequence[str]) -> SentLines: ...

    def save(self) -> None: ...

    def close(self) -> None: ...
