"""After `upgrade apply`, the site's software: pins may say less than what the nodes run:
a run that renders them (up for a new node, add, run site.yml) says so in its notes."""

from __future__ import annotations

from pathlib import Path

from provisioner.inventory import load
from provisioner.inventory.bundle_models import from_software, load_bundle
from provisioner.state import StateStore
from provisioner.upgrade import drift
from provisioner.upgrade.plan import effective
from tests.conftest import EXAMPLE


def test_nodes_on_a_newer_bundle_than_the_site_pins_are_said(tmp_path: Path) -> None:
    loaded = load(EXAMPLE)
    store = StateStore(tmp_path / "state.db")
    store.enroll(["dgx01", "dgx02", "cp01"])
    assert drift.note(loaded, store) is None  # nothing upgraded yet
    # cp01 recorded at the site's own pins: no difference
    store.record("cp01", drift.UPGRADED, {"bundle": "2026.10", "versions": from_software(
        loaded.site.software).components()})
    assert drift.note(loaded, store) is None
    newer = effective(loaded, load_bundle(EXAMPLE, "2026.11").bundle)
    for host in ("dgx01", "dgx02"):
        store.record(host, drift.UPGRADED, {"bundle": "2026.11",
                                            "versions": newer.components()})
    said = drift.note(loaded, store)
    assert said is not None
    assert "dgx01, dgx02 run bundle 2026.11" in said and "cp01" not in said
    assert "nvidia_driver 570.148.08 (site: 570.124.06)" in said
    assert "kubernetes 1.36.4 (site: 1.35.8)" in said


def test_a_node_brought_up_again_since_its_upgrade_runs_the_sites_pins(tmp_path: Path) -> None:
    """dgx01 was upgraded to 2026.11, then reinstalled (`up --reinstall`): its bring-up ran
    the roles at the site's pins. Its upgrade record no longer holds, so the next plan moves
    it again (instead of finding nothing to do and exiting 0), and the drift note is about
    dgx02 alone."""
    from provisioner.lifecycle import Phase
    from provisioner.workflows.upgrade import apply as apply_mod

    loaded = load(EXAMPLE)
    store = StateStore(tmp_path / "state.db")
    store.enroll(["dgx01", "dgx02"])
    newer = effective(loaded, load_bundle(EXAMPLE, "2026.11").bundle).components()
    for host in ("dgx01", "dgx02"):
        store.record(host, drift.UPGRADED, {"bundle": "2026.11", "versions": newer})
    for p in (Phase.INSPECTED, Phase.BOOTING, Phase.OS_READY, Phase.CONFIGURED):
        store.transition("dgx01", p)
    assert set(drift.latest_upgraded(store)) == {"dgx02"}
    site = from_software(loaded.site.software).components()
    now = apply_mod.recorded_versions(store, ["dgx01", "dgx02"], site)
    assert now["dgx01"] == site and now["dgx02"] == newer
    said = drift.note(loaded, store)
    assert said is not None and "dgx02 run bundle 2026.11" in said and "dgx01" not in said
