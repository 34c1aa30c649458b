"""Release bundles: a named, versioned set of pinned versions a site upgrades to as one.

A bundle is a file `bundles/<name>.yaml` beside the site. It pins every layer the roles
install, so `provision upgrade plan` can check the set as a whole (CUDA against the
driver, fabric manager and NSCQ equal to the driver, Kubernetes one minor at a time)
before anything runs. Loading gives file:line:column for every bad key, as the site does.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from provisioner import sources
from provisioner.errors import ConfigError, InventoryError, ProvisionerError
from provisioner.inventory.fields import HttpUrl, KubeVersion, Model
from provisioner.inventory.findings import Finding, Severity
from provisioner.inventory.kube_checks import kubernetes_major_problem
from provisioner.inventory.loader import _schema_findings
from provisioner.inventory.software_models import NvidiaDriver, Version
from provisioner.inventory.sourcemap import SourceMap, _Segment
from provisioner.inventory.yamlsafe import parse

BUNDLE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
BUNDLE_DIR = "bundles"
# The chart versions the roles install (provisioner/sources.py): a bundle records what a
# release runs, so it may name these or none; any other version would be recorded as applied
# while the roles install the pinned one.
RECORDED_CHARTS = {"gpu_operator": sources.GPU_OPERATOR_CHART_VERSION,
                   "network_operator": sources.NETWORK_OPERATOR_CHART_VERSION}


class BundleInfo(Model):
    name: str = Field(pattern=BUNDLE_NAME_RE.pattern, description="the name --to takes")
    description: str = ""
    previous: str | None = Field(default=None, pattern=BUNDLE_NAME_RE.pattern,
                                 description="the bundle this one replaces (rollback target)")


class Charts(Model):
    """Helm chart versions of the operators (deployed by the cluster layer)."""

    gpu_operator: str | None = Field(default=None, pattern=r"^v?\d+(\.\d+){1,2}$")
    network_operator: str | None = Field(default=None, pattern=r"^v?\d+(\.\d+){1,2}$")


class FirmwarePin(Model):
    """One firmware component's target on a block: the image on the site mirror and its
    checksum, and what the component needs before its new version runs."""

    version: str = Field(min_length=1, max_length=128, pattern=r"^[\x21-\x7e][\x20-\x7e]*$",
                         description="the version the BMC reports once the image runs")
    image: HttpUrl = Field(description="the image on the site mirror (http or https)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="the image's SHA-256")
    reset: Literal["power_cycle", "bmc_reset", "next_boot", "none"] = Field(
        default="power_cycle", description="what makes the new version run")
    downgrade: bool = Field(default=False, description="allow moving to an older version")


class Bundle(Model):
    """Every pinned version of one release of the site's software stack."""

    bundle: BundleInfo
    nvidia_driver: NvidiaDriver = Field(description="branch and exact version")
    fabric_manager: Version | None = Field(
        default=None, description="nvidia-fabricmanager; must equal the driver (NVSwitch)")
    nscq: Version | None = Field(default=None, description="libnvidia-nscq; equals the driver")
    imex: Version | None = Field(default=None, description="nvidia-imex (GB200/GB300)")
    cuda: Version
    doca: Version | None = None
    dcgm: Version | None = None
    container_toolkit: Version | None = None
    containerd: Version | None = None
    kubernetes: KubeVersion
    charts: Charts = Charts()
    # block name -> component id as the BMC names it (BMC, BIOS, ...) -> its target
    firmware: dict[str, dict[str, FirmwarePin]] = Field(default_factory=dict, max_length=256)

    @property
    def name(self) -> str:
        return self.bundle.name

    def components(self) -> dict[str, str | None]:
        """Component -> pinned version, the rows `plan` compares."""
        return {
            "nvidia_driver": self.nvidia_driver.version or self.nvidia_driver.branch,
            "kernel_modules": self.nvidia_driver.kernel_modules,
            "fabric_manager": self.fabric_manager, "nscq": self.nscq, "imex": self.imex,
            "cuda": self.cuda, "doca": self.doca, "dcgm": self.dcgm,
            "container_toolkit": self.container_toolkit, "containerd": self.containerd,
            "kubernetes": self.kubernetes, "gpu_operator": self.charts.gpu_operator,
            "network_operator": self.charts.network_operator,
        }


@dataclass(frozen=True)
class LoadedBundle:
    bundle: Bundle
    path: Path
    sources: SourceMap


