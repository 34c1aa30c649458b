"""A bundle on a site, for `provision upgrade plan` (plan.py, kept short): which components
live on which node, the bundle as it applies to the site (the site's driver source, kernel
modules and flavour where the bundle names none; NSCQ and IMEX at the driver's version) and
the site's software as the bundle leaves it (what the roles render). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from provisioner.inventory.block_models import modules_for
from provisioner.inventory.bundle_models import Bundle
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.software_models import Dcgm, FabricManager, NvidiaDriver, Software
from provisioner.inventory.topology import HostPlan, has_roce
from provisioner.workflows.upgrade.steps import in_kubernetes

Versions = Mapping[str, str | None]

# Which nodes a component lives on; everything else is on every server.
GPU_COMPONENTS = ("nvidia_driver", "kernel_modules", "cuda", "dcgm", "container_toolkit")
NVSWITCH_COMPONENTS = ("fabric_manager", "nscq")
IMEX_COMPONENTS = ("imex",)  # GB200/GB300 trays: IMEX instead of fabric manager
ROCE_COMPONENTS = ("doca",)
NODE_COMPONENTS = ("containerd", "kubernetes")


def components_on(plan: HostPlan, loaded: LoadedSite) -> tuple[str, ...]:
    out: list[str] = list(NODE_COMPONENTS) if in_kubernetes(plan) else []
    if plan.block.gpu is not None:
        out += GPU_COMPONENTS
    if plan.block.nvswitch:
        out += NVSWITCH_COMPONENTS
    if plan.block.imex:
        out += IMEX_COMPONENTS
    if has_roce(loaded, plan.node):
        out += ROCE_COMPONENTS
    return tuple(out)


def bundle_driver(sw: Software, bundle: Bundle) -> NvidiaDriver:
    """The bundle's driver pins, with the site's driver source and kernel modules unless
    the bundle names them: the source is the site's (Secure Boot hosts take only Canonical's
    signed modules), and a bundle that leaves either out must not move a site onto NVIDIA's
    unsigned DKMS build, or from the proprietary modules the site chose to the open ones."""
    drv = bundle.nvidia_driver
    if sw.nvidia_driver is not None:  # what the bundle leaves out stays the site's
        kept = {f: getattr(sw.nvidia_driver, f)
                for f in ("source", "kernel_modules", "kernel_flavour")
                if f not in drv.model_fields_set}
        drv = drv.model_copy(update=kept)
    return drv


def modules_at(hp: HostPlan, versions: Versions) -> str | None:
    """open or proprietary: what `kernel_modules` (auto included) picks on this node's block
    at the driver branch of `versions`; None without a GPU or a driver."""
    driver = versions.get("nvidia_driver") or ""
    if hp.block.gpu is None or not driver[:3].isdigit() or driver.startswith("000"):
        return None
    return modules_for(versions.get("kernel_modules") or "auto", int(driver[:3]), hp.block)


def effective(loaded: LoadedSite, bundle: Bundle) -> Bundle:
    """The bundle as it applies to this site (its driver with the site's source, kernel
    modules and kernel flavour where it names none; NSCQ and IMEX at the driver's version
    where it pins none, as the roles install them): what plan compares and apply records."""
    drv = bundle_driver(loaded.site.software, bundle)
    return bundle.model_copy(update={"nvidia_driver": drv,
                                     "nscq": bundle.nscq or drv.version,
                                     "imex": bundle.imex or drv.version})


def software_at(loaded: LoadedSite, bundle: Bundle) -> Software:
    """The site's software section as the bundle leaves it (what the roles render)."""
    sw = loaded.site.software
    kube = (sw.kubernetes.model_copy(update={"version": bundle.kubernetes})
            if sw.kubernetes else None)
    return sw.model_copy(update={
        "nvidia_driver": bundle_driver(sw, bundle), "cuda": bundle.cuda,
        "doca": bundle.doca,
        "fabric_manager": FabricManager(enabled=sw.fabric_manager.enabled,
                                        version=bundle.fabric_manager),
        "dcgm": Dcgm(version=bundle.dcgm, diag_level=sw.dcgm.diag_level),
        "container_toolkit": bundle.container_toolkit, "kubernetes": kube})


def site_at(loaded: LoadedSite, bundle: Bundle) -> LoadedSite:
    return dataclasses.replace(loaded, site=loaded.site.model_copy(
        update={"software": software_at(loaded, bundle)}))
