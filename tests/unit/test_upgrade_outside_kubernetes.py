"""A server that is no Kubernetes node (the example's stor01: a storage node, no control plane
or worker role, so no kubelet and no Node object) under `upgrade apply`: it has no
Kubernetes components to move, and what it does have (DOCA on a RoCE storage node) moves
without cordon, drain or the cluster's checks. The stand-in API server knows only the
cluster's nodes, as a real one: a cordon of stor01 would be answered 404."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from provisioner.inventory import load
from provisioner.inventory.topology import servers
from provisioner.kube.official import OfficialClient
from provisioner.kube.standin import StandInApiServer, world
from provisioner.lifecycle import UPGRADE_PATH, Phase
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.upgrade.host import Outcome
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import EXAMPLE, moved_to
from tests.unit.test_upgrade_apply import CPS, STOR01, Recorder

MEMBERS = ["cp01", "cp02", "cp03", "dgx01", "dgx02"]  # the cluster's nodes: not stor01


def _site(tmp_path: Path, roce: bool = False) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    if roce:  # stor01 on the RoCE fabric too: DOCA is on it, and a bundle moves it
        placements = site / "placements.yaml"
        placements.write_text(placements.read_text().replace(
            "addresses: {mgmt: 10.250.0.31, storage: 10.250.3.31}",
            "addresses: {mgmt: 10.250.0.31, roce: 10.250.2.31, storage: 10.250.3.31}"))
        assert STOR01 in placements.read_text()
        (site / "bundles" / "2026.11-doca.yaml").write_text(
            (site / "bundles" / "2026.11.yaml").read_text()
            .replace('name: "2026.11"', 'name: "2026.11-doca"')
            .replace('doca: "2.9.1"', 'doca: "2.10.0"'))
    return site


class ClusterRecorder(Recorder):
    """Recorder, whose kubeadm stand-in moves the kubelets of the cluster's nodes only."""

    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome:
        super().install([h for h in batch if h in MEMBERS], reboot)
        self.installed[-1] = list(batch)
        return dict.fromkeys(batch)


def _apply(site: Path, tmp_path: Path, bundle: str
           ) -> tuple[apply_mod.UpgradeRun, StandInApiServer, ClusterRecorder, StateStore]:
    loaded = load(site)
    profile = for_site(loaded, lab=False)
    store = StateStore(profile.state_path)
    moved_to(store, [p.hostname for p in servers(loaded)], Phase.READY)
    srv = StandInApiServer(tmp_path / "world.json")
    srv.save(world(MEMBERS, control_planes=CPS, kubelet="v1.35.8"))
    srv.start()
    try:
        rec = ClusterRecorder(srv)
        res = apply_mod.apply(loaded, bundle, OfficialClient(url=srv.url), {},
                              apply_mod.ApplyOptions(max_failures=1, gate_timeout_s=0.0,
                                                     plan=apply_mod.PlanOptions(
                                                         batch="100%", max_unavailable=3)),
                              profile=profile, installer=rec)
    finally:
        srv.shutdown()
        srv.server_close()
    return res, srv, rec, store


def _asked_of_stor01(srv: StandInApiServer) -> list[str]:
    return [e["path"] for e in srv.load()["log"] if "stor01" in e.get("path", "")]


def test_the_example_bundle_leaves_a_storage_node_s_absent_kubernetes_alone(
        tmp_path: Path) -> None:
    site = _site(tmp_path)
    loaded = load(site)
    plan, _ = apply_mod.plan(loaded, "2026.11", profile=for_site(loaded, lab=False))
    stor01 = next(n for n in plan.nodes if n.hostname == "stor01")
    assert stor01.changes == ()  # no containerd or kubelet there to move
    assert all("stor01" not in ch.hosts for ch in plan.changes)
    res, srv, rec, store = _apply(site, tmp_path, "2026.11")
    assert res.ok, [(n.hostname, n.reason) for n in res.nodes if n.reason]
    assert not res.rolling.budget_spent and res.rolling.failed == []
    assert {h for b in rec.installed for h in b} == set(MEMBERS)
    assert _asked_of_stor01(srv) == []  # never cordoned (a real API server: 404)
    assert store.node("stor01").phase is Phase.READY


def test_a_storage_node_s_own_change_moves_without_cordon_or_drain(tmp_path: Path) -> None:
    site = _site(tmp_path, roce=True)
    loaded = load(site)
    plan, _ = apply_mod.plan(loaded, "2026.11-doca", profile=for_site(loaded, lab=False))
    assert next(n for n in plan.nodes if n.hostname == "stor01").changes == ("doca",)
    assert any(w.startswith("stor01: no Kubernetes node") for w in plan.warnings)
    res, srv, rec, store = _apply(site, tmp_path, "2026.11-doca")
    assert res.ok, [(n.hostname, n.reason) for n in res.nodes if n.reason]
    assert "stor01" in {h for b in rec.installed for h in b}  # the roles ran, at the bundle
    assert "stor01" in rec.rebooted  # a new DOCA: its reboot as any node's
    assert _asked_of_stor01(srv) == []  # no cordon, no pod list, no health, no uncordon
    moved = [e for e in store.events("stor01") if e.kind == "transition"
             and e.run_id == res.run_id]
    assert [Phase(e.to_phase) for e in moved] == list(UPGRADE_PATH[1:])
    assert moved[0].detail == {"kubernetes": False, "bundle": "2026.11-doca"}
    assert any(e.kind == "upgraded" for e in store.events("stor01"))
    notes = [str(e.detail.get("note", "")) for e in store.events("stor01")]
    assert any("not a Kubernetes node" in n for n in notes)
