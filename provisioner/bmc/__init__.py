"""BMC layer: a driver protocol with Redfish (sushy) and IPMI (pyghmi) drivers, a vendor
quirk table, retries, and a bounded fan-out over many nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from provisioner import lazy
from provisioner.bmc.base import (
    BmcDriver,
    BmcTarget,
    BootDevice,
    BootMode,
    BootSetting,
    HardwareFacts,
    PowerAction,
    PowerState,
)
from provisioner.bmc.pool import DEFAULT_CONCURRENCY, NodeResult, run_many
from provisioner.errors import ConfigError

if TYPE_CHECKING:  # the inventory (its pydantic models) is imported where a site is read
    from provisioner.credentials import CredentialResolver
    from provisioner.inventory.loader import LoadedSite
    from provisioner.inventory.models import Node

__all__ = [
    "DEFAULT_CONCURRENCY",
    "BmcDriver",
    "BmcTarget",
    "BootDevice",
    "BootMode",
    "BootSetting",
    "HardwareFacts",
    "NodeResult",
    "PowerAction",
    "PowerState",
    "make_driver",
    "run_many",
    "select_hosts",
    "targets",
]


def select_hosts(hostnames: list[str], limit: str | None) -> list[str]:
    """Ansible-style --limit (topology.select); a limit that matches nothing is an error."""
    topology = lazy.module("provisioner.inventory.topology")  # late: see targets
    chosen: list[str] = topology.select(hostnames, limit)
    if not chosen:
        raise ConfigError(f"--limit {limit!r} matches no node with a BMC",
                          hint="patterns are globs on host names, for example 'dgx*,cp01'")
    return chosen


def targets(loaded: LoadedSite, env: Mapping[str, str], limit: str | None = None,
            request_timeout_s: float = 10.0) -> list[BmcTarget]:
    """BMC targets for the site's nodes (in inventory order), secrets resolved once each."""
    # The inventory's modules are imported here, not with the package (`provision bmc`'s
    # start), and through lazy.module: an upgrade's fan-out threads ask for a host's target.
    topology = lazy.module("provisioner.inventory.topology")
    nodes: list[Node] = topology.bmc_nodes(loaded)
    wanted = set(select_hosts([n.hostname for n in nodes], limit))
    logins: CredentialResolver = lazy.module("provisioner.credentials").CredentialResolver(
        loaded, env)
    out = []
    for node in nodes:
        if node.hostname not in wanted or node.bmc is None:
            continue
        bmc = node.bmc
        login = logins.login(bmc.credentials, user_of=node.hostname)
        out.append(BmcTarget(
            node=node.hostname, protocol=bmc.protocol.value, address=bmc.address, port=bmc.port,
            username=login.username, password=login.password, system_id=bmc.system_id,
            scheme=bmc.scheme, tls=bmc.tls, cipher_suite=bmc.cipher_suite,
            request_timeout_s=request_timeout_s))
    return out


# The protocol library is imported on first use, often by many worker threads of one
# fan-out at once: through lazy.module, one at a time (see there).
_DRIVERS = {"redfish": ("provisioner.bmc.redfish", "RedfishDriver"),
            "ipmi": ("provisioner.bmc.ipmi", "IpmiDriver")}


def make_driver(target: BmcTarget) -> BmcDriver:
    """The driver for a target's protocol (imports the protocol library on first use)."""
    module, name = _DRIVERS["redfish" if target.protocol == "redfish" else "ipmi"]
    driver_class = getattr(lazy.module(module), name)
    driver: BmcDriver = driver_class(target)
    return driver

