"""Typed, frozen site model (pydantic v2).

Models check what one object can know about itself (types, ranges, formats); checks that
need more than one object (overlaps, duplicates, CIDR membership) live in checks.py so the
model stays cheap to build for sites of tens of thousands of nodes.

Field types live in fields.py, the catalog's blocks in block_models.py, the software pins
in software_models.py and the cabling in fabric_models.py; this module re-exports them
(`__all__`) so `from provisioner.inventory.models import X` keeps working.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from provisioner.inventory.block_models import (
    OPEN_ONLY_ARCHS,
    PROPRIETARY_ONLY_ARCHS,
    BlockKind,
    BlockType,
    GpuArch,
    Gpus,
    Nic,
    Psu,
)
from provisioner.inventory.execution_models import Execution
from provisioner.inventory.fabric_models import Cabling
from provisioner.inventory.fields import (
    HOSTNAME_RE,
    MAC_RE,
    NAME_RE,
    Host,
    Hostname,
    HttpUrl,
    IPv4Addr,
    IPv4Net,
    LabelKey,
    LabelValue,
    LocalPath,
    Mac,
    Model,
    Name,
    PublicKey,
    SystemId,
    UserName,
)
from provisioner.inventory.hostnet_models import Bond, HostNic, Route
from provisioner.inventory.software_models import (
    IFNAME_RE,
    VERSION_RE,
    Dcgm,
    FabricManager,
    Kubernetes,
    NvidiaDriver,
    Roce,
    Software,
    Version,
)

__all__ = [
    "ENV_VAR_RE",
    "HOSTNAME_RE",
    "IFNAME_RE",
    "MAC_RE",
    "NAME_RE",
    "OPEN_ONLY_ARCHS",
    "PROPRIETARY_ONLY_ARCHS",
    "VERSION_RE",
    "BlockKind",
    "BlockType",
    "Bmc",
    "BmcProtocol",
    "Bond",
    "BootMethod",
    "Cabling",
    "Circuit",
    "Credentials",
    "Dcgm",
    "FabricManager",
    "Feed",
    "GpuArch",
    "Gpus",
    "HostNic",
    "Hostname",
    "IPv4Addr",
    "IPv4Net",
    "Kubernetes",
    "Mac",
    "Model",
    "Name",
    "Network",
    "NetworkKind",
    "Nic",
    "Node",
    "NvidiaDriver",
    "Placement",
    "Provisioning",
    "Psu",
    "Rack",
    "Roce",
    "Role",
    "Route",
    "SecretRef",
    "Site",
    "SiteMeta",
    "Software",
    "Ssh",
    "SwitchAccess",
    "Tls",
    "Version",
]

ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---------------------------------------------------------------- site parts


class SecretRef(Model):
    """Where a secret is read at run time. The inventory never holds the value."""

    env: Annotated[str, Field(pattern=ENV_VAR_RE.pattern)] | None = Field(
        default=None, description="environment variable holding the secret")
    file: str | None = Field(default=None, description="absolute path of a 0600 file")
    vault: str | None = Field(default=None, description="ansible-vault secret name")

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        given = [k for k in ("env", "file", "vault") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of env, file or vault")
        return self

    def describe(self) -> str:
        if self.env:
            return f"env:{self.env}"
        if self.file:
            return f"file:{self.file}"
        return f"vault:{self.vault}"


class Credentials(Model):
    username: UserName = Field(description="login name")
    password: SecretRef = Field(
        description="a reference, never the value: {env: VAR}, {file: /path} or {vault: name}")

    @field_validator("password", mode="before")
    @classmethod
    def _no_inline(cls, value: Any) -> Any:
        if isinstance(value, str | int | float):
            raise ValueError(
                "inline secret: a password is written in the inventory; "
                "use {env: VAR}, {file: /path/0600-file} or {vault: name}"
            )
        return value


class Tls(Model):
    verify: bool = Field(default=True, description="verify the BMC's TLS certificate")
    ca_bundle: str | None = Field(default=None, description="CA bundle file for the BMC")
    fingerprint_sha256: str | None = Field(
        default=None, pattern=r"^([0-9A-Fa-f]{2}:?){31}[0-9A-Fa-f]{2}$",
        description="pinned SHA-256 fingerprint of the BMC's certificate"
    )


class BmcProtocol(StrEnum):
    REDFISH = "redfish"
    IPMI = "ipmi"


class Bmc(Model):
    protocol: BmcProtocol = Field(description="redfish or ipmi")
    address: Host = Field(description="BMC IP address or host name")
    port: int | None = Field(default=None, ge=1, le=65535,
                             description="TCP/UDP port (default 443, 80 for http, 623 IPMI)")
    credentials: Name = Field(description="name of an entry under credentials")
    system_id: SystemId | None = Field(default=None,
                                       description="Redfish system id (default: the only one)")
    scheme: Literal["https", "http"] = "https"
    tls: Tls = Tls()
    cipher_suite: int = Field(default=17, ge=0, le=17,
                              description="IPMI cipher suite (3 only if the BMC cannot do 17)")

    def endpoint_key(self) -> tuple[str, int, str]:
        default_port = 623 if self.protocol is BmcProtocol.IPMI else (
            443 if self.scheme == "https" else 80
        )
        return (self.address.lower(), self.port or default_port, self.system_id or "")


class SwitchAccess(Model):
    os: Literal["cumulus", "onyx", "sonic", "cisco_ios", "eos"] = Field(
        description="switch operating system")
    credentials: Name = Field(description="name of an entry under credentials")
    port: int = Field(default=22, ge=1, le=65535, description="SSH port")
    address: Host | None = Field(default=None,
                                 description="SSH address (IP or host name); default: the "
                                 "node's address on the management network")
    # Arista names a port's egress queue by the switch's ASIC: `tx-queue N` on the
    # Jericho-based 7280R/7500R/7800R, `uc-tx-queue N` (unicast) on the Trident- and
    # Tomahawk-based 7050X/7060X/7260X/7388X (EOS QoS chapter; arista.avd renders both).
    eos_queue: Literal["tx-queue", "uc-tx-queue"] | None = Field(
        default=None, description="EOS only: the queue command ECN is set under (tx-queue "
        "on 7280R/7500R/7800R, uc-tx-queue on 7050X/7060X/7260X/7388X); unset: tx-queue")


class Role(StrEnum):
    CONTROL_PLANE = "control-plane"
    WORKER = "worker"
    STORAGE = "storage"
    SWITCH = "switch"


BootMethod = Literal["pxe", "virtual_media"]


class Node(Model):
    hostname: Hostname
    roles: tuple[Role, ...] | None = Field(
        default=None, description="default by block kind: workers, storage, switch")
    bmc: Bmc | None = Field(default=None, description="the server's BMC (servers only)")
    # How `provision up` boots the OS installer on this node (default: the site's).
    boot: BootMethod | None = Field(default=None,
                                    description="pxe or virtual_media (default: the site's)")
    management: SwitchAccess | None = Field(default=None,
                                            description="SSH management (switches only)")
    addresses: dict[Name, IPv4Addr] = Field(
        default_factory=dict, description="network name -> IPv4 address in that network")
    macs: dict[Name, Mac] = Field(default_factory=dict,
                                  description="network name -> MAC of the NIC on it")
    interfaces: dict[Name, HostNic] = Field(
        default_factory=dict, description="network name -> how the host finds and names "
        "its NIC on it (a name rule, a bond); the MAC stays under macs")
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict,
                                   description="extra Kubernetes node labels")


class Placement(Model):
    """A chassis of a block type at a rack position, with the node(s) it holds."""

    rack: Name = Field(description="name of the rack")
    u: int = Field(ge=1, le=60, description="lowest rack unit the chassis occupies")
    block: Name = Field(description="block type, from `provision catalog` or the site catalog")
    # Multi-node NVLink (IMEX) systems: the chassis sharing one NVLink domain (an NVL72 rack
    # is one). Default: the rack. nvidia-imex's nodes_config.cfg lists the domain's nodes.
    nvlink_domain: Name | None = Field(default=None,
                                       description="NVLink domain (IMEX systems; default: rack)")
    nodes: tuple[Node, ...] = Field(min_length=1,
                                    description="the node(s) in the chassis, at most its "
                                    "nodes_per_chassis")


class Feed(Model):
    name: str = Field(min_length=1, max_length=32, description="feed name, such as A or B")
    phase: Literal["single", "three"] = Field(description="single or three phase")
    voltage_v: float = Field(gt=0, le=1000, description="voltage, V (line-to-line for three)")
    breaker_a: float = Field(gt=0, le=1000, description="breaker rating, A")
    # NEC 210.20(A)/215.3 continuous load: breaker >= 125 % of load, so 80 % usable.
    derating: float = Field(default=0.8, gt=0, le=1.0,
                            description="fraction usable continuously (NEC: 0.8)")
    # The upstream breaker or busway this feed hangs off, when it feeds other racks too:
    # power.py sums every rack on one circuit against that circuit's own rating.
    circuit: Name | None = Field(default=None,
                                 description="upstream circuit (PDU breaker, busway) under "
                                 "circuits: that feeds this and maybe other racks")


class Circuit(Model):
    """An upstream circuit (panel or floor-PDU breaker, busway tap) that can feed several
    racks' feeds: their worst-case loads add up on it. Rated like a feed."""

    name: Name = Field(description="circuit name, unique in the site, such as pdu1-cb12")
    description: str = Field(default="", max_length=200,
                             description="where it is, such as 'floor PDU 1, breaker 12'")
    phase: Literal["single", "three"] = Field(description="single or three phase")
    voltage_v: float = Field(gt=0, le=1000, description="voltage, V (line-to-line for three)")
    breaker_a: float = Field(gt=0, le=5000, description="breaker or busway rating, A")
    # NEC 210.20(A) (branch circuits) and 215.3 (feeders): 125 % of the continuous load.
    derating: float = Field(default=0.8, gt=0, le=1.0,
                            description="fraction usable continuously (NEC: 0.8; 1.0 for "
                            "an assembly listed for 100 % continuous operation)")


