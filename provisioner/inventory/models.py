"""Typed, frozen site model (pydantic v2).

Models check what one object can know about itself (types, ranges, formats); checks that
need more than one object (overlaps, duplicates, CIDR membership) live in checks.py so the
model stays cheap to build for sites of tens of thousands of nodes.
"""

from __future__ import annotations

import re
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from provisioner.inventory.fabric_models import Cabling
from provisioner.inventory.fields import (
    BmcAddress,
    GpuModel,
    KubeVersion,
    LabelKey,
    LabelValue,
    LocalPath,
    MirrorUrl,
    SystemId,
    UserName,
)

# RFC 1123 host label: letters, digits, hyphen; 1-63 chars; no leading/trailing hyphen.
# Lower case only: Kubernetes node names must be lower case (RFC 1123 subdomain).
HOSTNAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VERSION_RE = re.compile(r"^\d+(\.\d+){0,3}$")


def _hostname(value: str) -> str:
    if not HOSTNAME_RE.match(value):
        raise ValueError(
            "not a valid RFC 1123 host name: use 1-63 lower-case letters, digits or '-', "
            "not starting or ending with '-'"
        )
    return value


def _name(value: str) -> str:
    if not NAME_RE.match(value):
        raise ValueError(
            "not a valid name: use 1-63 lower-case letters, digits, '-' or '_', "
            "starting and ending with a letter or digit"
        )
    return value


def _mac(value: str) -> str:
    norm = value.strip().lower().replace("-", ":")
    if not MAC_RE.match(norm):
        raise ValueError("not a MAC address: write six hex pairs such as 52:54:00:12:34:56")
    return norm


def _version_in(value: Any) -> Any:
    """YAML reads 12.10 as the float 12.1: refuse floats, accept plain integers."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        raise ValueError(f"write versions in quotes ('{value}'): YAML reads 12.10 as 12.1")
    if isinstance(value, int):
        return str(value)
    return value


def _version(value: str) -> str:
    if not VERSION_RE.match(value):
        raise ValueError(
            "not a version: write digits separated by dots, such as 12.8 or 570.124.06")
    return value


def _text_only(value: Any) -> Any:
    """Addresses are written as text: YAML's true or 42 must not become 0.0.0.1/32."""
    if not isinstance(value, str):
        raise ValueError("write the address as text, for example 10.0.0.1 or 10.0.0.0/24")
    return value


# WithJsonSchema only tells editors (JSON Schema export) what the validators accept; the
# validators above stay the one check, with their own messages.
IPv4Addr = Annotated[IPv4Address, BeforeValidator(_text_only)]
IPv4Net = Annotated[IPv4Network, BeforeValidator(_text_only)]
Hostname = Annotated[str, AfterValidator(_hostname), WithJsonSchema(
    {"type": "string", "pattern": HOSTNAME_RE.pattern,
     "description": "RFC 1123 host label: lower-case letters, digits and '-', 1-63 characters"})]
Name = Annotated[str, AfterValidator(_name), WithJsonSchema(
    {"type": "string", "pattern": NAME_RE.pattern,
     "description": "name: lower-case letters, digits, '-' or '_', 1-63 characters"})]
Mac = Annotated[str, AfterValidator(_mac), WithJsonSchema(
    {"type": "string", "pattern": r"^\s*[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}\s*$",
     "description": "MAC address, six hex pairs such as 52:54:00:12:34:56"})]
Version = Annotated[str, BeforeValidator(_version_in), AfterValidator(_version), WithJsonSchema(
    {"anyOf": [{"type": "string", "pattern": VERSION_RE.pattern}, {"type": "integer"}],
     "description": "version as a quoted string, such as '12.8' (YAML reads 12.10 as 12.1)"})]


