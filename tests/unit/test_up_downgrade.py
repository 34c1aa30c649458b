"""`up` on a node `upgrade apply` moved to a bundle: a run that would configure it at the
site's older pins (its driver, fabric manager and DCGM back, then kubeadm, which cannot go
back) is refused before anything is touched, naming the bundle, unless --allow-downgrade
names the node. Where the record lives: the node's `upgraded` events (upgrade/drift.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.errors import ConfigError, ExitCode, UpgradeRefused
from provisioner.inventory import load
from provisioner.inventory.bundle_models import load_bundle
from provisioner.inventory.topology import servers
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.upgrade.drift import UPGRADED
from provisioner.workflows import up as up_mod
from tests.conftest import EXAMPLE, moved_to

runner = CliRunner()


def _upgraded_site(tmp_path: Path) -> tuple[Path, StateStore]:
    """The example site, every server ready, dgx01 and cp01 recorded on bundle 2026.11."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    loaded = load(site)
    store = StateStore(for_site(loaded).state_path)
    moved_to(store, [p.hostname for p in servers(loaded)], Phase.READY)
    versions = load_bundle(site, "2026.11").bundle.components()
    for host in ("dgx01", "cp01"):
        store.record(host, UPGRADED, {"bundle": "2026.11", "versions": versions})
    return site, store


def _history(store: StateStore) -> list[tuple[str | None, str]]:
    return [(e.hostname, e.kind) for e in store.events()]


def test_from_os_ready_on_an_upgraded_node_is_refused_naming_the_bundle(
        tmp_path: Path) -> None:
    site, store = _upgraded_site(tmp_path)
    before = _history(store)
    with pytest.raises(UpgradeRefused) as exc:
        up_mod.up(load(site), {}, up_mod.UpOptions(limit="dgx01",
                                                   from_phase=Phase.OS_READY))
    message = str(exc.value)
    assert "dgx01 below bundle 2026.11" in message
    assert "nvidia_driver 570.148.08 -> 570.124.06" in message
    assert "fabric_manager 570.148.08 -> 570.124.06" in message and "dcgm 4.5.2 -> 4.5.1" \
        in message
    assert "--allow-downgrade dgx01" in (exc.value.hint or "")
    assert exc.value.exit_code is ExitCode.UPGRADE_REFUSED
    # nothing touched: no run, no rewind, dgx01 still ready on its bundle
    assert _history(store) == before and store.node("dgx01").phase is Phase.READY


def test_the_cli_exits_11_and_the_flag_names_the_node_it_allows(tmp_path: Path) -> None:
    site, store = _upgraded_site(tmp_path)
    res = runner.invoke(app, ["up", str(site), "--limit", "dgx*,cp01", "--from-phase",
                              "os_ready"])
    assert res.exit_code == 11, res.output
    assert "bundle 2026.11" in res.output
    loaded = load(site)
    hosts = ["dgx01", "dgx02", "cp01"]
    # dgx02 never moved to a bundle, and a ready node without --from-phase is not configured
    assert up_mod.configured_by(store, hosts, None) == set()
    assert up_mod.configured_by(store, hosts, Phase.OS_READY) == set(hosts)
    with pytest.raises(UpgradeRefused, match=r"cp01 below bundle 2026\.11"):
        up_mod.refuse_downgrades(loaded, store, hosts, up_mod.UpOptions(
            from_phase=Phase.OS_READY, allow_downgrade="dgx01"))
    notes = up_mod.refuse_downgrades(loaded, store, hosts, up_mod.UpOptions(
        from_phase=Phase.OS_READY, allow_downgrade="dgx01,cp01"))
    by_host = {n.split(":")[0]: n for n in notes}
    assert sorted(by_host) == ["cp01", "dgx01"]
    # a control plane has no driver: only what is on it is compared
    assert "kubernetes 1.36.4 -> 1.35.8" in by_host["cp01"]
    assert "nvidia_driver" not in by_host["cp01"]
    with pytest.raises(ConfigError, match="matches none"):
        up_mod.refuse_downgrades(loaded, store, hosts, up_mod.UpOptions(
            allow_downgrade="gpu*"))


def test_a_failed_configure_on_an_upgraded_node_is_refused_again(tmp_path: Path) -> None:
    """The mixed stack the old behaviour left: configure failed at kubeadm; the retry from
    os_ready would go on downgrading."""
    site, store = _upgraded_site(tmp_path)
    store.transition("dgx01", Phase.OS_READY, detail={"rewind": True})
    store.transition("dgx01", Phase.FAILED, reason="kubeadm: cannot downgrade")
    assert up_mod.configured_by(store, ["dgx01"], None) == {"dgx01"}
    with pytest.raises(UpgradeRefused, match=r"dgx01 below bundle 2026\.11"):
        up_mod.refuse_downgrades(load(site), store, ["dgx01"], up_mod.UpOptions())
