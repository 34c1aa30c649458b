"""Software pins of a site: driver, CUDA, fabric manager, DCGM, Kubernetes, RoCE QoS.

Kept apart from models.py (as fabric_models.py is) so the version-bearing models grow
without growing the core model; models.py imports `Software` for `Site.software`.
Cross-object checks live in software_checks.py (Kubernetes roles and CIDRs: checks.py).
"""

from __future__ import annotations

import re
from ipaddress import IPv4Network
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema, model_validator

from provisioner.inventory.fields import (
    DnsName,
    Host,
    HostPort,
    HttpUrl,
    IPv4Addr,
    IPv4Net,
    KubeVersion,
    LocalPath,
    MirrorUrl,
    Model,
    Suite,
)

VERSION_RE = re.compile(r"^\d+(\.\d+){0,3}$")


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


Version = Annotated[str, BeforeValidator(_version_in), AfterValidator(_version), WithJsonSchema(
    {"anyOf": [{"type": "string", "pattern": VERSION_RE.pattern}, {"type": "integer"}],
     "description": "version as a quoted string, such as '12.8' (YAML reads 12.10 as 12.1)"})]


class NvidiaDriver(Model):
    branch: Annotated[str, BeforeValidator(_version_in), Field(pattern=r"^\d{3}$"),
                      WithJsonSchema({"anyOf": [{"type": "string", "pattern": r"^\d{3}$"},
                                                {"type": "integer"}],
                                      "description": "driver branch, such as '570'"})]
    version: Version | None = None
    kernel_modules: Literal["auto", "open", "proprietary"] = "auto"
    # One driver source per site: NVIDIA's CUDA repository (with its pinning package) or
    # Canonical's signed precompiled modules from the Ubuntu archive (Secure Boot hosts).
    source: Literal["nvidia", "canonical"] = Field(
        default="nvidia", description="nvidia (CUDA repository) or canonical (signed "
        "precompiled modules from the Ubuntu archive, for Secure Boot)")
    # Canonical's precompiled modules come per kernel flavour: the running kernel's
    # (linux-modules-nvidia-<B>-server[-open]-<flavour>; DeepOps installs the -nvidia one on
    # DGX OS 6's linux-nvidia kernel).
    kernel_flavour: str | None = Field(
        default=None, pattern=r"^[a-z0-9][a-z0-9.-]*$",
        description="source canonical: the kernel flavour the nodes run, such as generic, "
        "generic-hwe-22.04 or nvidia (default generic; generic-64k on arm64)")

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
    # A stable API endpoint for an HA control plane: a VIP kube-vip serves on the control
    # planes, or the site's own load balancer (host[:port]). Neither: the first control plane.
    vip: IPv4Addr | None = Field(default=None,
                                 description="control-plane VIP, served by kube-vip")
    load_balancer: HostPort | None = Field(
        default=None, description="the site's API load balancer, host[:port]")
    cni: Literal["calico", "cilium", "flannel"] = "calico"
    pod_cidr: IPv4Net = Field(default=IPv4Network("10.244.0.0/16"),
                              description="pod network")
    service_cidr: IPv4Net = Field(default=IPv4Network("10.96.0.0/12"),
                                  description="service network")

    @model_validator(mode="after")
    def _one_endpoint(self) -> Kubernetes:
        if self.vip is not None and self.load_balancer is not None:
            raise ValueError("set vip (kube-vip) or load_balancer, not both")
        return self


class Sources(Model):
    """Where the roles fetch from besides apt: an air-gapped site sets every one."""

    registry_mirror: HttpUrl | None = Field(
        default=None, description="container registry mirror for containerd (all registries)")
    helm_repo: HttpUrl | None = Field(default=None, description="Helm chart repository")
    manifests: MirrorUrl | None = Field(
        default=None, description="base URL holding the CNI manifests (calico.yaml, ...)")
    ntp_servers: tuple[Host, ...] = Field(
        default=(), description="NTP servers (default: the distribution's pool)")
    # The installed nodes' resolvers: autoinstall's netplan `nameservers` and the boot
    # server's DHCP option 6 carry them (without them a node has no DNS at all: its
    # address is static). resolv.conf(5): at most 3 nameservers (MAXNS) are used.
    dns_servers: tuple[IPv4Addr, ...] = Field(
        default=(), max_length=3, description="DNS servers the installed nodes use (up to 3)")
    dns_search: tuple[DnsName, ...] = Field(
        default=(), max_length=6, description="DNS search domains of the installed nodes")


class Dcgm(Model):
    version: Version | None = None
    diag_level: int = Field(default=1, ge=1, le=4, description="dcgmi diag level (health gate)")


IFNAME_RE = r"^[A-Za-z0-9_.:-]{1,15}$"  # Linux IFNAMSIZ is 16 with the terminating NUL


class Roce(Model):
    """RoCE QoS contract shared by host and switch (NVIDIA Cumulus Linux 5.14 'RDMA over
    Converged Ethernet - RoCE',
    https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-514/Layer-1-and-Switch-Ports/Quality-of-Service/RDMA-over-Converged-Ethernet-RoCE/;
    NVIDIA Onyx 'RoCE Commands',
    https://docs.nvidia.com/networking/display/Onyxv31040100/RoCE+Commands)."""

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
    # The NVIDIA Container Toolkit on GPU nodes: installed at this version and held by an
    # apt pin (its repository publishes a new one every few weeks); unset: the newest.
    container_toolkit: Version | None = Field(
        default=None, description="NVIDIA Container Toolkit version on GPU nodes, such as "
        "1.17.4 (held by an apt pin); unset: what the repository has newest")
    roce: Roce = Roce()
    mirror: MirrorUrl | None = Field(default=None, description="local package mirror (air-gapped)")
    # A mirror of Ubuntu's archive serves a release in pockets, each a suite of its own
    # (Ubuntu's own sources name RELEASE, RELEASE-updates and RELEASE-security; one suite per
    # line, sources.list(5)): the release pocket alone holds what the release shipped with,
    # no fix, no security update, none of the driver branches published since.
    mirror_suites: list[Suite] | None = Field(
        default=None, min_length=1, description="the mirror's suites (default: the "
        "release, RELEASE-updates and RELEASE-security)")
    # Ubuntu publishes arm64 (Grace) in its ports archive (ports.ubuntu.com/ubuntu-ports),
    # not in the main archive that serves amd64: a site with both needs a mirror of each,
    # unless its own mirror serves both architectures under one URL.
    mirror_arm64: MirrorUrl | None = Field(
        default=None, description="the mirror arm64 (Grace) nodes use: a mirror of Ubuntu's "
        "ports archive (default: software.mirror)")
    mirror_key: LocalPath | None = Field(
        default=None, description="the mirror's signing key (armored or binary, rendered "
        ".asc or .gpg by what it holds; relative to the site directory): apt verifies the "
        "mirror through signed-by")
    # An air-gapped site's HTTPS mirror, registry and chart repository are usually signed by
    # the site's own CA, which no distribution trusts: apt, containerd, helm and get_url
    # all read the system store, so the CA goes there (base_os, update-ca-certificates).
    ca_certificate: LocalPath | None = Field(
        default=None, description="the site's CA certificate (PEM, relative to the site "
        "directory), added to every node's trusted CAs")
    sources: Sources = Sources()

    @model_validator(mode="after")
    def _suites_once(self) -> Software:
        if self.mirror_suites and len(set(self.mirror_suites)) != len(self.mirror_suites):
            raise ValueError("mirror_suites names a suite twice (apt would read it twice)")
        return self
