"""IOS-style CLI (management switches, SSH simulators in tests): port descriptions only."""

from __future__ import annotations

from provisioner.fabric.base import SwitchQos, SwitchSpec, template


class IosRenderer:
    nos = "cisco_ios"
    file_name = "ios.cfg"

    def render(self, spec: SwitchSpec) -> str:
        return template("cisco_ios", "ios.cfg.j2").render(spec=spec)

    def parse(self, text: str) -> SwitchQos:
        return SwitchQos(frozenset(), {}, {}, trust_dscp=False)  # no RoCE QoS in this dialect
