"""Catalog building blocks: a chassis type with its power supplies, GPUs and NICs.

Kept apart from models.py (as fabric_models.py is): catalog.yaml and a site's catalog:
section are read into these; models.py imports `BlockType` for `Site.catalog`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from provisioner.inventory.fields import GpuModel, Model, Name
from provisioner.inventory.hostnet_models import RoleOfPorts


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
# (NVIDIA Driver Installation Guide, "Kernel Modules",
# docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html).
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
    model: GpuModel = Field(description="GPU model, such as H100 (becomes a label value); "
                            "node verification wants it as a word of nvidia-smi's name "
                            "(NVIDIA H100 80GB HBM3), case aside")
    count: int = Field(ge=1, le=72, description="GPUs per node")
    architecture: GpuArch = Field(description="GPU architecture (decides the kernel modules)")


class Nic(Model):
    ports: int = Field(ge=1, le=256, description="number of ports")
    speed_gbps: float = Field(gt=0, le=1600, description="port speed, Gbit/s")
    model: str | None = Field(default=None, description="NIC model")
    # Ways one port splits into (swp1s0..swp1s3 = 4): the switch's supported breakouts.
    breakout: tuple[Annotated[int, Field(ge=2, le=8)], ...] = Field(
        default=(), description="ways one port can be split (breakout), e.g. [2, 4]")
    # What the ports are for: validate counts a node's RoCE rails against its block's
    # `carries: roce` ports (a DGX H100 has 8 compute ports, one rail each).
    carries: RoleOfPorts | None = Field(
        default=None, description="what the ports carry: roce (one rail per port), "
        "storage, management or other")


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


def modules_for(wanted: str, branch: int, block: BlockType) -> str:
    """open or proprietary for one block type at a driver branch, honouring a choice
    (`wanted`: auto, open or proprietary). One rule for validate, render and the upgrade
    plan, beside the architecture tables it reads."""
    arch = block.gpu.architecture if block.gpu else None
    if wanted != "auto":
        return wanted
    if arch in PROPRIETARY_ONLY_ARCHS:
        return "proprietary"
    if arch in OPEN_ONLY_ARCHS:
        return "open"
    # Open modules are NVIDIA's default since R560 (driver installation guide).
    return "open" if branch >= 560 else "proprietary"
