"""Switch access: a SwitchDriver Protocol and the netmiko driver (the only netmiko import)."""

from provisioner.switches.base import Endpoint, SentLines, SwitchDriver

__all__ = ["Endpoint", "SentLines", "SwitchDriver"]
