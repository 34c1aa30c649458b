"""provision report: elevation geometry, one source for the numbers, escaping, no URL, valid
SVG, node states from a real state store, exit codes; provision schema."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from provisioner import power, results
from provisioner.cli import app
from provisioner.inventory import check, load
from provisioner.report import build, read_state, render_html, svg
from provisioner.state import Phase, StateStore
from provisioner.workflows.up import state_path
from tests.conftest import EXAMPLE, FIXTURES, VSCALER

runner = CliRunner()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

# One rack, single 230 V / 16 A feed (2,944 VA usable) and 5 kW of cooling: a DGX H100
# (10.2 kW) is over power and cooling. sn5600 (2 U) at U42 reaches above the 42 U top;
# the storage box at U5 overlaps the DGX at U1-U8.
BAD_SITE = """\
site: {name: bad, description: "<script>alert('x')</script> & co"}
racks:
  - name: r09
    feeds: [{name: A, phase: single, voltage_v: 230, breaker_a: 16}]
    cooling_kw: 5
placements:
  - rack: r09
    u: 1
    block: dgx-h100
    nodes: [{hostname: dgx91, bmc: {protocol: redfish, address: 10.0.0.1, credentials: bmc}}]
  - rack: r09
    u: 5
    block: storage-flash-2u
    nodes: [{hostname: stor91, bmc: {protocol: ipmi, address: 10.0.0.2, credentials: bmc}}]
  - {rack: r09, u: 42, block: sn5600,
     nodes: [{hostname: leaf91, management: {os: cumulus, credentials: sw}}]}
credentials:
  bmc: {username: a, password: {env: X}}
  sw: {username: a, password: {env: Y}}
