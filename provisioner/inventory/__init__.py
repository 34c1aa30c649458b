"""Site inventory: typed models, the YAML loader with line numbers, catalog and checks."""

from provisioner.inventory.checks import check
from provisioner.inventory.findings import Category, Finding, Location, Severity
from provisioner.inventory.loader import LoadedSite, load, shipped_catalog

__all__ = [
    "Category",
    "Finding",
    "LoadedSite",
    "Location",
    "Severity",
    "check",
    "load",
    "shipped_catalog",
]
