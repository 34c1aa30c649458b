"""Whether the site's `software:` pins still say what its nodes run.

`upgrade apply` records each node's bundle and versions in the state store (an `upgraded`
event); the site file keeps its own pins until someone edits them. A run that renders the
site's pins (`up` for a new or failed node, `add`, `run site.yml`) would put those versions
on the nodes it configures: a new node behind the cluster, or a whole site rolled back. The
core says so in the run's notes. What `up` refuses (downgrades): configuring a node whose
recorded bundle is newer than the site's pins, which would take its driver, fabric manager
and DCGM back and then fail at kubeadm (no downgrade), leaving a mixed stack; unless the
operator names the node (`up --allow-downgrade NODE`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from provisioner.inventory.bundle_models import from_software
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import servers
from provisioner.lifecycle import Phase
from provisioner.state import StateStore
from provisioner.upgrade.plan import components_on, direction

UPGRADED = "upgraded"  # the event kind that records a node's bundle and versions
# The rows the roles install at the pinned version (containerd and the charts are not
# pinned by them: upgrade plan warns of those; fabric manager, NSCQ and IMEX follow the
# driver).
COMPARED = ("nvidia_driver", "kernel_modules", "cuda", "doca", "dcgm", "container_toolkit",
            "kubernetes")
# What a bring-up at the site's pins must not take back below a node's bundle unnoticed.
NO_MOVING_BACK = ("nvidia_driver", "fabric_manager", "nscq", "imex", "cuda", "doca", "dcgm",
                  "kubernetes")


@dataclass(frozen=True)
class Downgrade:
    """A node the site's pins would move below the bundle recorded for it."""

    hostname: str
    bundle: str
    rows: tuple[str, ...]  # "nvidia_driver 570.148.08 -> 570.124.06"


def latest_upgraded(store: StateStore) -> dict[str, tuple[str, dict[str, str | None]]]:
    """Each upgraded node's last recorded bundle and versions, while they hold: a bring-up
    configure since (`up --reinstall`, a rewind) ran the roles at the site's pins, so the
    node runs those again and the record says nothing of it any more."""
    latest: dict[str, tuple[str, dict[str, str | None]]] = {}
    for ev in store.events():
        if not ev.hostname:
            continue
        if ev.kind == UPGRADED:
            latest[ev.hostname] = (str(ev.detail.get("bundle", "")),
                                   dict(ev.detail.get("versions", {})))
        elif (ev.kind == "transition" and ev.from_phase == Phase.OS_READY.value
              and ev.to_phase == Phase.CONFIGURED.value):
            latest.pop(ev.hostname, None)
    return latest


def note(loaded: LoadedSite, store: StateStore) -> str | None:
    """One line when some node's recorded bundle pins other versions than `software:`."""
    latest = latest_upgraded(store)
    if not latest:
        return None
    site = from_software(loaded.site.software).components()
    by_bundle: dict[str, list[str]] = {}
    rows: dict[str, list[str]] = {}
    for host, (bundle, versions) in sorted(latest.items()):
        diff = [f"{c} {versions.get(c)} (site: {site.get(c)})" for c in COMPARED
                if versions.get(c) != site.get(c)]
        if diff:
            by_bundle.setdefault(bundle, []).append(host)
            rows.setdefault(bundle, diff)
    if not by_bundle:
        return None
    parts = [f"{', '.join(hosts)} run bundle {bundle} ({'; '.join(rows[bundle])})"
             for bundle, hosts in sorted(by_bundle.items())]
    return ("software: pins differ from what `upgrade apply` put on the nodes: "
            + "; ".join(parts) + ". A node this run configures gets the site's pins; set "
            "software: to the bundle's versions to keep new nodes with the cluster")


def downgrades(loaded: LoadedSite, store: StateStore, hosts: Collection[str]
               ) -> list[Downgrade]:
    """The `hosts` (nodes a run configures at the site's pins) whose recorded bundle pins a
    newer version of a component on them than `software:` does."""
    latest = latest_upgraded(store)
    site = from_software(loaded.site.software).components()
    out = []
    for hp in servers(loaded):
        if hp.hostname not in hosts or hp.hostname not in latest:
            continue
        bundle, versions = latest[hp.hostname]
        on = set(components_on(hp, loaded))
        rows = tuple(f"{c} {versions.get(c)} -> {site.get(c)}" for c in NO_MOVING_BACK
                     if c in on and direction(versions.get(c), site.get(c)) == "downgrade")
        if rows:
            out.append(Downgrade(hp.hostname, bundle, rows))
    return out
