"""The NVIDIA payload of one host as data: which packages, from which source, pinned how.

The one source of truth for package names. `render` writes these lists into each host's
variables (the roles install exactly them) and `render --artifacts` lists the same lists
for an offline mirror; no role computes a package name of its own. Pure: no I/O.

Sources (and the pages named at each rule):
- NVIDIA driver installation guide, "Recent updates" (Ubuntu 590 package renames): from
  branch 590 the Ubuntu packages of NVIDIA's CUDA repository drop the branch from their
  names (nvidia-open, cuda-drivers, ...); a branch or version is chosen with the
  nvidia-driver-pinning-<branch|version> package, installed before the driver. [P]
- NVIDIA/deepops roles/nvidia-dgx vars: DGX OS 7 (580) uses nvidia-driver-580-open,
  libnvidia-nscq, nvidia-fabricmanager (unversioned), datacenter-gpu-manager-4-cuda13;
  NVLink5 systems (B200, B300) add nvlsm and libnvsdm; GB200/GB300 run nvidia-imex instead
  of fabric manager. DGX OS 6 (550): nvidia-fabricmanager-550, libnvidia-nscq-550. [P]
- packages.ubuntu.com: Canonical's signed precompiled modules linux-modules-nvidia-<B>-server
  [-open]-<kernel flavour>, nvidia-headless-no-dkms-<B>-server[-open], nvidia-utils-<B>-server,
  and nvidia-fabricmanager-<B> from source fabric-manager-<B> (amd64 and arm64). [P]
- NVIDIA GPU Operator, "precompiled and Canonical signed drivers": Secure Boot nodes need
  Canonical's signed modules (linux-modules-nvidia-<B>-server-<kernel>). [P]
- DCGM 4 on apt: datacenter-gpu-manager-4-cuda<CUDA major> (cuda11, cuda12, cuda13, each
  at 4.5.2-1 beside datacenter-gpu-manager-4-core), from NVIDIA's CUDA repository; NVIDIA's
  "Install DCGM" page (docs.nvidia.com/datacenter/dcgm/latest/installation.html) uses the
  same repository. [S: package listings of the CUDA repository quoted in public scripts]
- Fabric Manager user guide: fabric manager runs at exactly the driver's version. [P]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from provisioner.inventory.block_models import (
    PROPRIETARY_ONLY_ARCHS,
    BlockType,
    GpuArch,
    modules_for,
)
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.software_models import Software
from provisioner.inventory.topology import HostPlan

DriverSource = Literal["nvidia", "canonical"]
Flavour = Literal["open", "proprietary"]

# Grace systems are arm64 (NVIDIA calls the server flavour "sbsa" in its repository paths).
ARM64_ARCHS = frozenset({GpuArch.GRACE_HOPPER, GpuArch.GRACE_BLACKWELL})
# NVLink 5 (Blackwell) NVSwitch systems need the NVLink subnet manager (DeepOps, DGX OS 7).
NVLINK5_ARCHS = frozenset({GpuArch.BLACKWELL})
# Branch from which NVIDIA's Ubuntu driver packages drop the branch suffix ("Recent updates").
UNVERSIONED_DRIVER_FROM = 590
# Branch from which fabric manager, nscq, libnvsdm and IMEX are unversioned (DGX OS 7, 580).
UNVERSIONED_FABRIC_FROM = 580
# Branch from which NVIDIA publishes nvidia-driver-pinning-* packages for apt (the 580
# branch is the first the guide's pinning examples name).
PINNING_PACKAGE_FROM = 580
# DCGM 4's Debian packages carry epoch 1: datacenter-gpu-manager-4-core 1:4.5.2-1 in NVIDIA's
# CUDA repository (as tracked by Azure AgentBaker's parts/common/components.json).
DCGM_APT_EPOCH = "1:"
# The running kernel's headers, which the DKMS builds of NVIDIA's driver (from its own
# repository) and of DOCA compile against: the roles install linux-headers-<uname -r>
# (NVIDIA Driver Installation Guide, Ubuntu pre-installation). Listed for an offline mirror
# under this name: the release is each node's own.
KERNEL_HEADERS = "linux-headers-<running kernel>"


@dataclass(frozen=True)
class Payload:
    """What one GPU host gets. Empty tuples mean the role installs nothing of that kind."""

    source: DriverSource
    arch: Literal["amd64", "arm64"]
    repo_arch: Literal["x86_64", "sbsa"]
    flavour: Flavour
    driver: tuple[str, ...] = ()
    pinning: tuple[str, ...] = ()       # installed before the driver (NVIDIA's pin package)
    fabric: tuple[str, ...] = ()        # fabric manager + nscq (+ nvlsm, libnvsdm) or IMEX
    fabric_service: str = ""
    dcgm: tuple[str, ...] = ()
    cuda: tuple[str, ...] = ()
    # Packages held at exactly the driver version by an apt preferences pin.
    pinned_at_driver: tuple[str, ...] = field(default=())
    # source canonical: the kernel flavour its linux-modules-nvidia-* package is for.
    kernel_flavour: str = ""

    def apt_specs(self, names: tuple[str, ...], sw: Software) -> list[str]:
        """What apt installs: `name=<version>-*` for each package the site pins.

        An installed package stays where it is under `state: present` and a bare name: the
        version is what makes an upgrade (or a rollback) move it. The apt preferences pin
        beside it holds it there afterwards."""
        drv = sw.nvidia_driver.version if sw.nvidia_driver else None
        out = []
        for n in names:
            if drv and n in self.pinned_at_driver:
                out.append(f"{n}={drv}-*")
            elif n in self.dcgm and sw.dcgm.version:
                out.append(f"{n}={DCGM_APT_EPOCH}{sw.dcgm.version}-*")
            elif n in self.cuda and sw.cuda and sw.cuda.count(".") == 2:
                out.append(f"{n}={sw.cuda}-*")  # cuda-toolkit-12-8 at 12.8.1
            else:
                out.append(n)
        return out

    @property
    def builds_with_dkms(self) -> bool:
        """NVIDIA's repository builds the driver's modules on the node (DKMS); Canonical's
        ships them precompiled."""
        return self.source == "nvidia" and bool(self.driver)

    def by_role(self) -> dict[str, tuple[str, ...]]:
        return {"nvidia_driver": self.pinning + self.driver, "fabric_manager": self.fabric,
                "dcgm": self.dcgm, "cuda_toolkit": self.cuda}


def cuda_major_for(sw: Software, block: BlockType | None = None) -> int:
    """CUDA major for DCGM's package: the pinned CUDA's, else the newest the driver runs and
    the block's GPUs can: CUDA 13 drops Maxwell, Pascal and Volta (CUDA 13.0 release notes,
    docs.nvidia.com/cuda/cuda-toolkit-release-notes/), so a V100 node takes DCGM's CUDA 12
    build whatever the driver.

    Driver 580 is the first of CUDA 13 and 525 the first of CUDA 12 (CUDA release notes,
    Table 3, in compat.py)."""
    if sw.cuda:
        return int(sw.cuda.split(".")[0])
    branch = int(sw.nvidia_driver.branch) if sw.nvidia_driver else 0
    newest = 13 if branch >= 580 else 12 if branch >= 525 else 11
    pre_turing = block is not None and block.gpu is not None \
        and block.gpu.architecture in PROPRIETARY_ONLY_ARCHS
    return min(newest, 12) if pre_turing else newest


def _driver_packages(source: DriverSource, branch: int, flavour: Flavour,
                     kernel: str) -> tuple[str, ...]:
    sfx = "-open" if flavour == "open" else ""
    if source == "canonical":
        # Signed, precompiled modules for the running kernel flavour (`kernel`); the
        # flavour's meta package follows kernel updates.
        return (f"linux-modules-nvidia-{branch}-server{sfx}-{kernel}",
                f"nvidia-headless-no-dkms-{branch}-server{sfx}",
                f"nvidia-utils-{branch}-server")
    if branch >= UNVERSIONED_DRIVER_FROM:
        return ("nvidia-open",) if flavour == "open" else ("cuda-drivers",)
    return (f"nvidia-driver-{branch}-open",) if flavour == "open" else (f"cuda-drivers-{branch}",)


def _fabric_packages(source: DriverSource, branch: int, block: BlockType
                     ) -> tuple[tuple[str, ...], str]:
    versioned = source == "canonical" or branch < UNVERSIONED_FABRIC_FROM
    sfx = f"-{branch}" if versioned else ""
    if block.imex:
        return (f"nvidia-imex{sfx}",), "nvidia-imex"
    if not block.nvswitch:
        return (), ""
    pkgs = [f"nvidia-fabricmanager{sfx}", f"libnvidia-nscq{sfx}"]
    arch = block.gpu.architecture if block.gpu else None
    if arch in NVLINK5_ARCHS:
        pkgs += ["nvlsm", f"libnvsdm{sfx}"]
    return tuple(pkgs), "nvidia-fabricmanager"


def for_block(sw: Software, block: BlockType, flavour: Flavour) -> Payload | None:
    """The payload of a host of `block` (None: no GPU, or no driver pinned)."""
    drv = sw.nvidia_driver
    if block.gpu is None or drv is None:
        return None
    branch = int(drv.branch)
    arm = block.gpu.architecture in ARM64_ARCHS
    arch: Literal["amd64", "arm64"] = "arm64" if arm else "amd64"
    source: DriverSource = drv.source
    dgx_os = sw.os.startswith("dgx-os")
    # The kernel flavour Canonical's precompiled modules are for: the site's, or generic
    # (Grace (arm64) servers run the 64k-page kernel).
    kernel = (drv.kernel_flavour or ("generic-64k" if arm else "generic")) \
        if source == "canonical" and not dgx_os else ""
    driver = () if dgx_os else _driver_packages(source, branch, flavour, kernel)
    pinning: tuple[str, ...] = ()
    if not dgx_os and source == "nvidia" and branch >= PINNING_PACKAGE_FROM:
        pinning = (f"nvidia-driver-pinning-{drv.version or branch}",)
    fabric, service = _fabric_packages(source, branch, block)
    if sw.fabric_manager.enabled is False and not block.imex:
        fabric, service = (), ""
    cuda = (f"cuda-toolkit-{'-'.join(sw.cuda.split('.')[:2])}",) if sw.cuda else ()
    # linux-modules-* carry the kernel's version and nvlsm its own: not the driver's.
    pinned = tuple(p for p in driver + fabric
                   if p != "nvlsm" and not p.startswith("linux-modules-")) if drv.version else ()
    # The driver metapackage Depends on its libraries and tools at exactly its own version
    # (Ubuntu's nvidia-graphics-drivers packaging, which NVIDIA's CUDA repository reuses):
    # without a pin on them apt picks their newest release and refuses the install. An
    # apt_preferences(5) glob holds every package of the branch (the lab mirror's
    # tests/unit/test_lab_mirror.py shows both). linux-modules-* end in the kernel flavour.
    if pinned and not dgx_os:
        sfx = "-server" if source == "canonical" else ""
        pinned += (f"*-{branch}{sfx}", f"*-{branch}{sfx}-open")
    return Payload(source=source, arch=arch, repo_arch="sbsa" if arm else "x86_64",
                   flavour=flavour, driver=driver, pinning=pinning, fabric=fabric,
                   fabric_service=service,
                   dcgm=(f"datacenter-gpu-manager-4-cuda{cuda_major_for(sw, block)}",),
                   cuda=cuda, pinned_at_driver=pinned, kernel_flavour=kernel)


def cuda_repo_distro(os_name: str) -> str:
    """ubuntu-22.04 -> ubuntu2204 (NVIDIA's repository path); DGX OS 6/7 are 22.04/24.04."""
    base = {"dgx-os-6": "ubuntu-22.04", "dgx-os-7": "ubuntu-24.04"}.get(os_name, os_name)
    return base.replace("-", "").replace(".", "")


def kernel_modules_for(loaded: LoadedSite, block: BlockType) -> str:
    """open or proprietary for one block type, honouring the site's choice."""
    drv = loaded.site.software.nvidia_driver
    return modules_for(drv.kernel_modules if drv else "auto", int(drv.branch) if drv else 0,
                       block)


def payload_for(loaded: LoadedSite, h: HostPlan) -> Payload | None:
    """The NVIDIA packages of one host, at the kernel-module flavour its block gets."""
    flavour = kernel_modules_for(loaded, h.block)
    return for_block(loaded.site.software, h.block,
                                 "open" if flavour == "open" else "proprietary")
