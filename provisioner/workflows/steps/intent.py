"""Boot intents, written ahead: before the BMC is asked for a boot override or a power-on,
the boot step records which boot it is about to cause (a token, whether --reinstall named
the node, the run). The boot server reads the last intent when the node fetches its
user-data (the grant and the token of install.py); a resumed run reads it to tell its own
boot under way from a node nobody booted; the installer's report lands after it.

Kept in the state store's event log (events of kind install.INTENT and install.REPORTED):
nothing here is a secret, and a lost store loses only grants (the guard then refuses)."""

from __future__ import annotations

from dataclasses import dataclass

from provisioner import install
from provisioner.state import Event, StateStore


@dataclass(frozen=True)
class Intent:
    token: str
    reinstall: bool
    run_id: int | None
    event_id: int


def record(store: StateStore, host: str, *, run_id: int, token: str, reinstall: bool,
           resumed_from: int | None = None) -> None:
    """Write the intent before the BMC acts (the caller's next call is the BMC's)."""
    detail: dict[str, object] = {"intent_id": token, "reinstall": reinstall}
    if resumed_from is not None:
        detail["resumed_from_run"] = resumed_from
    store.record(host, install.INTENT, detail, run_id=run_id)


def _intent(e: Event) -> Intent:
    return Intent(str(e.detail.get("intent_id", "")), bool(e.detail.get("reinstall")), e.run_id,
                  e.id)


def last(store: StateStore, host: str) -> Intent | None:
    """The node's latest boot intent, or None."""
    found = store.events(host, install.INTENT)
    return _intent(found[-1]) if found else None


def report_after(store: StateStore, host: str, intent: Intent) -> str | None:
    """The installer's report (its guard refused) since `intent`, or None."""
    for e in reversed(store.events(host, install.REPORTED)):
        if e.id > intent.event_id:
            return str(e.detail.get("report", ""))
    return None


def _running(store: StateStore, run_id: int | None) -> bool:
    return any(r["id"] == run_id and r["status"] == "running" for r in store.runs(limit=100))


def served_nothing() -> dict[str, str]:
    """No intent (no state store, or no boot by the tool): no grant, no token."""
    return {install.GRANT: "", install.TOKEN: "none"}


def served(store: StateStore, host: str) -> dict[str, str]:
    """What the boot server fills into the node's user-data now: the boot token of its last
    intent, and the grant only while the run that named it with --reinstall runs."""
    intent = last(store, host)
    if intent is None:
        return served_nothing()
    granted = intent.reinstall and _running(store, intent.run_id)
    return {install.GRANT: intent.token if granted else "", install.TOKEN: intent.token}


def record_report(store: StateStore, host: str, text: str) -> None:
    """The installer's report, recorded against the boot it answers."""
    intent = last(store, host)
    store.record(host, install.REPORTED,
                 {"report": text or f"{install.REFUSED} (the installer gave no detail)",
                  "intent_id": intent.token if intent else None},
                 run_id=intent.run_id if intent else None)


def under_way(store: StateStore, host: str, run_id: int) -> Intent | None:
    """A boot another run asked for and never saw through (it was killed between its intent
    and its commit), with no report from the installer since: that boot may be installing
    now, and a second override would start it again."""
    intent = last(store, host)
    if intent is None or intent.run_id == run_id or report_after(store, host, intent):
        return None
    if any(e.id > intent.event_id and e.to_phase == "booting" for e in store.events(host)):
        return None  # that boot was committed: a later boot (a rewind) is a new one
    return intent