"""


def _report(path, state=None):
    loaded = load(path)
    return loaded, build(loaded, check(loaded), state=state, generated_at=NOW)


@pytest.fixture(scope="module")
def vscaler():
    return _report(VSCALER)


@pytest.fixture
def bad(write_site):
    return _report(write_site(BAD_SITE))


def test_chassis_height_is_proportional_to_its_units(vscaler):
    _, rep = vscaler
    chassis = rep.racks[0].elevation.chassis
    by_block = {c.block: c for c in chassis}
    assert by_block["dgx-2"].height_px == 10 * svg.U_PX
    assert by_block["hci-2u4n"].height_px == 2 * svg.U_PX
    for c in chassis:
        assert c.height_px == c.rack_units * svg.U_PX
    # U1 is at the bottom: a higher U is drawn higher (smaller y)
    stor01 = next(c for c in chassis if c.nodes == ("stor01",))
    ipmi = next(c for c in chassis if c.nodes == ("ipmi01",))
    assert ipmi.y_px < stor01.y_px
    assert stor01.y_px + stor01.height_px == pytest.approx(
        rep.racks[0].elevation.frame_y_px + rep.racks[0].elevation.frame_height_px)


def test_free_units_are_the_gaps(vscaler):
    _, rep = vscaler
    e = rep.racks[0].elevation
    assert [(f.low_u, f.high_u) for f in e.free] == [(41, 42)]
    assert e.free_u == 2 == rep.racks[0].nameplate.free_u


def test_overlap_and_over_the_top_are_drawn_as_errors(bad):
    _, rep = bad
    e = rep.racks[0].elevation
    errors = {c.nodes[0]: c.error for c in e.chassis}
    assert errors["dgx91"] is None
    assert errors["stor91"] is not None and "overlaps dgx-h100" in errors["stor91"]
    assert errors["leaf91"] is not None and "above the top" in errors["leaf91"]
    leaf = next(c for c in e.chassis if c.nodes == ("leaf91",))
    assert leaf.y_px < e.frame_y_px  # drawn over the frame, where it would stick out
    assert leaf.fill == svg.ERROR_FILL
    assert not rep.racks[0].ok and not rep.ok
    # the drawing marks exactly the placements checks.py reports (one rule, two views)
    reported = {int(m.group(1)) for f in rep.findings
                if f.code in ("u-overlap", "u-out-of-range") and f.location
                and (m := re.match(r"placements\[(\d+)\]", f.location.key_path))}
    assert {c.index for c in e.errors} == reported == {1, 2}


def test_budget_numbers_are_power_py_numbers(vscaler):
    loaded, rep = vscaler
    expected = results.dump(results.power_report(
        power.budget(loaded.site, loaded.catalog)))["racks"][0]
    typical = power.budget(loaded.site, loaded.catalog, "typical").racks[0]
    rack = rep.racks[0]
    assert rack.nameplate.load_w == pytest.approx(expected["power"]["load_w"], abs=0.1)
    assert rack.feeds[0].limit == pytest.approx(expected["power"]["feeds"][0]["usable_va"], abs=0.1)
    assert rack.feeds[0].typical == pytest.approx(typical.load_va)
    html = render_html(rep)
    assert "28,580" in html and "21,310" in html and "34,918" in html  # `provision power`'s


def test_over_budget_rack_is_marked(bad):
    _, rep = bad
    html = render_html(rep)
    assert rep.racks[0].over == ["cooling", "power"]
    assert 'data-rack="r09"' in html and 'data-ok="false"' in html
    assert "OVER BUDGET: cooling, power" in html
    assert 'class="bar over"' in html
    feed = rep.racks[0].nameplate.failures[0]
    assert feed.subject == "feed A"
    assert f"over by {feed.over_by:,.0f} VA" in html  # power.py's figure, not recomputed


def test_inventory_text_is_escaped_and_page_has_no_url(bad):
    _, rep = bad
    html = render_html(rep)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;" in html
    assert not re.search(r"(https?:|ftp:|//[a-z])", html, re.I)
    assert not re.search(r"\b(src|href)=", html)


def test_every_svg_is_valid_xml(bad, vscaler):
    for _, rep in (bad, vscaler):
        html = render_html(rep)
        svgs = re.findall(r"<svg\b.*?</svg>", html, re.S)
        assert len(svgs) >= 1 + 3  # an elevation and at least feed, heat and airflow bars
        for text in svgs:
            root = ET.fromstring(text)
            assert root.tag == "svg"
        elev = ET.fromstring(svgs[0])
        rects = [r for r in elev.iter("rect") if "chassis" in r.get("class", "")]
        assert len(rects) == len(rep.racks[0].elevation.chassis)


def test_findings_carry_file_and_line(bad):
    _, rep = bad
    html = render_html(rep)
    overlap = next(f for f in rep.findings if f.code == "u-overlap")
    assert overlap.location is not None
    assert f"{overlap.location.file}:{overlap.location.line}:" in html
    assert 'data-code="u-overlap"' in html


def test_node_states_from_a_real_store(tmp_path):
    import shutil
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    loaded = load(site)
    assert read_state(loaded, wanted=False, now=NOW) is None
    assert not state_path(loaded).exists()  # asking did not create a store
    empty = read_state(loaded, wanted=True, now=NOW)
    assert empty is not None and not empty.exists
    store = StateStore(state_path(loaded))
    run = store.start_run("up")
    store.enroll(["dgx01", "cp01"], run)
    store.transition("dgx01", Phase.FAILED, run_id=run, reason="BMC <unreachable>")
    store.end_run(run, "failed")
    view = read_state(loaded, wanted=False, now=datetime.now(UTC))
    assert view is not None and view.exists
    assert {n.hostname: n.phase for n in view.nodes} == {"cp01": "enrolled", "dgx01": "failed"}
    assert "dgx02" in view.not_enrolled and "leaf01" not in view.not_enrolled
    html = render_html(build(loaded, check(loaded), state=view, generated_at=NOW))
    assert 'data-node="dgx01" data-phase="failed"' in html
    marks = {m.hostname: m for r in rep_racks(loaded, view) for c in r.elevation.chassis
             for m in c.marks}
    assert set(marks) == {"dgx01", "cp01"}  # nodes the store does not know get no mark
    assert marks["dgx01"].fill == svg.PHASE_FILL["failed"]
    assert marks["cp01"].fill == svg.PHASE_FILL_BUSY
    assert "BMC &lt;unreachable&gt;" in html
    assert "failed in" in html and ">enrolled<" in html and "<code>up</code>" in html


def rep_racks(loaded, view):
    return build(loaded, check(loaded), state=view, generated_at=NOW).racks


def test_cli_writes_the_page_and_exits_like_validate(write_site, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["report", str(write_site(BAD_SITE)), "--out", str(out),
                                 "--json"])
    # overlap and above-the-top are inventory errors: exit 3, the page is still written
    assert result.exit_code == 3, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "provisioner.report/v1" and doc["ok"] is False
    assert doc["racks"][0]["over_budget"] == ["cooling", "power"]
    assert (out / "index.html").read_text().startswith("<!DOCTYPE html>")


def test_cli_example_prints_the_page_path(tmp_path):
    import shutil
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    result = runner.invoke(app, ["report", str(site), "--state"])
    assert result.exit_code == 0, result.output
    written = site / ".provision" / "report" / "index.html"
    assert result.output.strip().splitlines()[-1] == str(written)
    page = written.read_text()
    assert "No state store yet" in page  # --state: the section is there, saying so
    assert not (site / ".provision" / "state.db").exists()
    for name in ("r01", "dgx01", "dgx02", "stor01", "cp01", "cp02", "cp03", "leaf01", "mgmt01"):
        assert name in page


def test_json_lists_every_chassis(vscaler, tmp_path):
    loaded, rep = vscaler
    doc = results.dump(results.site_report(rep, tmp_path / "index.html"))
    assert sum(len(c["nodes"]) for c in doc["racks"][0]["chassis"]) == sum(
        len(p.nodes) for p in loaded.site.placements)
    assert doc["racks"][0]["used_u"] == 40


def test_an_inventory_that_does_not_load_still_gets_a_page_of_findings(tmp_path):
    bad = FIXTURES / "invalid" / "unknown_key.yaml"
    result = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path), "--json"])
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc["racks"] == [] and doc["findings"]["errors"] >= 1
    page = (tmp_path / "index.html").read_text()
    assert "unknown key &#39;hostnme&#39;" in page
    assert re.search(r"unknown_key\.yaml:\d+:\d+", page)
    assert "No rack can be drawn" in page


def _circuit_rows(html: str) -> dict[str, list[str]]:
    """The circuits table as a parser reads it: per data-circuit row, its cells' text."""
    from html.parser import HTMLParser

    rows: dict[str, list[str]] = {}

    class Rows(HTMLParser):
        row: str | None = None
        cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found = dict(attrs)
            if tag == "tr" and found.get("data-circuit"):
                self.row = str(found["data-circuit"])
                rows[self.row] = [str(found.get("data-over"))]
            elif tag == "td" and self.row is not None:
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag == "td" and self.row is not None and self.cell is not None:
                rows[self.row].append(" ".join("".join(self.cell).split()))
                self.cell = None
            elif tag == "tr":
                self.row = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    Rows().feed(html)
    return rows