class Model(BaseModel):
    """Base: frozen, unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)


# ---------------------------------------------------------------- catalog


class BlockKind(StrEnum):
    HCI = "hci"
    COMPUTE = "compute"
    STORAGE = "storage"
    GPU_SERVER = "gpu_server"
    SWITCH = "switch"


class GpuArch(StrEnum):
    MAXWELL = "maxwell"
    PASCAL = "pascal"
    VOLTA = "volta"
    TURING = "turing"
    AMPERE = "ampere"
    ADA = "ada"
    HOPPER = "hopper"
    GRACE_HOPPER = "grace_hopper"
    BLACKWELL = "blackwell"
    GRACE_BLACKWELL = "grace_blackwell"


# Open kernel modules: Turing and newer only; Grace and Blackwell need them
# (source: NVIDIA driver installation guide, kernel-modules page [P]; DOMAIN.md §3).
PROPRIETARY_ONLY_ARCHS = frozenset({GpuArch.MAXWELL, GpuArch.PASCAL, GpuArch.VOLTA})
OPEN_ONLY_ARCHS = frozenset(
    {GpuArch.BLACKWELL, GpuArch.GRACE_HOPPER, GpuArch.GRACE_BLACKWELL}
)


class Psu(Model):
    count: int = Field(ge=1, le=16, description="number of power supplies")
    rating_w: float = Field(gt=0, le=20_000, description="output rating of one supply, W")
    redundancy: str = Field(pattern=r"^\d+\+\d+$", description="N+M: N needed, M spare")

    @property
    def needed(self) -> int:
        return int(self.redundancy.split("+")[0])


class Gpus(Model):
    model: GpuModel = Field(description="GPU model, such as H100 (becomes a label value)")
    count: int = Field(ge=1, le=72, description="GPUs per node")
    architecture: GpuArch = Field(description="GPU architecture (decides the kernel modules)")


class Nic(Model):
    ports: int = Field(ge=1, le=256, description="number of ports")
    speed_gbps: float = Field(gt=0, le=1600, description="port speed, Gbit/s")
    model: str | None = Field(default=None, description="NIC model")
    # Ways one port splits into (swp1s0..swp1s3 = 4): the switch's supported breakouts.
    breakout: tuple[Annotated[int, Field(ge=2, le=8)], ...] = Field(
        default=(), description="ways one port can be split (breakout), e.g. [2, 4]")


class BlockType(Model):
    """One building-block type: a chassis and what it holds."""

    name: Name = Field(description="block type name, used by placements' block")
    kind: BlockKind = Field(description="hci, compute, storage, gpu_server or switch")
    description: str = ""
    rack_units: int = Field(ge=1, le=60, description="chassis height, U")
    nodes_per_chassis: int = Field(default=1, ge=1, le=16, description="nodes one chassis holds")
    max_power_w: float = Field(gt=0, le=200_000, description="nameplate maximum input power, W")
    typical_power_w: float = Field(gt=0, le=200_000, description="typical input power, W")
    psu: Psu | None = Field(default=None, description="power supplies")
    gpu: Gpus | None = Field(default=None, description="GPUs of each node")
    nvswitch: bool = Field(default=False, description="has NVSwitch (needs fabric manager)")
    imex: bool = Field(default=False, description="multi-node NVLink (IMEX) system")
    nics: tuple[Nic, ...] = Field(default=(), description="network adapters")
    airflow_cfm: float | None = Field(default=None, gt=0, description="vendor airflow, CFM")
    switch_role: Literal["roce", "management", "oob", "storage"] | None = Field(
        default=None, description="what a switch block is for (switches only)")
    estimated: tuple[str, ...] = Field(
        default=(), description="names of fields whose figures have no vendor source")
    sources: tuple[str, ...] = Field(default=(), description="where the figures come from")

    @model_validator(mode="after")
    def _consistent(self) -> BlockType:
        if self.typical_power_w > self.max_power_w:
            raise ValueError("typical_power_w is larger than max_power_w")
        known = set(type(self).model_fields)
        unknown = [f for f in self.estimated if f not in known]
        if unknown:
            raise ValueError(f"estimated names unknown fields: {', '.join(unknown)}")
        if self.kind is BlockKind.SWITCH and self.switch_role is None:
            raise ValueError("a switch block needs switch_role (roce, management, oob or storage)")
        return self

    def power_w(self, basis: str) -> float:
        return self.typical_power_w if basis == "typical" else self.max_power_w

    def is_estimated(self, basis: str) -> bool:
        field = "typical_power_w" if basis == "typical" else "max_power_w"
        return field in self.estimated


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
    address: BmcAddress = Field(description="BMC IP address or name")
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
    address: str | None = Field(default=None, min_length=1, max_length=253,
                                description="SSH address; default: the node's address on "
                                "the management network")


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
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict,
                                   description="extra Kubernetes node labels")


class Placement(Model):
    """A chassis of a block type at a rack position, with the node(s) it holds."""

    rack: Name = Field(description="name of the rack")
    u: int = Field(ge=1, le=60, description="lowest rack unit the chassis occupies")
    block: Name = Field(description="block type, from `provision catalog` or the site catalog")
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
    # Power factor to turn W into VA; no vendor figure was found (DOMAIN.md §1.3 [U]).
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


class NvidiaDriver(Model):
    branch: Annotated[str, BeforeValidator(_version_in), Field(pattern=r"^\d{3}$"),
                      WithJsonSchema({"anyOf": [{"type": "string", "pattern": r"^\d{3}$"},
                                                {"type": "integer"}],
                                      "description": "driver branch, such as '570'"})]
    version: Version | None = None
    kernel_modules: Literal["auto", "open", "proprietary"] = "auto"

    @model_validator(mode="after")
    def _version_in_branch(self) -> NvidiaDriver:
        if self.version and self.version.split(".")[0] != self.branch:
            raise ValueError(f"version {self.version} is not in branch {self.branch}")
        return self


class FabricManager(Model):
    # YAML reads yes/no as booleans, so accept both spellings as bools.
    enabled: bool | Literal["auto"] = "auto"
    version: Version | None = None


class Kubernetes(Model):
    version: KubeVersion = Field(description="Kubernetes version, such as '1.31.4'")
    cni: Literal["calico", "cilium", "flannel"] = "calico"
    pod_cidr: IPv4Net = Field(default=IPv4Network("10.244.0.0/16"),
                              description="pod network")
    service_cidr: IPv4Net = Field(default=IPv4Network("10.96.0.0/12"),
                                  description="service network")


class Dcgm(Model):
    version: Version | None = None
    diag_level: int = Field(default=1, ge=1, le=4, description="dcgmi diag level (health gate)")


IFNAME_RE = r"^[A-Za-z0-9_.:-]{1,15}$"  # Linux IFNAMSIZ is 16 with the terminating NUL


class Roce(Model):
    """RoCE QoS contract shared by host and switch (DOMAIN.md §2, NVIDIA lossless RoCE)."""

    interfaces: tuple[Annotated[str, Field(pattern=IFNAME_RE)], ...] = ()
    dscp: int = Field(default=26, ge=0, le=63)
    priority: int = Field(default=3, ge=0, le=7)
    cnp_dscp: int = Field(default=48, ge=0, le=63)
    cnp_priority: int = Field(default=6, ge=0, le=7)
    mode: Literal["lossless", "lossy"] = "lossless"

    @model_validator(mode="after")
    def _distinct(self) -> Roce:
        if self.priority == self.cnp_priority:
            raise ValueError("RoCE and CNP priorities must differ")
        if self.dscp == self.cnp_dscp:
            raise ValueError("RoCE and CNP DSCP values must differ")
        return self


class Software(Model):
    os: Literal["ubuntu-22.04", "ubuntu-24.04", "rhel-9", "dgx-os-6", "dgx-os-7"] = "ubuntu-22.04"
    nvidia_driver: NvidiaDriver | None = None
    cuda: Version | None = None
    fabric_manager: FabricManager = FabricManager()
    dcgm: Dcgm = Dcgm()
    doca: Version | None = None
    kubernetes: Kubernetes | None = None
    roce: Roce = Roce()
    mirror: MirrorUrl | None = Field(default=None, description="local package mirror (air-gapped)")


class Ssh(Model):
    """How Ansible reaches the nodes once their OS is up (key path only, never a key)."""

    user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "root"
    private_key_file: LocalPath | None = None
    port: int = Field(default=22, ge=1, le=65535)


class Provisioning(Model):
    """How `provision up` brings nodes from power-off to a reachable OS."""

    boot: BootMethod = "pxe"
    # The installer ISO a BMC mounts when boot is virtual_media (http or https).
    iso_url: Annotated[str, Field(pattern="^https?://[^\\s'\"]+$", max_length=2048)] | None = Field(
        default=None, description="installer ISO URL, for boot: virtual_media")
    # An unattended Ubuntu install takes 10-40 min on real hardware; SSH must answer in this.
    os_timeout_s: float = Field(default=3600, gt=0, le=86_400,
                                description="time for the installed OS to answer SSH, s")
    # Nodes handled at once in the BMC and boot phases.
    concurrency: int = Field(default=64, ge=1, le=4096,
                             description="nodes handled at once in the BMC and boot phases")

    @model_validator(mode="after")
    def _iso_when_needed(self) -> Provisioning:
        if self.boot == "virtual_media" and not self.iso_url:
            raise ValueError("boot: virtual_media needs iso_url (the installer ISO's URL)")
        return self


class SiteMeta(Model):
    name: Name
    description: str = ""
    ssh: Ssh = Ssh()
    # Generated by `provision lab up` (relative to the site): loopback BMC endpoints that
    # replace the inventory's while the lab runs. Absent file = no lab = inventory as written.
    lab_overlay: str | None = Field(default=None, pattern=r"^[^/].*\.ya?ml$")


class Site(Model):
    """The whole site inventory after loading and schema validation."""

    site: SiteMeta
    catalog: tuple[BlockType, ...] = ()
    credentials: dict[Name, Credentials] = Field(default_factory=dict)
    networks: tuple[Network, ...] = ()
    racks: tuple[Rack, ...] = Field(min_length=1)
    placements: tuple[Placement, ...] = ()
    software: Software = Software()
    provisioning: Provisioning = Provisioning()
    cabling: Cabling = Cabling()
