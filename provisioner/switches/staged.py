"""Pushes for the switch OSes configured as one document over a Linux shell: Cumulus NVUE
and SONiC. Unlike the line-based CLIs (ops._switch), these have their own transactions, so
a failed push is undone by the OS, not by compensating lines:

- NVUE: snapshot the applied config (`nv config show -o yaml`), `nv config patch` the
  rendered YAML into a pending revision, `nv config apply --assume-yes`. A refused patch is
  dropped with `nv config detach` (nothing was applied); a failure at or after the apply
  goes back with `nv config replace <snapshot>` + `nv config apply`. Then `nv config save`
  (needed up to Cumulus 5.8; 5.9+ saves on apply). NVIDIA NVUE reference, "Config Commands".
- SONiC: `config checkpoint`, `config apply-patch` of an RFC 6902 patch computed against
  `show runningconfiguration all`, `config rollback` on any failure, `config save -y`,
  `config delete-checkpoint`. sonic-net/sonic-utilities config/main.py (Generic Config
  Updater); sonic-net/sonic-mgmt tests/generic_config_updater use the same sequence.

Neither OS has a simulator here: the sequences are unit-tested against recorded, documented
outputs (tests/unit/test_switch_staged.py), never against a device (docs/fabric.md).
What was applied is measured, not assumed: the managed settings are read back before, after
the apply, and after any rollback, and the outcome lists exactly those that changed and
those still changed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import yaml

from provisioner.errors import FabricError
from provisioner.fabric.sonic import patch as sonic_patch
from provisioner.switches.base import SwitchOutcome

Leaves = dict[str, str]


@runtime_checkable
class Shell(Protocol):
    """A login shell on the switch (the netmiko edge implements it)."""

    def run(self, command: str) -> tuple[int, str]: ...  # exit status, output

    def put(self, path: str, text: str) -> None: ...  # write a file on the switch

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Flavor:
    nos: str
    show: str  # prints the whole running config as one document
    candidate: str  # where the payload goes on the switch
    snapshot: tuple[str, ...]  # before the change: what a rollback returns to
    stage: tuple[str, ...]  # load the payload without applying it
    apply: tuple[str, ...]
    discard: tuple[str, ...]  # drop a staged, unapplied change
    rollback: tuple[str, ...]  # back to the snapshot after an apply
    save: tuple[str, ...]
    cleanup: tuple[str, ...]
    leaves: Callable[[str], Leaves]  # the document as path -> value
    payload: Callable[[str, str], str]  # (desired, running) -> the file to send


EMPTY = "{}"  # an empty mapping is a setting too: NVUE's `breakout: {2x: {}}`


def _flatten(node: Any, at: str, out: Leaves) -> None:
    if isinstance(node, dict) and node:
        for k, v in node.items():
            _flatten(v, f"{at}/{k}", out)
    elif isinstance(node, dict):
        out[at] = EMPTY
    elif isinstance(node, bool):
        out[at] = "on" if node else "off"  # NVUE prints on/off; YAML 1.1 reads them as bools
    else:
        out[at] = str(node)


def nvue_leaves(text: str) -> Leaves:
    doc = yaml.safe_load(text) or []
    if not isinstance(doc, list):
        raise FabricError("NVUE config is not a list of `set:` / `header:` items")
    out: Leaves = {}
    for item in doc:
        if isinstance(item, dict) and isinstance(item.get("set"), dict):
            _flatten(item["set"], "", out)
    return out


def sonic_leaves(text: str) -> Leaves:
    try:
        db = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FabricError(f"SONiC running config is not JSON (line {exc.lineno})") from None
    out: Leaves = {}
    _flatten(db, "", out)
    return out


def _sonic_patch(desired: str, running: str) -> str:
    return json.dumps(sonic_patch(json.loads(running), json.loads(desired)), indent=1) + "\n"


NVUE_CANDIDATE = "/tmp/provision-fabric.yaml"  # noqa: S108 - on the switch, removed after
NVUE_BEFORE = "/tmp/provision-fabric-before.yaml"  # noqa: S108
SONIC_CANDIDATE = "/tmp/provision-fabric-patch.json"  # noqa: S108
SONIC_CHECKPOINT = "provision-fabric"

FLAVORS: dict[str, Flavor] = {
    "cumulus": Flavor(
        "cumulus", "nv config show -o yaml", NVUE_CANDIDATE,
        snapshot=(f"nv config show -o yaml > {NVUE_BEFORE}",),
        stage=(f"nv config patch {NVUE_CANDIDATE}",),
        apply=("nv config apply --assume-yes",),
        discard=("nv config detach",),
        rollback=(f"nv config replace {NVUE_BEFORE}", "nv config apply --assume-yes"),
        save=("nv config save",),
        cleanup=(f"rm -f {NVUE_CANDIDATE} {NVUE_BEFORE}",),
        leaves=nvue_leaves, payload=lambda desired, running: desired),
    "sonic": Flavor(
        "sonic", "show runningconfiguration all", SONIC_CANDIDATE,
        snapshot=(f"sudo config checkpoint {SONIC_CHECKPOINT}",),
        stage=(),
        apply=(f"sudo config apply-patch {SONIC_CANDIDATE}",),
        discard=(),
        rollback=(f"sudo config rollback {SONIC_CHECKPOINT}",),
        save=("sudo config save -y",),
        cleanup=(f"sudo config delete-checkpoint {SONIC_CHECKPOINT}",
                 f"rm -f {SONIC_CANDIDATE}"),
        leaves=sonic_leaves, payload=_sonic_patch),
}


def missing(flavor: Flavor, desired: str, running: str) -> list[str]:
    """Desired settings the running config lacks or holds with another value."""
    have = flavor.leaves(running)
    return [p for p, v in flavor.leaves(desired).items()
            if have.get(p) != v and not (v == EMPTY and _below(p, have))]


def _below(path: str, have: Leaves) -> bool:
    """Whether the running config has something under `path` (the switch filled in what an
    empty mapping leaves to its defaults, as `lanes-per-port` under a breakout mode)."""
    return any(p.startswith(path + "/") for p in have)


class _Failed(Exception):
    def __init__(self, command: str, output: str) -> None:
        super().__init__(command)
        self.command, self.output = command, output


def _run_all(shell: Shell, commands: Sequence[str], sent: list[str]) -> None:
    for cmd in commands:
        sent.append(cmd)
        rc, out = shell.run(cmd)
        if rc != 0:
            raise _Failed(cmd, _last(out))


def _last(out: str) -> str:
    lines = [x.strip() for x in out.strip().splitlines() if x.strip()]
    return lines[-1][:200] if lines else "no output"


def run(shell: Shell, name: str, nos: str, desired: str, push: bool, *, unsaved: str = "",
        on_send: Callable[[str], None] | None = None) -> SwitchOutcome:
    """Diff (push=False) or push one NVUE/SONiC switch; roll back through the OS on failure.
    `applied` lists the managed settings that changed on the switch; `undone` the rollback
    commands sent. `unsaved`, `on_send`: as ops._switch (a killed push saved now)."""
    flavor = FLAVORS[nos]
    before_text = _show(shell, flavor)
    todo = missing(flavor, desired, before_text)
    if not todo:
        if push and unsaved:
            sent: list[str] = []
            try:
                _run_all(shell, flavor.save, sent)
            except _Failed as exc:
                return SwitchOutcome(name, nos, "failed", commands=tuple(sent),
                                     error=f"'{exc.command}' failed ({exc.output}): {unsaved}")
            return SwitchOutcome(name, nos, "unchanged", commands=tuple(sent), saved=True,
                                 note=f"saved: {unsaved}")
        return SwitchOutcome(name, nos, "unchanged", note=unsaved)
    diff = "\n".join(f"+ {p} = {flavor.leaves(desired)[p]}" for p in todo)
    payload = flavor.payload(desired, before_text)
    plan = (*flavor.snapshot, *flavor.stage, *flavor.apply, *flavor.save)
    if not push:
        return SwitchOutcome(name, nos, "changes", diff, plan, note=unsaved)
    if on_send is not None:
        on_send(name)
    sent = []
    try:
        _run_all(shell, flavor.snapshot, sent)
        shell.put(flavor.candidate, payload)
    except _Failed as exc:
        _cleanup(shell, flavor)
        return SwitchOutcome(name, nos, "failed", diff, tuple(sent),
                             error=f"'{exc.command}' failed ({exc.output}); nothing applied")
    except FabricError as exc:  # the payload could not be written
        _cleanup(shell, flavor)
        return SwitchOutcome(name, nos, "failed", diff, tuple(sent),
                             error=f"{exc}; nothing applied")
    try:
        _run_all(shell, flavor.stage, sent)
    except _Failed as exc:
        undo: list[str] = []
        with contextlib.suppress(_Failed):
            _run_all(shell, flavor.discard, undo)
        return _after_undo(shell, flavor, name, desired, before_text, diff, sent, (), undo,
                           f"'{exc.command}' refused ({exc.output}) before the apply")
    try:
        _run_all(shell, flavor.apply, sent)
        after = _show(shell, flavor)
        left = missing(flavor, desired, after)
        if left:
            raise _Failed("read-back", f"{len(left)} setting(s) missing after the apply, "
                          f"first {left[0]}")
        _run_all(shell, flavor.save, sent)
    except _Failed as exc:
        after_text = _show_or_none(shell, flavor)
        applied = (_changed(flavor, desired, before_text, after_text) if after_text
                   is not None else ("unknown: the switch could not be read",))
        undo = []
        try:
            _run_all(shell, flavor.rollback, undo)
        except _Failed as rb:
            _cleanup(shell, flavor)
            return SwitchOutcome(name, nos, "failed", diff, tuple(sent), applied, tuple(undo),
                                 f"'{exc.command}' failed ({exc.output}); rollback "
                                 f"'{rb.command}' failed too ({rb.output}): check {name} by hand")
        return _after_undo(shell, flavor, name, desired, before_text, diff, sent, applied, undo,
                           f"'{exc.command}' failed ({exc.output})")
    _cleanup(shell, flavor)
    return SwitchOutcome(name, nos, "pushed", diff, tuple(sent), tuple(todo), saved=True)


def _after_undo(shell: Shell, flavor: Flavor, name: str, desired: str, before_text: str,
                diff: str, sent: list[str], applied: Sequence[str], undo: list[str],
                problem: str) -> SwitchOutcome:
    """Read back after a discard/rollback: rolled back only if every managed setting is as
    it was before; otherwise failed, naming what is still changed."""
    now = _show_or_none(shell, flavor)
    _cleanup(shell, flavor)
    if now is None:
        return SwitchOutcome(name, flavor.nos, "failed", diff, tuple(sent), tuple(applied),
                             tuple(undo), f"{problem}; undone, but the switch could not be "
                             "read back to prove it")
    still = _changed(flavor, desired, before_text, now)
    if still:
        return SwitchOutcome(name, flavor.nos, "failed", diff, tuple(sent), tuple(applied),
                             tuple(undo), f"{problem}; undo incomplete, still changed: "
                             + ", ".join(still))
    return SwitchOutcome(name, flavor.nos, "rolled_back", diff, tuple(sent), tuple(applied),
                         tuple(undo), f"{problem}; undone, running config is as before")


def _changed(flavor: Flavor, desired: str, before: str, after: str) -> tuple[str, ...]:
    """Managed settings whose value differs between two reads."""
    b, a = flavor.leaves(before), flavor.leaves(after)
    return tuple(p for p in flavor.leaves(desired) if b.get(p) != a.get(p))


def _show(shell: Shell, flavor: Flavor) -> str:
    rc, out = shell.run(flavor.show)
    if rc != 0:
        raise FabricError(f"`{flavor.show}` failed: {_last(out)}")
    return out


def _show_or_none(shell: Shell, flavor: Flavor) -> str | None:
    try:
        return _show(shell, flavor)
    except FabricError:
        return None


def _cleanup(shell: Shell, flavor: Flavor) -> None:
    for cmd in flavor.cleanup:  # best effort: a leftover temp file or checkpoint is harmless
        shell.run(cmd)
