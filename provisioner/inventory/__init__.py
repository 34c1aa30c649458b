"""Site inventory: typed models, the YAML loader with line numbers, catalog and checks.

The package's names are looked up when first used, not imported with the package: a module
that needs only the models (payload, sources, roce: the pure domain rules) then imports
no check, and the checks can import those rules at their top without a cycle."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from provisioner.inventory.checks import check
    from provisioner.inventory.findings import Category, Finding, Location, Severity
    from provisioner.inventory.loader import LoadedSite, load, shipped_catalog

_WHERE = {"check": "checks", "Category": "findings", "Finding": "findings",
          "Location": "findings", "Severity": "findings", "LoadedSite": "loader",
          "load": "loader", "shipped_catalog": "loader"}

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


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
