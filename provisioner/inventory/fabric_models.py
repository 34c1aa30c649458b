"""Site cabling: which host NIC plugs into which switch port (explicit links and rules).

Kept apart from models.py so the fabric grows without growing the core model; models.py
imports `Cabling` for `Site.cabling`. Cross-object checks live in fabric_checks.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PORT_RE = r"^[A-Za-z][A-Za-z0-9/_.:-]{0,31}$"
NODE_RE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)


class Link(_Model):
    """One cable: a host NIC port to a switch port (breakout ports like swp1s0 allowed)."""

    node: str = Field(pattern=NODE_RE)
    nic: str = Field(pattern=PORT_RE, description="host port: a RoCE interface or network name")
    switch: str = Field(pattern=NODE_RE)
    switch_port: str = Field(pattern=PORT_RE)
    mtu_bytes: int | None = Field(default=None, ge=576, le=9216)


class Rule(_Model):
    """`rack_leaf`: the n-th RoCE node of a rack (placement order, from 1) on port n of that
    rack's RoCE leaf, named by `port_pattern` ("swp{n}", "swp{n}s0", "Ethernet{n}")."""

    rule: Literal["rack_leaf"]
    nic: str = Field(pattern=PORT_RE)
    port_pattern: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9/_.:-]*\{n\}[A-Za-z0-9/_.:-]*$")
    first_port: int = Field(default=1, ge=0, le=1024, description="port number of node 1")


class Uplink(_Model):
    """A leaf port towards the spine; counted for the oversubscription report."""

    switch: str = Field(pattern=NODE_RE)
    switch_port: str = Field(pattern=PORT_RE)


class Cabling(_Model):
    links: tuple[Link, ...] = ()
    rules: tuple[Rule, ...] = ()
    uplinks: tuple[Uplink, ...] = ()
    # Switch port MTU (L2 frame); every host MTU on the RoCE network must fit under it.
    switch_mtu_bytes: int = Field(default=9216, ge=1500, le=9216)

    @model_validator(mode="after")
    def _one_rule_per_nic(self) -> Cabling:
        nics = [r.nic for r in self.rules]
        if len(nics) != len(set(nics)):
            raise ValueError("two rules cable the same nic; give each nic one rule")
        return self
