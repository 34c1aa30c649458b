"""Stale port lines (cli_diff.stale) and `fabric push --prune` (ops._switch).

A change of the RoCE policy (PFC moved from priority 3 to 4) adds `priority-flow-control
priority 4 no-drop` beside the old line on EOS: the old one stays, the port is lossless on
both, and `fabric check --live` then disagrees with the hosts. There is no EOS simulator
here (docs/fabric.md), so `Eos` below is a transcript of the documented behaviour, kept
small: a port's `mtu`, `description` and a queue's `random-detect ecn` hold one value each
(a new one replaces the old), PFC priorities and DSCP maps add up, `no LINE` removes LINE.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.fabric import RENDERERS, PortSpec, SwitchSpec
from provisioner.inventory.models import Roce
from provisioner.roce import policy
from provisioner.switches import cli_diff
from provisioner.switches.base import ApplyResult
from provisioner.switches.ops import _switch

SINGLE = ("mtu", "description", "random-detect")  # one value per block: replaced


class Eos:
    def __init__(self, running: str, refuse: str = "") -> None:
        self.lines: list[cli_diff.Path] = cli_diff.paths(running)
        self.refuse = refuse
        self.saved = 0
        self.sent: list[tuple[str, ...]] = []

    def running_config(self) -> str:
        return "".join("   " * (len(p) - 1) + p[-1] + "\n" for p in self.lines)

    def _set(self, p: cli_diff.Path) -> None:
        if p in self.lines:
            return
        word = p[-1].split()[0]
        for i, q in enumerate(self.lines):
            if q[:-1] == p[:-1] and word in SINGLE and q[-1].split()[0] == word:
                self.lines[i] = p
                return
        under = [i for i, q in enumerate(self.lines) if q[:len(p) - 1] == p[:-1]]
        self.lines.insert(under[-1] + 1 if under else len(self.lines), p)

    def apply(self, commands: Sequence[str]) -> ApplyResult:
        self.sent.append(tuple(commands))
        mode: cli_diff.Path = ()
        done: list[str] = []
        for c in commands:
            if self.refuse and c == self.refuse:
                return ApplyResult(tuple(done), c, "% Invalid input")
            if c.startswith(("interface ", "qos map ")):
                mode = ()
            if c.startswith("no "):
                gone = (*mode, c[3:])
                self.lines = [q for q in self.lines if q[:len(gone)] != gone]
            else:
                self._set((*mode, c))
                if c.startswith(("interface ", "tx-queue ")):
                    mode = (*mode, c)
            done.append(c)
        return ApplyResult(tuple(done))

    def save(self) -> None:
        self.saved += 1

    def close(self) -> None:
        pass


def _desired(priority: int, ports: tuple[str, ...] = ("Ethernet1",)) -> str:
    roce = Roce(priority=priority, cnp_priority=6)
    spec = SwitchSpec("leaf01", "eos", policy(roce, "eos", mtu_bytes=9216),
                      tuple(PortSpec(p, f"dgx0{i} roce", 9216) for i, p in enumerate(ports, 1)))
    return RENDERERS["eos"].render(spec)


OLD_PORT = ("interface Ethernet1", "priority-flow-control priority 3 no-drop")
OLD_ECN = ("interface Ethernet1", "tx-queue 3")


def _moved_from_3_to_4() -> tuple[Eos, str]:
    """A switch pushed with PFC on 3 and an MTU of 1500 set by hand, now rendered with 4."""
    drv = Eos(_desired(3).replace("mtu 9214", "mtu 1500"))
    drv.lines.append(("interface Ethernet7",))
    drv.lines.append(("interface Ethernet7", "priority-flow-control priority 3 no-drop"))
    return drv, _desired(4)


def test_stale_lines_are_port_lines_shaped_like_rendered_ones() -> None:
    drv, desired = _moved_from_3_to_4()
    got = cli_diff.stale(desired, drv.running_config())
    assert OLD_PORT in got
    assert (*OLD_ECN, next(p[-1] for p in drv.lines if p[:2] == OLD_ECN and len(p) == 3)) in got
    assert ("interface Ethernet1", "mtu 1500") in got  # until a push replaces it
    # another port, top-level DSCP maps and lines of another shape are never stale
    assert all(p[0] == "interface Ethernet1" and len(p) > 1 for p in got)
    assert not any("description" in p[-1] or "priority-flow-control on" in p[-1] for p in got)
    assert cli_diff.stale(desired, desired) == []


def test_diff_lists_stale_lines_and_push_leaves_them_unless_asked() -> None:
    drv, desired = _moved_from_3_to_4()
    diff = _switch(drv, "leaf01", "eos", desired, push=False)
    assert diff.status == "changes" and cli_diff.label(OLD_PORT) in diff.stale
    assert "interface Ethernet1 > mtu 1500" in diff.stale

    out = _switch(drv, "leaf01", "eos", desired, push=True)
    assert out.status == "pushed" and drv.saved == 1 and out.pruned == ()
    # the new MTU replaced the old one; PFC on 3 and ECN on queue 3 are still there
    assert "interface Ethernet1 > mtu 1500" not in out.stale
    assert cli_diff.label(OLD_PORT) in out.stale and len(out.stale) == 2
    assert OLD_PORT in drv.lines
    again = _switch(drv, "leaf01", "eos", desired, push=True)
    assert again.status == "unchanged" and again.stale == out.stale


def test_prune_removes_the_stale_lines_and_nothing_else() -> None:
    drv, desired = _moved_from_3_to_4()
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "pushed" and drv.saved == 1, out.error
    assert cli_diff.label(OLD_PORT) in out.pruned and len(out.pruned) == 2
    assert "no priority-flow-control priority 3 no-drop" in out.commands
    assert OLD_PORT not in drv.lines and ("interface Ethernet1", "tx-queue 4") in drv.lines
    assert ("interface Ethernet7", "priority-flow-control priority 3 no-drop") in drv.lines
    assert ("qos map dscp 26 to traffic-class 3",) in drv.lines  # top level: not owned
    assert cli_diff.stale(desired, drv.running_config()) == []
    assert _switch(drv, "leaf01", "eos", desired, push=True, prune=True).status == "unchanged"


def test_prune_alone_runs_when_nothing_is_missing() -> None:
    drv, desired = _moved_from_3_to_4()
    _switch(drv, "leaf01", "eos", desired, push=True)
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "pushed" and len(out.pruned) == 2
    assert all(c.startswith(("interface", "tx-queue", "no ")) for c in out.commands)


def test_a_refused_prune_puts_the_lines_back_and_keeps_the_push() -> None:
    drv, desired = _moved_from_3_to_4()
    ecn = next(p for p in drv.lines if p[:2] == OLD_ECN and len(p) == 3)
    drv.refuse = f"no {ecn[-1]}"
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "failed" and not out.ok
    assert "prune:" in (out.error or "") and "put back" in (out.error or "")
    assert "rendered lines were pushed and saved" in (out.error or "") and drv.saved == 1
    assert OLD_PORT in drv.lines and out.pruned == ()  # the accepted removal was undone
    assert out.undone == ("interface Ethernet1", "priority-flow-control priority 3 no-drop")
    assert cli_diff.plan(desired, drv.running_config()) == []


def test_up_says_stale_lines_were_left() -> None:
    from provisioner.workflows.steps.fabric import _summary

    drv, desired = _moved_from_3_to_4()
    text = _summary(_switch(drv, "leaf01", "eos", desired, push=True))
    assert "2 stale line(s) left in place" in text and "--prune" in text
