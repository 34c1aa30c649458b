"""Verify steps: the health gate (the node_verify role through verify.yml) and ready."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.lifecycle import Phase
from provisioner.workflows.steps import Context
from provisioner.workflows.steps.ansible import Playbook


def gate(ctx: Context, playbook: str, forks: int) -> Playbook:
    """configured -> verified: the checks that gate ready (GPU count, driver, RoCE QoS,
    Kubernetes Ready), as a playbook batch."""
    return Playbook(ctx, playbook, "verify", Phase.CONFIGURED, Phase.VERIFIED, forks)


@dataclass
class Ready:
    """verified -> ready: nothing left to do; the node is a cluster member."""

    ctx: Context
    name: str = "ready"
    source: Phase = Phase.VERIFIED

    def __call__(self, host: str, session: object) -> dict[str, Any]:
        return {"lab": self.ctx.profile.lab}
