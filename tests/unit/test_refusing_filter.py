"""One rule for the findings that refuse (inventory/valid.refusing): `fabric diff|push`,
`up`'s preflight and `provision add` each refuse by it. Budget errors are not in it: `add`
leaves those to its placement, which refuses a node that would break its rack's budget or
that of an upstream circuit the rack shares (BudgetError, exit 4), before writing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from provisioner import profile
from provisioner.discover import add as add_mod
from provisioner.errors import BudgetError, InventoryError
from provisioner.inventory import checks, load
from provisioner.inventory.findings import Category, Finding, Location, Severity
from provisioner.inventory.models import Bmc
from provisioner.inventory.valid import refusing
from provisioner.state import StateStore
from provisioner.switches import ops
from provisioner.workflows import up
from tests.conftest import FIXTURES

BMC = Bmc(protocol="redfish", address="10.20.1.40", credentials="bmc")
HERE = Location("site.yaml", 1, 1, "site")


def _finding(severity: Severity, category: Category) -> Finding:
    return Finding("x", severity, f"{severity} {category}", "", HERE, category)


def test_refusing_is_errors_but_budget_ones() -> None:
    every = [_finding(s, c) for s in Severity for c in Category]
    assert [(f.severity, f.category) for f in refusing(every)] == [
        (Severity.ERROR, Category.INVENTORY)]


def _broken_site(tmp_path: Path) -> Path:
    """The example site with one inventory error (two nodes share a host name)."""
    site = tmp_path / "site"
    shutil.copytree(FIXTURES.parent.parent / "inventories" / "example", site,
                    ignore=shutil.ignore_patterns(".provision"))
    text = (site / "placements.yaml").read_text()
    names = [ln.split(":", 1)[1].strip() for ln in text.splitlines()
             if ln.strip().startswith("- hostname:") or ln.strip().startswith("hostname:")]
    assert len(names) >= 2, names
    (site / "placements.yaml").write_text(text.replace(names[1], names[0]))
    return site


def test_fabric_and_up_refuse_the_same_findings(tmp_path: Path) -> None:
    loaded = load(_broken_site(tmp_path))
    wanted = refusing(checks.check(loaded))
    assert wanted, "the site was meant to be refused"
    with pytest.raises(InventoryError) as fab:
        ops.refuse_inventory_errors(loaded)
    with pytest.raises(InventoryError) as pre:
        up.preflight(loaded)
    assert fab.value.findings == wanted == pre.value.findings


def _shared_circuit_site(tmp_path: Path) -> Path:
    """add_commented with both racks' A feeds on one upstream circuit that has room for
    today's load (45,895 VA of 50,027 VA usable) and not for one more DGX H100."""
    site = tmp_path / "grow"
    shutil.copytree(FIXTURES / "sites" / "add_commented", site)
    racks = site / "racks.yaml"
    feed = "{name: A, phase: three, voltage_v: 415, breaker_a: 63}"
    assert feed in racks.read_text()
    racks.write_text("circuits:\n  - {name: bus1, phase: three, voltage_v: 415, breaker_a: 87}\n"
                     + racks.read_text().replace(feed, feed[:-1] + ", circuit: bus1}"))
    return site


def test_add_refuses_a_node_that_puts_a_shared_circuit_over_budget(tmp_path: Path) -> None:
    site = _shared_circuit_site(tmp_path)
    loaded = load(site)
    assert [f for f in checks.check(loaded) if f.severity is Severity.ERROR] == []
    store = StateStore(profile.for_site(loaded).state_path)
    source = add_mod.Source(id=None, bmc=BMC, block="dgx-h100", confidence=None, reasons=(),
                            mgmt_mac="7c:c2:55:00:00:40", serial=None)
    before = {p: p.read_text() for p in site.glob("*.yaml")}
    with pytest.raises(BudgetError, match="circuit bus1") as err:
        add_mod.add(loaded, store, source, apply=True)
    assert err.value.exit_code == 4
    assert store.nodes() == []
    assert {p: p.read_text() for p in site.glob("*.yaml")} == before  # nothing written