def bundle_path(site_dir: Path, name: str) -> Path:
    if not BUNDLE_NAME_RE.match(name):
        raise ConfigError(f"bundle name {name!r} is not a valid name",
                          hint="letters, digits, '.', '_' and '-'; for example 2026.11")
    return site_dir / BUNDLE_DIR / f"{name}.yaml"


def available(site_dir: Path) -> list[str]:
    folder = site_dir / BUNDLE_DIR
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_bundle(site_dir: Path, name: str) -> LoadedBundle:
    """Read and validate `bundles/<name>.yaml`; an InventoryError names file:line and key."""
    path = bundle_path(site_dir, name)
    display = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        have = ", ".join(available(site_dir)) or "none"
        raise ConfigError(f"no bundle {name!r}: {display} does not exist",
                          hint=f"bundles of this site: {have}") from None
    except OSError as exc:
        raise InventoryError(f"{display}: cannot read: {exc.strerror}") from None
    data, node, lines, _ = parse(raw, display)
    smap = SourceMap(files=[display], lines={display: lines})
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                smap.segments[k.value] = [_Segment(display, k, v, 0)]
    if not isinstance(data, dict):
        raise InventoryError(f"{display}:1:1: a bundle is a mapping of component: version",
                             hint="see docs/upgrade.md for the format")
    try:
        bundle = Bundle.model_validate(data)
    except ValidationError as exc:
        findings = _schema_findings(exc, smap)
        raise InventoryError(f"{display}: {findings[0].format()}" if findings else display,
                             findings=findings) from None
    if bundle.bundle.name != name:
        loc = smap.locate(("bundle", "name"))
        raise InventoryError(f"{loc}: bundle.name is {bundle.bundle.name!r} but the file is "
                             f"{name}.yaml", hint="make the name and the file name agree")
    unknown = _unrecorded(bundle, smap)
    if unknown:
        raise InventoryError(unknown[0].format(), findings=unknown)
    return LoadedBundle(bundle, path, smap)


def _unrecorded(bundle: Bundle, smap: SourceMap) -> list[Finding]:
    """What the roles would not install as the bundle says: a chart version other than the
    one the tool pins, a Kubernetes major other than the one the roles install."""
    out = []
    for chart, pinned in RECORDED_CHARTS.items():
        named = getattr(bundle.charts, chart)
        if named is not None and named.removeprefix("v") != pinned.removeprefix("v"):
            out.append(Finding(
                "bundle-chart-unknown", Severity.ERROR,
                f"charts.{chart} {named}: this version of the tool installs the "
                f"{chart.replace('_', ' ')} chart at {pinned} only, and has no record of "
                f"{named}", f"write {chart}: \"{pinned}\" or leave it out",
                smap.locate(("charts", chart))))
    major = kubernetes_major_problem(bundle.kubernetes)
    if major is not None:
        out.append(Finding("kubernetes-major", Severity.ERROR, major[0], major[1],
                           smap.locate(("kubernetes",))))
    return out


def bundle_findings(site_dir: Path, blocks: Collection[str] | None = None) -> list[Finding]:
    """Every release bundle of the site checked as `load_bundle` checks it (what `validate`
    reports): the findings of each one refused, nothing for a bundle that loads; with
    `blocks` (the site's placed block names), firmware pinned for another block too."""
    out: list[Finding] = []
    for name in available(site_dir):
        try:
            loaded = load_bundle(site_dir, name)
        except ProvisionerError as exc:
            found = getattr(exc, "findings", None) or [
                Finding("bundle-file", Severity.ERROR, exc.message, exc.hint)]
            out.extend(found)
            continue
        # a warning: a bundle written for blocks since retired must not stop every command
        out += [Finding("firmware-unknown-block", Severity.WARNING,
                        f"bundle {name} pins firmware for block '{block}', which the site "
                        "has no node of: nothing of it is planned",
                        "name a block the site's placements use, or drop the entry",
                        loaded.sources.locate(("firmware", block), at_key=True))
                for block in sorted(loaded.bundle.firmware)
                if blocks is not None and block not in blocks]
    return out


def from_software(software: Any, name: str = "site") -> Bundle:
    """The versions the site's `software:` section pins, as a bundle (the starting point
    when no bundle has been applied yet). Missing pins stay None."""
    drv = software.nvidia_driver or NvidiaDriver(branch="000")
    version = drv.version
    return Bundle(
        bundle=BundleInfo(name=name),
        nvidia_driver=drv,
        fabric_manager=software.fabric_manager.version or version,
        nscq=version, imex=version, cuda=software.cuda or "0",
        doca=software.doca, dcgm=software.dcgm.version,
        kubernetes=software.kubernetes.version if software.kubernetes else "0.0.0",
    )
