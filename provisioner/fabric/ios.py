"""IOS-style CLI (management switches, SSH simulators in tests): port descriptions only."""

from __future__ import annotations

from provisioner.fabric.base import (
    SwitchQos,
    SwitchSpec,
    can_express,
    require_expressible,
    template,
)
from provisioner.roce import RocePolicy


class IosRenderer:
    nos = "cisco_ios"
    file_name = "ios.cfg"

    def can_express(self, policy: RocePolicy) -> bool:
        return can_express(self.nos, policy)

    def render(self, spec: SwitchSpec) -> str:
        require_expressible(spec)
        return template("cisco_ios", "ios.cfg.j2").render(spec=spec)

    def parse(self, text: str) -> SwitchQos:
        return SwitchQos(frozenset(), {}, {}, trust_dscp=False)  # no RoCE QoS in this dialect
