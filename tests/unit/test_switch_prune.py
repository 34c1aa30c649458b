"""Stale port lines (cli_diff.stale) and `fabric push --prune` (ops._switch).

A change of the RoCE policy (PFC moved from priority 3 to 4) adds `priority-flow-control
priority 4 no-drop` beside the old line on EOS: the old one stays, the port is lossless on
both, and `fabric check --live` then disagrees with the hosts. There is no EOS simulator
here (docs/fabric.md), so `Eos` below is a transcript of the documented behaviour, kept
small. Lines go into a `configure session` (netmiko_driver): a refused line aborts it and
nothing is applied. A port's `mtu`, `description` and a queue's `random-detect ecn` hold one
value each: a new one replaces the old, and `no mtu ANYTHING` clears it. A DSCP maps to one
traffic class. PFC priorities add up, and `no LINE` removes that line, except a queue's
`no priority` (round-robin): a setting of its own, shown in the queue's block.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioner.fabric import RENDERERS, PortSpec, SwitchSpec
from provisioner.inventory.models import Roce
from provisioner.roce import policy
from provisioner.switches import cli_diff
from provisioner.switches.base import SentLines
from provisioner.switches.ops import _switch

SINGLE = ("mtu", "description", "random-detect")  # one value per block: replaced
SCHEDULING = ("no priority", "priority strict")  # a queue's one scheduling setting


def _key(line: str) -> str:
    """What makes two lines one setting: a single-valued word, or a DSCP's map."""
    words = line.split()
    if line in SCHEDULING:
        return "priority"
    if words[0] in SINGLE:
        return words[0]
    if words[:3] == ["qos", "map", "dscp"]:
        return " ".join(words[:4])
    return line


class Eos:
    def __init__(self, running: str, refuse: str = "") -> None:
        self.lines: list[cli_diff.Path] = cli_diff.paths(running)
        self.refuse = refuse
        self.ignore: set[str] = set()  # `no` lines accepted but without effect
        self.collateral: dict[str, str] = {}  # a `no` line that also clears another
        self.saved = 0

    def running_config(self) -> str:
        return "".join("   " * (len(p) - 1) + p[-1] + "\n" for p in self.lines)

    def _set(self, p: cli_diff.Path) -> None:
        if p in self.lines:
            return
        for i, q in enumerate(self.lines):
            if q[:-1] == p[:-1] and _key(q[-1]) == _key(p[-1]):
                self.lines[i] = p
                return
        under = [i for i, q in enumerate(self.lines) if q[:len(p) - 1] == p[:-1]]
        self.lines.insert(under[-1] + 1 if under else len(self.lines), p)

    def _drop(self, mode: cli_diff.Path, line: str) -> None:
        self.lines = [q for q in self.lines
                      if not (q[:-1] == mode and (q[-1] == line or (_key(q[-1]) == _key(line)
                                                  and _key(line) in SINGLE)))]

    def apply(self, commands: Sequence[str]) -> SentLines:
        if self.refuse in commands:  # the session is aborted: nothing took effect
            return SentLines((), self.refuse, "% Invalid input; session aborted")
        mode: cli_diff.Path = ()
        for c in commands:
            if c.startswith(("interface ", "qos map ")):
                mode = ()
            if c in SCHEDULING:
                self._set((*mode, c))
            elif c.startswith("no ") and c not in self.ignore:
                self._drop(mode, c[3:])
                if c in self.collateral:
                    self._drop(mode, self.collateral[c])
            elif not c.startswith("no "):
                self._set((*mode, c))
                if c.startswith(("interface ", "tx-queue ")):
                    mode = (*mode, c)
        return SentLines(tuple(commands))

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
OLD_LABEL = cli_diff.label(OLD_PORT)


def _moved_from_3_to_4() -> tuple[Eos, str]:
    """A switch pushed with PFC on 3 and an MTU of 1500 set by hand, now rendered with 4;
    another port (not cabled to the site) has PFC on 3 too."""
    drv = Eos(_desired(3).replace("mtu 9214", "mtu 1500"))
    drv.lines.append(("interface Ethernet7",))
    drv.lines.append(("interface Ethernet7", "priority-flow-control priority 3 no-drop"))
    return drv, _desired(4)


def test_stale_lines_are_port_lines_shaped_like_rendered_ones() -> None:
    drv, desired = _moved_from_3_to_4()
    got = cli_diff.stale(desired, drv.running_config())
    # the old PFC line, and the MTU until a push replaces it; not the other port, the
    # DSCP map (top level), the old queue's ECN (another block) or a header
    assert got == [("interface Ethernet1", "mtu 1500"), OLD_PORT]
    assert cli_diff.stale(desired, desired) == []
    assert cli_diff.stale(desired, _desired(4, ("Ethernet1", "Ethernet7"))) == []


