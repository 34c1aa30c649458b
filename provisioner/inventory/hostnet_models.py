"""The host side of a node's networks: which NIC carries which network, bonds, routes.

Kept apart from models.py (as fabric_models.py is). A node's `addresses` say what address
it has on a network and `macs` which port; `interfaces` says what the host calls that
port, finds it by when no MAC is known (a stable name rule), or bonds (LACP, as HCI and
storage blocks use). provisioner/hostnet.py turns them into the host network role's plan.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from provisioner.inventory.fields import IPv4Addr, IPv4Net, Mac, Model

IFNAME_PATTERN = r"^[A-Za-z0-9_-]{1,15}$"  # IFNAMSIZ is 16 with its NUL; '.' is VLANs'
IFNAME_GLOB_PATTERN = r"^[A-Za-z0-9_*?\[\]-]{1,15}$"  # netplan match: name takes globs
IfName = Annotated[str, Field(pattern=IFNAME_PATTERN)]
IfNameGlob = Annotated[str, Field(pattern=IFNAME_GLOB_PATTERN)]


class Route(Model):
    """A static route of a network: reached through a router on that network."""

    to: IPv4Net = Field(description="destination network, such as 10.60.0.0/16")
    via: IPv4Addr = Field(description="next hop, an address inside the network")


class Bond(Model):
    members: tuple[Mac, ...] = Field(min_length=2, max_length=8,
                                     description="MACs of the bonded ports")
    # 802.3ad is LACP; the switch pair must run an MLAG/MC-LAG for it across two switches.
    mode: Literal["802.3ad", "active-backup"] = Field(
        default="802.3ad", description="802.3ad (LACP) or active-backup")


class HostNic(Model):
    """How the host finds and names its NIC on one network."""

    name: IfName | None = Field(
        default=None, description="the interface name the host gives it (default: the "
        "network's name, cut to 15 characters)")
    match_name: IfNameGlob | None = Field(
        default=None, description="a stable kernel name rule to find the port by where "
        "no MAC is given, such as enp170s0f0np0 or enp*s0f1np1")
    bond: Bond | None = Field(default=None, description="bond these ports (LACP or "
                              "active-backup) and put the network on the bond")

    @model_validator(mode="after")
    def _one_way_to_find_it(self) -> HostNic:
        if self.match_name is not None and self.bond is not None:
            raise ValueError("give match_name or bond, not both (a bond finds its ports "
                             "by their MACs)")
        return self


RoleOfPorts = Literal["roce", "storage", "management", "other"]
