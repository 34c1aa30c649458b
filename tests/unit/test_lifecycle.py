"""The lifecycle table is enforced by the state store: every move it does not allow is a
StateError that changes nothing. The legal moves are written out here by hand (not read
from lifecycle.py), so a change to the table has to be a deliberate change to this list."""

from __future__ import annotations

import sqlite3
from itertools import product

import pytest

from provisioner.errors import StateError
from provisioner.lifecycle import LIFECYCLE, Phase, steps_from
from provisioner.state import StateStore

P = Phase
BRING_UP = [P.ENROLLED, P.INSPECTED, P.BOOTING, P.OS_READY, P.CONFIGURED, P.VERIFIED,
            P.READY]
STEP_EDGES = {
    (P.DISCOVERED, P.ENROLLED), (P.ENROLLED, P.INSPECTED), (P.INSPECTED, P.BOOTING),
    (P.BOOTING, P.OS_READY), (P.OS_READY, P.CONFIGURED), (P.CONFIGURED, P.VERIFIED),
    (P.VERIFIED, P.READY), (P.READY, P.CORDONED), (P.CORDONED, P.DRAINING),
    (P.DRAINING, P.UPGRADING), (P.UPGRADING, P.CONFIGURED), (P.MAINTENANCE, P.ENROLLED),
    # an upgrade resumed toward another bundle: the roles run again
    (P.CONFIGURED, P.UPGRADING), (P.VERIFIED, P.UPGRADING),
    # a drained node someone uncordoned before its gate or uncordon: cordoned and drained
    # again (then its roles again)
    (P.UPGRADING, P.CORDONED), (P.CONFIGURED, P.CORDONED), (P.VERIFIED, P.CORDONED),
}
# phases some step leaves: a node can fail out of these
WORKING = {P.DISCOVERED, P.ENROLLED, P.INSPECTED, P.BOOTING, P.OS_READY, P.CONFIGURED,
           P.VERIFIED, P.READY, P.CORDONED, P.DRAINING, P.UPGRADING}
FAILED_IN = P.OS_READY  # where the FAILED test node failed


def legal(source: Phase, target: Phase) -> bool:
    if (source, target) in STEP_EDGES:
        return True
    if target is P.FAILED:
        return source in WORKING
    if target is P.MAINTENANCE:
        return source is not P.MAINTENANCE
    if source is P.FAILED:
        if target is FAILED_IN:
            return True  # retry where it failed
        source = FAILED_IN
    if source in BRING_UP and target in BRING_UP:
        return BRING_UP.index(target) < BRING_UP.index(source)  # rewind (--from-phase)
    return False


def _force(store: StateStore, host: str, phase: Phase) -> None:
    """Put a test node into any phase (bypassing the store, as only a test may)."""
    failed = FAILED_IN.value if phase is P.FAILED else None
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE nodes SET phase = ?, failed_phase = ? WHERE hostname = ?",
                   (phase.value, failed, host))
        db.execute("INSERT INTO events (at, hostname, kind, to_phase) VALUES "
                   "(0, ?, 'transition', ?)", (host, phase.value))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> StateStore:
    s = StateStore(tmp_path_factory.mktemp("lifecycle") / "state.db")
    s.enroll(["n"])
    return s


@pytest.mark.parametrize(("source", "target"), list(product(Phase, Phase)),
                         ids=lambda p: p.value)
def test_every_move_is_allowed_or_refused_as_the_table_says(store, source, target):
    _force(store, "n", source)
    events_before = len(store.events("n"))
    if legal(source, target):
        assert store.transition("n", target).phase is target
    else:
        with pytest.raises(StateError, match=f"no move from {source.value} to {target.value}"):
            store.transition("n", target)
        assert store.node("n").phase is source  # nothing changed
        assert len(store.events("n")) == events_before  # and nothing was logged


def test_a_new_node_starts_enrolled_or_discovered_only(tmp_path):
    s = StateStore(tmp_path / "state.db")
    assert s.enroll(["found01"], phase=P.DISCOVERED) == ["found01"]
    assert s.node("found01").phase is P.DISCOVERED
    with pytest.raises(StateError):
        s.enroll(["x"], phase=P.READY)


def test_up_steps_follow_the_bring_up_path():
    assert tuple(LIFECYCLE) == tuple(BRING_UP)
    assert steps_from(P.ENROLLED) == ["inspect", "boot", "wait_os", "configure", "verify",
                                      "ready"]
    assert steps_from(P.VERIFIED) == ["ready"]  # not the upgrade path's uncordon
    assert steps_from(P.READY) == [] and steps_from(P.CORDONED) == []
