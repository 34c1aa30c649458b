"""The report as a person sees it: rendered by a real headless browser (Debian's Chromium),
measured after layout. The shipped page has no script; the test's copy appends one that
writes what the browser laid out (boxes, computed colours, visible text) into the DOM,
which --dump-dom returns."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from provisioner.inventory import check, load
from provisioner.report import build, render_html
from tests.conftest import EXAMPLE, VSCALER
from tests.unit.test_report import BAD_SITE

pytestmark = pytest.mark.integration

WINDOW = (1400, 1000)
MEASURE = """
<script>
(function () {
  const out = {text: document.body.innerText, chassis: [], racks: []};
  for (const r of document.querySelectorAll("rect.chassis")) {
    const b = r.getBoundingClientRect();
    out.chassis.push({rack: r.closest("svg").dataset.rack, block: r.dataset.block,
                      u: +r.dataset.u, units: +r.dataset.units, nodes: r.dataset.nodes,
                      error: r.dataset.error, h: b.height, w: b.width, top: b.top,
                      fill: getComputedStyle(r).fill, stroke: getComputedStyle(r).stroke});
  }
  for (const s of document.querySelectorAll("section.rack")) {
    const v = s.querySelector(".verdict");
    out.racks.push({name: s.dataset.rack, text: s.innerText, verdict: v.innerText,
                    verdictColor: getComputedStyle(v).color,
                    border: getComputedStyle(s).borderTopColor,
                    feedFills: [...s.querySelectorAll(".feed svg.bar rect.nameplate")]
                      .map((r) => getComputedStyle(r).fill)});
  }
  const pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""
RED = "rgb(179, 38, 30)"  # --bad in page.html.j2


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is missing: scripts/bootstrap.sh installs Debian's chromium")
    pytest.skip("chromium is not installed (scripts/bootstrap.sh installs it)")


def _run(browser: str, profile: Path, *args: str) -> str:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--disable-extensions", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}",
           f"--window-size={WINDOW[0]},{WINDOW[1]}", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    return _chromium(), tmp_path_factory.mktemp("chromium-profile")


def _page(tmp: Path, site: Path) -> Path:
    loaded = load(site)
    report = build(loaded, check(loaded), state=None, generated_at=datetime.now(UTC))
    page = tmp / "index.html"
    page.write_text(render_html(report), encoding="utf-8")
    return page


def _measure(browser: tuple[str, Path], page: Path) -> dict[str, Any]:
    probe = page.with_name("measured.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _run(browser[0], browser[1], "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    data: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return data


@pytest.fixture(scope="module")
def pages(tmp_path_factory, browser):
    """Each site rendered once and measured once, shared by the tests below."""
    out = {}
    for name, site in (("vscaler", VSCALER), ("example", EXAMPLE)):
        tmp = tmp_path_factory.mktemp(name)
        out[name] = (site, _page(tmp, site))
    bad_dir = tmp_path_factory.mktemp("bad")
    (bad_dir / "site.yaml").write_text(BAD_SITE)
    out["bad"] = (bad_dir / "site.yaml", _page(bad_dir, bad_dir / "site.yaml"))
    return {name: (site, page, _measure(browser, page)) for name, (site, page) in out.items()}


@pytest.mark.parametrize("name", ["vscaler", "example"])
def test_every_rack_and_node_name_is_visible(pages, name):
    site, _, seen = pages[name]
    loaded = load(site)
    for rack in loaded.site.racks:
        assert f"Rack {rack.name}" in seen["text"]
    hosts = [n.hostname for p in loaded.site.placements for n in p.nodes]
    assert hosts
    for host in hosts:
        assert host in seen["text"], host
        # and on the drawing itself, on the chassis that holds it
        assert any(host in c["nodes"].split() for c in seen["chassis"]), host


def test_drawn_height_is_proportional_to_units(pages):
    _, _, seen = pages["vscaler"]
    chassis = seen["chassis"]
    assert len(chassis) == 12
    one_u = [c["h"] for c in chassis if c["units"] == 1]
    assert one_u and max(one_u) - min(one_u) < 0.5
    u_px = one_u[0]
    assert u_px >= 10  # legible on a laptop screen
    for c in chassis:
        assert c["h"] == pytest.approx(c["units"] * u_px, rel=0.02), c
    dgx2 = [c for c in chassis if c["block"] == "dgx-2"]
    assert dgx2 and dgx2[0]["h"] / u_px == pytest.approx(10, rel=0.02)
    # stacked bottom to top: a higher U is drawn higher on the screen
    by_u = sorted(chassis, key=lambda c: c["u"])
    tops = [c["top"] for c in by_u]
    assert tops == sorted(tops, reverse=True)


def test_over_budget_rack_is_shown_over_budget(pages):
    _, _, seen = pages["bad"]
    (rack,) = seen["racks"]
    assert rack["name"] == "r09"
    assert rack["verdict"].startswith("OVER BUDGET")
    assert "power" in rack["verdict"] and "cooling" in rack["verdict"]
    assert rack["verdictColor"] == RED and rack["border"] == RED
    assert rack["feedFills"] == [RED]
    errors = {c["nodes"]: c for c in seen["chassis"] if c["error"]}
    assert set(errors) == {"stor91", "leaf91"}
    assert all(c["stroke"] == RED for c in errors.values())
    # the chassis above the top is drawn above the rack's top U (U42's box)
    ok = [c for c in seen["chassis"] if not c["error"]]
    assert errors["leaf91"]["top"] < min(c["top"] for c in ok)


def test_within_budget_rack_is_not_red(pages):
    _, _, seen = pages["vscaler"]
    (rack,) = seen["racks"]
    assert rack["verdict"].startswith("Within budget")
    assert rack["verdictColor"] != RED and RED not in rack["feedFills"]


def test_screenshot_of_vscaler(pages, browser, tmp_path):
    """The picture in the README is made the same way (see docs/inventory.md / README)."""
    _, page, seen = pages["vscaler"]
    shot = tmp_path / "report-vscaler-dgx.png"
    _run(browser[0], browser[1], f"--screenshot={shot}", page.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == WINDOW
    assert len(data) > 30_000  # a blank page compresses to a few KB
    # the whole rack, U1 included, is inside the picture
    assert max(c["top"] + c["h"] for c in seen["chassis"]) < height