def test_diff_lists_stale_lines_and_push_leaves_them_unless_asked() -> None:
    drv, desired = _moved_from_3_to_4()
    diff = _switch(drv, "leaf01", "eos", desired, push=False)
    assert diff.status == "changes"
    assert diff.stale == ("interface Ethernet1 > mtu 1500", OLD_LABEL)

    out = _switch(drv, "leaf01", "eos", desired, push=True)
    assert out.status == "pushed" and drv.saved == 1 and out.pruned == ()
    assert out.stale == (OLD_LABEL,)  # the new MTU replaced the old one
    assert OLD_PORT in drv.lines
    again = _switch(drv, "leaf01", "eos", desired, push=True)
    assert again.status == "unchanged" and again.stale == (OLD_LABEL,)


def test_prune_removes_the_stale_lines_and_nothing_else() -> None:
    drv, desired = _moved_from_3_to_4()
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "pushed" and drv.saved == 1, out.error
    assert out.pruned == (OLD_LABEL,) and out.stale == ()
    assert out.commands[-2:] == ("interface Ethernet1",
                                 "no priority-flow-control priority 3 no-drop")
    assert OLD_PORT not in drv.lines and ("interface Ethernet1", "tx-queue 4") in drv.lines
    assert ("interface Ethernet7", "priority-flow-control priority 3 no-drop") in drv.lines
    assert ("interface Ethernet1", "mtu 9214") in drv.lines
    assert cli_diff.stale(desired, drv.running_config()) == []
    assert _switch(drv, "leaf01", "eos", desired, push=True, prune=True).status == "unchanged"


def test_prune_alone_runs_when_nothing_is_missing() -> None:
    drv, desired = _moved_from_3_to_4()
    _switch(drv, "leaf01", "eos", desired, push=True)
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "pushed" and out.pruned == (OLD_LABEL,)
    assert out.commands == ("interface Ethernet1", "no priority-flow-control priority 3 no-drop")


def test_an_aborted_prune_removes_nothing_and_keeps_the_push() -> None:
    drv, desired = _moved_from_3_to_4()
    drv.refuse = "no priority-flow-control priority 3 no-drop"
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "failed" and not out.ok
    assert "session aborted" in (out.error or "") and "nothing was removed" in (out.error or "")
    assert "rendered lines are in place and saved" in (out.error or "") and drv.saved == 1
    assert OLD_PORT in drv.lines and out.pruned == () and out.stale == (OLD_LABEL,)
    assert cli_diff.plan(desired, drv.running_config()) == []


def test_a_line_still_there_after_its_removal_fails_the_switch() -> None:
    drv, desired = _moved_from_3_to_4()
    drv.ignore.add("no priority-flow-control priority 3 no-drop")
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "failed" and f"'{OLD_LABEL}' still there" in (out.error or "")
    assert out.stale == (OLD_LABEL,) and drv.saved == 1


def test_a_removal_that_takes_a_rendered_line_is_put_back() -> None:
    """`no` of one setting clearing another (as EOS's `no mtu X` clears any MTU) must not
    leave the port without a rendered line: it is sent again, and nothing unrendered saved."""
    drv, desired = _moved_from_3_to_4()
    drv.collateral["no priority-flow-control priority 3 no-drop"] = "priority-flow-control on"
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "failed", out
    assert "also removed 'interface Ethernet1 > priority-flow-control on'" in (out.error or "")
    assert "put back as it was" in (out.error or "") and drv.saved == 1
    assert OLD_PORT in drv.lines and cli_diff.plan(desired, drv.running_config()) == []
    assert out.undone == ("interface Ethernet1", "priority-flow-control priority 3 no-drop",
                          "interface Ethernet1", "priority-flow-control on")


def test_a_removal_that_takes_an_operators_line_is_put_back() -> None:
    drv, desired = _moved_from_3_to_4()
    mine = ("interface Ethernet1", "service-profile OPERATOR")
    drv.lines.insert(drv.lines.index(OLD_PORT), mine)
    drv.collateral["no priority-flow-control priority 3 no-drop"] = mine[1]
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "failed" and "service-profile OPERATOR" in (out.error or "")
    assert mine in drv.lines and OLD_PORT in drv.lines and out.pruned == ()


def test_a_refused_put_back_still_sends_the_rendered_line_again() -> None:
    """The put-back of the stale line is refused (EOS aborts that session): the rendered
    line the removal took goes in a session of its own, so the port keeps PFC on."""
    drv, desired = _moved_from_3_to_4()
    drv.collateral["no priority-flow-control priority 3 no-drop"] = "priority-flow-control on"
    drv.refuse = "priority-flow-control priority 3 no-drop"
    out = _switch(drv, "leaf01", "eos", desired, push=True, prune=True)
    assert out.status == "failed" and "NOT put back: " + OLD_LABEL in (out.error or "")
    assert ("interface Ethernet1", "priority-flow-control on") in drv.lines
    assert cli_diff.plan(desired, drv.running_config()) == [] and drv.saved == 1
    assert out.pruned == (OLD_LABEL,) and out.stale == ()


def test_up_says_stale_lines_were_left() -> None:
    from provisioner.workflows.steps.fabric import _summary

    drv, desired = _moved_from_3_to_4()
    text = _summary(_switch(drv, "leaf01", "eos", desired, push=True))
    assert "1 stale line(s) left in place" in text and OLD_LABEL in text and "--prune" in text
