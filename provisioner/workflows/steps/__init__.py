"""Small steps the workflows are made of. Each module holds the steps of one kind of work
(bmc: inspect and boot through the BMC; os: wait for the installed OS; ansible: a playbook
over a batch of hosts; verify: the health gate and ready). A step reads what it needs from
the `Context` of its run and returns the detail recorded with its move."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import HostPlan
from provisioner.profile import Profile
from provisioner.workflows.engine import Journal


@dataclass
class Context:
    """What the steps of one run share."""

    loaded: LoadedSite
    env: Mapping[str, str] = field(repr=False)  # the process's: PROVISION_* passwords
    journal: Journal
    stop: threading.Event
    plans: Mapping[str, HostPlan]
    profile: Profile  # lab or real, decided by the caller
    project_dir: Path | None = None
    ansible_s: float = 0.0
    artifact_dirs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Set by a second Ctrl-C: cancel the playbook in flight (`stop` lets it finish).
    abort: threading.Event = field(default_factory=threading.Event)
    # Execution nodes lost in this run (name -> why): later batches split over the others.
    lost_workers: dict[str, str] = field(default_factory=dict)
