"""The report's fabric section (report/fabric.py): the leaf per rack, the ports the cabling
uses, and the static RoCE check, on the page next to the racks."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from provisioner.inventory import check, load
from provisioner.report import build, render_html
from provisioner.report.fabric import FabricView
from tests.conftest import EXAMPLE

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _site(tmp_path: Path, old: str = "", new: str = "") -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    if old:
        f = site / "site.yaml"
        text = f.read_text()
        assert old in text
        f.write_text(text.replace(old, new))
    return site


def _page(site: Path) -> tuple[str, FabricView | None]:
    loaded = load(site)
    report = build(loaded, check(loaded), state=None, generated_at=NOW)
    return render_html(report), report.fabric


def test_example_leaf_ports_and_agreement(tmp_path: Path) -> None:
    html, view = _page(_site(tmp_path))
    assert view is not None
    rows = {s.name: s for s in view.switches}
    leaf = rows["leaf01"]
    assert (leaf.rack, leaf.role, leaf.nos) == ("r01", "roce", "cumulus")
    assert [(u.port, u.to) for u in leaf.used] == [("swp1s0", "dgx01 roce"),
                                                   ("swp2s0", "dgx02 roce")]
    assert rows["mgmt01"].used == ()
    assert '<section id="fabric">' in html and "2 of 64" in html
    assert "2 RoCE link(s) checked: hosts and switches agree" in html


def test_a_switch_mtu_under_the_hosts_is_shown_with_both_ends(tmp_path: Path) -> None:
    html, view = _page(_site(tmp_path, "switch_mtu_bytes: 9216", "switch_mtu_bytes: 1500"))
    assert view is not None and not view.ok
    assert "dgx01 roce &lt;-&gt; leaf01 swp1s0: mtu: host 9000, switch 1500" in html


def test_a_policy_the_switch_os_cannot_render_is_said(tmp_path: Path) -> None:
    html, view = _page(_site(tmp_path, "priority: 3, cnp_dscp", "priority: 4, cnp_dscp"))
    assert view is not None and view.check_error
    assert "The RoCE check could not run" in html and "default RoCE classes" in html
