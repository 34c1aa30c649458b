"""`upgrade apply`'s summary lines: a move only where one happened."""

from __future__ import annotations

from provisioner.cli.upgrade import moved
from provisioner.results.upgrade import UpgradeNode


def _node(name: str, start: str, now: str, steps: list[str]) -> UpgradeNode:
    return UpgradeNode(hostname=name, start_phase=start, phase=now, failed_phase=None,
                       reason=None, steps=steps)


def test_untouched_and_not_started_nodes_are_not_shown_as_a_move():
    assert moved(_node("stor01", "ready", "ready", []), []) == "ready, untouched by this run"
    assert moved(_node("dgx02", "ready", "ready", []), ["dgx02"]) == \
        "ready, not started (the run stopped before its batch)"
    assert moved(_node("dgx01", "ready", "ready", ["cordon", "drain", "upgrade"]), []) == \
        "ready -> ready"
    assert moved(_node("dgx01", "ready", "cordoned", ["cordon"]), []) == "ready -> cordoned"
