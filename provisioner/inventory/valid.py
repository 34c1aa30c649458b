"""The one way a command gets a site to act on: loaded, checked exactly as `provision
validate` checks it (`site_findings`), and refused when `refusing` finds anything.

Not re-exported by the package: release bundles name the chart versions of sources.py,
which itself reads the inventory's version helpers.
"""

from __future__ import annotations

from pathlib import Path

from provisioner import power
from provisioner.errors import InventoryError
from provisioner.inventory.bundle_models import bundle_findings
from provisioner.inventory.checks import check
from provisioner.inventory.findings import Category, Finding, Severity
from provisioner.inventory.loader import LoadedSite, load


def site_findings(loaded: LoadedSite, basis: power.Basis = "nameplate") -> list[Finding]:
    """Everything `validate` reports: the site's checks, then its release bundles' (a bundle
    the roles would install differently from what it says is refused here, not mid-upgrade)."""
    return check(loaded, basis) + bundle_findings(
        loaded.base_dir, {p.block for p in loaded.site.placements})


def refusing(findings: list[Finding]) -> list[Finding]:
    """The findings no command acts past: errors. Warnings never refuse, and neither do
    budget errors: a rack over its power, cooling or space budget is refused rack by rack
    where power is switched on (`up`'s gate, `bmc on`/`cycle`), exit 4."""
    return [f for f in findings
            if f.severity is Severity.ERROR and f.category is not Category.BUDGET]


def load_valid(path: str | Path, basis: power.Basis = "nameplate") -> LoadedSite:
    """Load a site and run validate's checks; an InventoryError (exit 3) with every refusing
    finding when there is one, so that no command acts on a site `validate` refuses."""
    loaded = load(path)
    errs = refusing(site_findings(loaded, basis))
    if errs:
        raise InventoryError(f"{len(errs)} error(s) in the inventory: {errs[0].format()}",
                             hint="`provision validate` lists them with their warnings",
                             findings=errs)
    return loaded