def test_the_page_shows_the_shared_circuits_with_power_py_numbers(tmp_path):
    """Two racks on pdu1-cb1 (test_power_circuits' site: 12,400 VA each on 16,000 VA
    usable): the circuits table says 155 %, marks the row over, and names both racks with
    the loads `provision power` sums; pdu2-cb1 carries nothing. A site without circuits:
    no such section."""
    from tests.unit.test_power_circuits import single_racks, write

    loaded, rep = _report(write(tmp_path, single_racks("pdu1-cb1", "pdu1-cb1")))
    html = render_html(rep)
    assert '<section id="circuits">' in html and not rep.ok
    rows = _circuit_rows(html)
    want = power.budget(loaded.site, loaded.catalog).circuits[0]
    assert rows["pdu1-cb1"] == [
        "true", "pdu1-cb1", "single-phase 200 V / 100 A ×0.8", f"{want.usable_va:,.0f}",
        "24,800", "155%", "r01 (feed A, 12,400 VA), r02 (feed A, 12,400 VA)"]
    assert rows["pdu2-cb1"] == ["false", "pdu2-cb1", "single-phase 200 V / 100 A ×0.8",
                                "16,000", "0", "0%", "none"]
    assert "circuit pdu1-cb1: worst-case load" in html  # power.py's message, as validate
    _, plain = _report(EXAMPLE)
    assert 'id="circuits"' not in render_html(plain) and plain.circuits == ()


def test_json_lists_the_shared_circuits_as_power_json_does(tmp_path):
    """`report --json` names an overloaded upstream circuit, so a CI job that reads it sees
    two racks (each within its own feed) overload one breaker: test_power_circuits' site,
    12,400 VA per rack on pdu1-cb1's 16,000 VA usable. The circuits are `power --json`'s,
    field for field."""
    from tests.unit.test_power_circuits import single_racks, write

    site = write(tmp_path, single_racks("pdu1-cb1", "pdu1-cb1"))
    result = runner.invoke(app, ["report", str(site), "--out", str(tmp_path / "page"),
                                 "--json"])
    assert result.exit_code == 4, result.output  # a budget error only, as validate
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert [r["ok"] for r in doc["racks"]] == [True, True]  # no rack alone is over
    c = {c["name"]: c for c in doc["circuits"]}
    assert list(c) == ["pdu1-cb1", "pdu2-cb1"]
    over = c["pdu1-cb1"]
    assert over["ok"] is False
    assert (over["usable_va"], over["load_va"]) == (16000, 24800)
    assert over["utilization"] == pytest.approx(1.55)
    assert [(ld["rack"], ld["feeds"], ld["load_va"]) for ld in over["loads"]] == [
        ("r01", ["A"], 12400), ("r02", ["A"], 12400)]
    assert [(f["check"], f["subject"], f["over_by"]) for f in over["failures"]] == [
        ("power", "circuit pdu1-cb1", 8800)]
    assert c["pdu2-cb1"] == c["pdu2-cb1"] | {"ok": True, "load_va": 0, "loads": [],
                                             "failures": []}
    power_doc = json.loads(runner.invoke(app, ["power", str(site), "--json"]).stdout)
    assert doc["circuits"] == power_doc["circuits"]


def test_json_circuits_within_budget_and_without_any(tmp_path):
    """The same racks on two circuits are ok there; a site that declares none, and one that
    does not load, print an empty list."""
    from tests.unit.test_power_circuits import single_racks, write

    _, rep = _report(write(tmp_path, single_racks("pdu1-cb1", "pdu2-cb1")))
    doc = results.dump(results.site_report(rep, tmp_path / "index.html"))
    assert doc["ok"] is True
    assert [(c["name"], c["utilization"], c["ok"]) for c in doc["circuits"]] == [
        ("pdu1-cb1", 0.775, True), ("pdu2-cb1", 0.775, True)]
    _, plain = _report(EXAMPLE)
    assert results.dump(results.site_report(plain, tmp_path / "index.html"))["circuits"] == []
    unloadable = runner.invoke(app, ["report", str(FIXTURES / "invalid" / "unknown_key.yaml"),
                                     "--out", str(tmp_path / "bad"), "--json"])
    assert json.loads(unloadable.stdout)["circuits"] == []