class Rack(Model):
    name: Name = Field(description="rack name, unique in the site")
    height_u: int = Field(default=42, ge=1, le=60, description="rack height, U")
    reserved_u: int = Field(default=0, ge=0, le=60,
                            description="U kept free (PDUs, cable management), U")
    feeds: tuple[Feed, ...] = Field(min_length=1, max_length=2,
                                    description="power feeds: one, or A and B for 2N")
    redundancy: Literal["single", "2N"] = Field(
        default="single", description="2N: A+B feeds, usable = one feed's, never the sum")
    cooling_kw: float = Field(gt=0, le=500, description="heat the room can remove, kW")
    inlet_ashrae_class: Literal["A1", "A2", "A3", "A4"] | None = Field(
        default=None, description="ASHRAE inlet air class")
    # Power factor to turn W into VA; no NVIDIA or OEM document gives one for these systems.
    power_factor: float = Field(default=0.95, gt=0.5, le=1.0,
                                description="W -> VA power factor (no vendor figure; set yours)")
    # Air temperature rise across the rack, used for the airflow figure.
    delta_t_f: float = Field(default=20.0, gt=0, le=80,
                             description="air temperature rise across the rack, °F")
    airflow_limit_cfm: float | None = Field(default=None, gt=0,
                                            description="airflow available to the rack, CFM")

    @model_validator(mode="after")
    def _feeds_match_redundancy(self) -> Rack:
        if self.redundancy == "single" and len(self.feeds) != 1:
            raise ValueError("redundancy 'single' takes exactly one feed; use '2N' for A+B feeds")
        if self.redundancy == "2N" and len(self.feeds) != 2:
            raise ValueError("redundancy '2N' takes exactly two feeds (A and B)")
        return self


