"""docs/findings.md is the code's catalogue of finding codes: generated from the source,
stale the moment a code is added or changed, and covering every code a site can produce."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap

import pytest

from provisioner.errors import InventoryError
from provisioner.inventory import check, load
from tests.conftest import EXAMPLE, FIXTURES, ROOT

_spec = importlib.util.spec_from_file_location("findings_doc", ROOT / "scripts" / "findings_doc.py")
assert _spec is not None and _spec.loader is not None
findings_doc = importlib.util.module_from_spec(_spec)
sys.modules["findings_doc"] = findings_doc
_spec.loader.exec_module(findings_doc)

SITES = [EXAMPLE, ROOT / "inventories" / "vscaler-dgx",
         *sorted((FIXTURES / "invalid").glob("*.yaml"))]


@pytest.fixture(scope="module")
def catalogue():
    return findings_doc.collect()


def _listed(code: str, cat) -> bool:
    if code in cat.entries:
        return True
    return any(e.pattern and re.fullmatch(re.sub(r"\\\{.*?\\\}", ".+", re.escape(e.code)), code)
               for e in cat.entries.values())


def test_the_page_is_what_the_generator_writes_from_the_code(catalogue):
    page = (ROOT / "docs" / "findings.md").read_text()
    assert page == findings_doc.render(catalogue), \
        "docs/findings.md is stale: run .venv/bin/python scripts/findings_doc.py"


def test_every_call_s_code_is_understood(catalogue):
    assert catalogue.unresolved == []


def test_each_way_a_code_is_given_is_found(catalogue):
    entries = catalogue.entries
    assert entries["no-driver"].severities == {"error"}               # emit("...")
    assert any("warning" in s for s in entries["psu-not-n-plus-n"].severities)
    assert entries["inventory-file"].modules >= {"provisioner/inventory/loader.py"}  # Finding
    assert entries["yaml-alias-bomb"].severities == {"error"}         # fail(..., code=)
    assert entries["kernel-flavour-change"].severities == {"refusal"}  # Refusal(...)
    assert "inline-secret" in entries                                 # code = a if .. else b
    assert entries["schema-{kind}"].pattern
    assert {"duplicate-hostname", "duplicate-mac"} <= entries["duplicate-{kind}"].values
    assert any("budget" in s for s in entries["{f.check}-over-budget"].severities)
    assert entries["no-driver"].hints == [
        "pin a driver branch, for example nvidia_driver: {branch: '570'}"]


@pytest.mark.parametrize("site", SITES, ids=lambda p: p.name)
def test_every_code_a_site_produces_is_in_the_catalogue(site, catalogue):
    try:
        found = check(load(site))
    except InventoryError as exc:
        found = exc.findings
    assert found or site.parent.name != "invalid"
    missing = [f.code for f in found if not _listed(f.code, catalogue)]
    assert missing == []


def test_a_new_code_is_picked_up_without_registering_it(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "checks.py").write_text(textwrap.dedent('''
        def fail(message, hint, *, code="file-bad"):
            return Finding(code, Severity.ERROR, message, hint)

        def checks(emit, n):
            emit("brand-new", (), f"{n} things", "fewer things", severity=Severity.WARNING)
            emit(f"too-{n}", (), "x")
            journal.emit(Progress("h", "s", "start"))
            fail("bad bytes", "save as UTF-8")
            fail("deep", "flatten", code="file-deep")
            return [Refusal("no-way", "refused", "do this")]
    '''))
    cat = findings_doc.collect(tmp_path, "pkg")
    assert set(cat.entries) == {"brand-new", "too-{n}", "file-bad", "file-deep", "no-way"}
    assert cat.entries["brand-new"].severities == {"warning"}
    assert cat.entries["brand-new"].messages == ["… things"]
    assert cat.entries["file-deep"].hints == ["flatten"]
    assert cat.entries["no-way"].severities == {"refusal"}
    page = findings_doc.render(cat)
    assert "| `brand-new` | warning | … things | fewer things |" in page


def test_every_note_still_names_a_code_in_the_source(catalogue):
    assert set(findings_doc.NOTES) <= set(catalogue.entries)
