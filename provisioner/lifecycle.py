"""The node lifecycle as data: phases, the allowed moves between them, and the step that
leaves each phase. The state store refuses any other move; `up`, `plan` and `status` (and
later `add` and `upgrade`) read the same table.

A phase is where a node *is*; a step moves it, and the move is committed only after the
step finished (one transaction with its event). Two phases of the upgrade path are entered
when a long step *begins* so that a killed run shows the truth: `draining` (evictions under
way) and `upgrading` (packages may be half-moved); a resumed run repeats that step, which
is safe because eviction and the roles are idempotent. References: ironic's provision
states, MAAS node statuses, Metal3's BareMetalHost states, and the GPU Operator's upgrade
state machine (cordon, drain, upgrade, validate, uncordon).

    discovered --enroll--> enrolled --inspect--> inspected --boot--> booting
        --wait_os--> os_ready --configure--> configured --verify--> verified --ready--> ready
    ready --cordon--> cordoned --drain--> draining --drain--> upgrading
        --upgrade--> configured --verify--> verified --uncordon--> ready
    configured | verified --retarget--> upgrading (resumed toward another bundle)
    upgrading | configured | verified --recordon--> cordoned (resumed after an uncordon by
        hand: drained again, then its roles and gate)
    any working phase --(its step fails)--> failed --retry--> the phase it failed in
    any phase --maintenance--> maintenance --release--> enrolled
    a phase on the bring-up path --rewind--> an earlier one (--from-phase, operator's word)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    DISCOVERED = "discovered"
    ENROLLED = "enrolled"
    INSPECTED = "inspected"
    BOOTING = "booting"
    OS_READY = "os_ready"
    CONFIGURED = "configured"
    VERIFIED = "verified"
    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"
    UPGRADING = "upgrading"
    FAILED = "failed"
    MAINTENANCE = "maintenance"


# The bring-up path of `up`, in order (--from-phase choices, plan's step lists).
LIFECYCLE: tuple[Phase, ...] = (Phase.ENROLLED, Phase.INSPECTED, Phase.BOOTING,
                                Phase.OS_READY, Phase.CONFIGURED, Phase.VERIFIED, Phase.READY)
# The rolling-upgrade path from ready back to ready.
UPGRADE_PATH: tuple[Phase, ...] = (Phase.READY, Phase.CORDONED, Phase.DRAINING,
                                   Phase.UPGRADING, Phase.CONFIGURED, Phase.VERIFIED,
                                   Phase.READY)


@dataclass(frozen=True)
class Move:
    """One allowed edge: `step` takes a node from `source` to `target`; `path` names the
    workflow path it belongs to (up: bring-up, upgrade: rolling upgrade, admin)."""

    source: Phase
    step: str
    target: Phase
    path: str = "up"


MOVES: tuple[Move, ...] = (
    Move(Phase.DISCOVERED, "enroll", Phase.ENROLLED, "add"),
    Move(Phase.ENROLLED, "inspect", Phase.INSPECTED),
    Move(Phase.INSPECTED, "boot", Phase.BOOTING),
    Move(Phase.BOOTING, "wait_os", Phase.OS_READY),
    Move(Phase.OS_READY, "configure", Phase.CONFIGURED),
    Move(Phase.CONFIGURED, "verify", Phase.VERIFIED),
    Move(Phase.VERIFIED, "ready", Phase.READY),
    Move(Phase.READY, "cordon", Phase.CORDONED, "upgrade"),
    Move(Phase.CORDONED, "drain", Phase.DRAINING, "upgrade"),
    Move(Phase.DRAINING, "drain", Phase.UPGRADING, "upgrade"),
    Move(Phase.UPGRADING, "upgrade", Phase.CONFIGURED, "upgrade"),
    Move(Phase.CONFIGURED, "verify", Phase.VERIFIED, "upgrade"),
    Move(Phase.VERIFIED, "uncordon", Phase.READY, "upgrade"),
    # an upgrade resumed toward another bundle than the one the roles ran at (a rollback
    # after a failed gate): the roles run again
    Move(Phase.CONFIGURED, "retarget", Phase.UPGRADING, "upgrade"),
    Move(Phase.VERIFIED, "retarget", Phase.UPGRADING, "upgrade"),
    # a drained node uncordoned (by hand) before its gate or uncordon: cordoned and drained
    # again (pods may have landed on it; the gate's diagnostic needs the GPUs idle), then its
    # roles run again (idempotent)
    Move(Phase.UPGRADING, "recordon", Phase.CORDONED, "upgrade"),
    Move(Phase.CONFIGURED, "recordon", Phase.CORDONED, "upgrade"),
    Move(Phase.VERIFIED, "recordon", Phase.CORDONED, "upgrade"),
    # an operator takes a node out of service and gives it back (re-inspected)
    Move(Phase.MAINTENANCE, "release", Phase.ENROLLED, "admin"),
)

# Phases a node can fail out of: every phase some step leaves.
WORKING: frozenset[Phase] = frozenset(m.source for m in MOVES) - {Phase.MAINTENANCE}

# The step that moves a node out of each phase on the bring-up path (`up`).
STEP_FROM: dict[Phase, str] = {m.source: m.step for m in MOVES if m.path == "up"}
UP_STEPS: tuple[str, ...] = tuple(STEP_FROM[p] for p in LIFECYCLE if p in STEP_FROM)
# Not yet powered on by `up`: the BMC steps are ahead, and the rack budget gate applies.
BEFORE_POWER_ON: frozenset[Phase] = frozenset({Phase.ENROLLED, Phase.INSPECTED})
# Powered on by `up` (or further): counted as drawing power in `status`.
POWERED: frozenset[Phase] = frozenset(LIFECYCLE[LIFECYCLE.index(Phase.BOOTING):]
                                      + UPGRADE_PATH)

_EDGES: frozenset[tuple[Phase, Phase]] = frozenset((m.source, m.target) for m in MOVES)


def allowed(source: Phase, target: Phase, failed_phase: Phase | None = None) -> str | None:
    """The kind of move from `source` to `target` (a step name, 'fail', 'retry', 'rewind',
    'maintenance'), or None when the lifecycle forbids it. `failed_phase` is where a failed
    node failed: it may only be retried from there (or rewound, or taken out of service)."""
    if (source, target) in _EDGES:  # the same edge may serve two paths (verify)
        return next(m.step for m in MOVES if m.source is source and m.target is target)
    if target is Phase.FAILED:
        return "fail" if source in WORKING else None
    if target is Phase.MAINTENANCE:
        return "maintenance" if source is not Phase.MAINTENANCE else None
    if source is Phase.FAILED:
        if target is failed_phase:
            return "retry"
        source = failed_phase or Phase.ENROLLED
    if source in LIFECYCLE and target in LIFECYCLE \
            and LIFECYCLE.index(target) < LIFECYCLE.index(source):
        return "rewind"
    return None


def steps_from(phase: Phase) -> list[str]:
    """The bring-up steps `up` runs for a node in `phase`, in order."""
    if phase not in LIFECYCLE:
        return []
    return [STEP_FROM[p] for p in LIFECYCLE[LIFECYCLE.index(phase):] if p in STEP_FROM]


def next_phase(phase: Phase) -> Phase | None:
    """The phase after `phase` on the bring-up path (None after ready)."""
    i = LIFECYCLE.index(phase)
    return LIFECYCLE[i + 1] if i + 1 < len(LIFECYCLE) else None