class NetworkKind(StrEnum):
    MANAGEMENT = "management"
    OOB = "oob"
    PROVISIONING = "provisioning"
    ROCE = "roce"
    STORAGE = "storage"
    OTHER = "other"


class Network(Model):
    name: Name = Field(description="network name, used by nodes' addresses and macs")
    kind: NetworkKind = Field(description="management, oob (BMCs), provisioning, roce, "
                              "storage or other")
    cidr: IPv4Net = Field(description="IPv4 network, such as 10.250.0.0/24")
    vlan: int | None = Field(default=None, ge=1, le=4094, description="VLAN id")
    mtu: int = Field(default=1500, ge=576, le=9216, description="MTU, bytes")
    gateway: IPv4Addr | None = Field(default=None, description="default gateway")
    # Tagged: the host's port is a trunk and the host makes a VLAN sub-interface
    # (<nic>.<vlan>); untagged (default): the switch port is an access port in the VLAN.
    host_tagged: bool = Field(default=False, description="hosts send this network's "
                              "frames tagged with vlan (a VLAN sub-interface on a trunk)")
    routes: tuple[Route, ...] = Field(default=(), max_length=64,
                                      description="static routes through this network")
    # An L3 rail leaf: the one switch this network's hosts are cabled to routes it, with
    # `gateway` on an SVI of `vlan` (the hosts' rail table routes via it).
    switch_gateway: bool = Field(default=False, description="the switch the network's hosts "
                                 "are cabled to holds gateway on an SVI of vlan (L3 leaf)")


