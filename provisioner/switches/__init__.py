"""Switch access: a SwitchDriver Protocol and the netmiko driver (the only netmiko import)."""

from provisioner.switches.base import ApplyResult, Endpoint, SwitchDriver

__all__ = ["ApplyResult", "Endpoint", "SwitchDriver"]