class Ssh(Model):
    """How Ansible reaches the nodes once their OS is up (key path only, never a key)."""

    user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "root"
    private_key_file: LocalPath | None = None
    port: int = Field(default=22, ge=1, le=65535)
    # Public keys an installed node accepts for `user` (autoinstall writes them): without
    # one, no install starts (validate: ssh-no-way-in). `pxe render --ssh-key` adds one.
    authorized_keys: tuple[PublicKey, ...] = Field(
        default=(), max_length=64, description="OpenSSH public keys installed nodes accept")


class Provisioning(Model):
    """How `provision up` brings nodes from power-off to a reachable OS."""

    boot: BootMethod = "pxe"
    # The installer ISO a BMC mounts when boot is virtual_media (http or https).
    iso_url: HttpUrl | None = Field(
        default=None, description="installer ISO URL, for boot: virtual_media")
    # An unattended Ubuntu install takes 10-40 min on real hardware; SSH must answer in this.
    os_timeout_s: float = Field(default=3600, gt=0, le=86_400,
                                description="time for the installed OS to answer SSH, s")
    # Nodes handled at once in the BMC and boot phases.
    concurrency: int = Field(default=64, ge=1, le=4096,
                             description="nodes handled at once in the BMC and boot phases")
    # Hosts that run the playbooks for the controller (docs: README "Execution nodes").
    execution: Execution = Execution()

    @model_validator(mode="after")
    def _iso_when_needed(self) -> Provisioning:
        if self.boot == "virtual_media" and not self.iso_url:
            raise ValueError("boot: virtual_media needs iso_url (the installer ISO's URL)")
        return self


class SiteMeta(Model):
    name: Name
    description: str = ""
    ssh: Ssh = Ssh()


class Site(Model):
    """The whole site inventory after loading and schema validation."""

    site: SiteMeta
    catalog: tuple[BlockType, ...] = ()
    credentials: dict[Name, Credentials] = Field(default_factory=dict)
    networks: tuple[Network, ...] = ()
    circuits: tuple[Circuit, ...] = ()
    racks: tuple[Rack, ...] = Field(min_length=1)
    placements: tuple[Placement, ...] = ()
    software: Software = Software()
    provisioning: Provisioning = Provisioning()
    cabling: Cabling = Cabling()
