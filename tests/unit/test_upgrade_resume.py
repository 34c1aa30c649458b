"""What `upgrade apply` takes from its state store and what it checks in the cluster first:
a store that does not know the nodes upgrades nothing and says so (exit 9, never a green
run); a node left part-way is resumed only as the cluster has it now (an operator's
uncordon since, a gate passed days ago, etcd quorum). The stand-in API server and the
recording installer of test_upgrade_apply."""

from __future__ import annotations

import shutil
from pathlib import Path

from provisioner.inventory import load
from provisioner.inventory.topology import servers
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import EXAMPLE
from tests.unit.test_upgrade_apply import (
    Recorder,
    _cluster,
    _failed_mid_upgrade,
    _gpu_bundle,
    _opts,
    _ready_site,
    _set_node,
)


def _steps(store: StateStore, host: str) -> list[str]:
    return [f"{e.from_phase}->{e.to_phase}" for e in store.events()
            if e.kind == "transition" and e.hostname == host]


def _left_verified(store: StateStore, host: str, bundle: str) -> None:
    """What a run killed between a node's gate and its uncordon leaves in the store."""
    store.transition(host, Phase.CORDONED, detail={"bundle": bundle})
    for p in (Phase.DRAINING, Phase.UPGRADING, Phase.CONFIGURED, Phase.VERIFIED):
        store.transition(host, p)


def _failed_at_gate(store: StateStore, host: str, bundle: str, reason: str) -> None:
    """What a run leaves when a node's roles ran and its gate failed."""
    store.transition(host, Phase.CORDONED, detail={"bundle": bundle})
    for p in (Phase.DRAINING, Phase.UPGRADING, Phase.CONFIGURED):
        store.transition(host, p)
    store.transition(host, Phase.FAILED, reason=reason)


def test_a_store_that_never_saw_the_nodes_upgrades_nothing_and_says_so(tmp_path: Path
                                                                       ) -> None:
    """A CI runner's empty state store: every node is enrolled there, none ready. Nothing is
    touched, and the run is not ok (exit 9): each node is named as not started, with why."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    loaded = load(site)
    profile = for_site(loaded, lab=False)
    hosts = sorted(p.hostname for p in servers(loaded))
    with _cluster(tmp_path, hosts) as (srv, kube):
        rec = Recorder(srv, kubelet=None)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, _opts(1, 2, 2),
                              profile=profile, installer=rec)
        assert rec.installed == [] and not res.ok
        changed = sorted(n.hostname for n in res.plan.nodes if n.changes)
        assert changed and sorted(res.rolling.not_started) == changed
        assert any(n.startswith("dgx01 is enrolled in this state store, not ready: not "
                                "upgraded") for n in res.notes), res.notes
        assert not any(srv.load()["nodes"][h]["unschedulable"] for h in hosts)


def test_a_failed_node_uncordoned_since_is_cordoned_and_drained_before_its_roles(
        tmp_path: Path) -> None:
    """dgx02 failed in its roles; an operator uncordoned it and a training pod landed. The
    retry cordons it again and drains it (the pod is evicted) before the roles run."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    _failed_mid_upgrade(store, ["dgx02"])
    with _cluster(tmp_path, hosts) as (srv, kube):
        srv.edit(lambda w: w["pods"].append({"namespace": "train", "name": "job-7",
                                             "node": "dgx02", "owner": "Job"}))
        rec = Recorder(srv, kubelet=None)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, _opts(1, 2, 2),
                              profile=profile, installer=rec)
        assert res.ok, [(n.hostname, n.reason) for n in res.failed]
        assert ["dgx02"] in rec.installed
        assert not [p for p in srv.load()["pods"] if p["name"] == "job-7"]  # evicted
        assert "upgrading->cordoned" in _steps(store, "dgx02")
        notes = [e.detail.get("note", "") for e in store.events() if e.kind == "note"]
        assert any("cordoned again, and drained again before its roles" in n for n in notes)


def test_a_node_failed_at_its_gate_and_uncordoned_since_is_drained_before_the_gate(
        tmp_path: Path) -> None:
    """dgx02 failed its gate (its roles had run); an operator uncordoned it and a training
    pod landed. The retry cordons it again and drains it (the pod is evicted) before its
    roles run again and its gate: the gate's diagnostic is never run on GPUs in use."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    bundle = _gpu_bundle(loaded)
    _failed_at_gate(store, "dgx02", bundle, "gate: dcgmi diag failed")
    with _cluster(tmp_path, hosts) as (srv, kube):
        srv.edit(lambda w: w["pods"].append({"namespace": "train", "name": "job-7",
                                             "node": "dgx02", "owner": "Job"}))
        rec = Recorder(srv, kubelet=None)
        res = apply_mod.apply(loaded, bundle, kube, {}, _opts(1, 2, 2), profile=profile,
                              installer=rec)
        assert res.ok, [(n.hostname, n.reason) for n in res.failed]
        assert not [p for p in srv.load()["pods"] if p["name"] == "job-7"]  # evicted
        assert "configured->cordoned" in _steps(store, "dgx02")
        assert ["dgx02"] in rec.installed  # its roles ran again after the drain
        assert srv.load()["nodes"]["dgx02"]["unschedulable"] is False


def test_a_node_found_verified_is_gated_again_before_its_uncordon(tmp_path: Path) -> None:
    """A run killed between dgx02's gate and its uncordon; by the next run the node is
    NotReady. It is gated again and fails, cordoned, instead of being uncordoned as it
    was recorded."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    bundle = _gpu_bundle(loaded)
    _left_verified(store, "dgx02", bundle)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "dgx02", unschedulable=True, ready=False)
        res = apply_mod.apply(loaded, bundle, kube, {}, _opts(1, 2, 2), profile=profile,
                              installer=Recorder(srv, kubelet=None))
        assert [n.hostname for n in res.failed] == ["dgx02"]
        assert "node is not Ready" in (res.failed[0].reason or "")
        assert srv.load()["nodes"]["dgx02"]["unschedulable"] is True
        assert "verified->configured" in _steps(store, "dgx02")


def test_a_control_plane_left_part_way_waits_while_its_restart_would_break_quorum(
        tmp_path: Path) -> None:
    """cp01 failed at its drain (cordoned, still an etcd member); cp02 is NotReady now.
    Resuming cp01 would take etcd to one member of three: it waits, not started (exit 9)."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    for p in (Phase.CORDONED, Phase.DRAINING):
        store.transition("cp01", p)
    store.transition("cp01", Phase.FAILED, reason="drain: 1 pod(s) still blocked")
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "cp01", unschedulable=True)
        _set_node(srv, "cp02", ready=False)
        rec = Recorder(srv, kubelet=None)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, _opts(1, 2, 2),
                              profile=profile, installer=rec)
        assert not any("cp01" in b for b in rec.installed)
        assert "cp01" in res.rolling.not_started and not res.ok
        notes = [e.detail.get("note", "") for e in store.events() if e.kind == "note"]
        held = "not resumed now: cp02 down or going down (etcd quorum)"
        assert any(held in n for n in notes), notes


def test_a_control_plane_past_its_roles_is_not_held_for_quorum(tmp_path: Path) -> None:
    """cp01's roles ran (verified, killed before its uncordon); cp02 is NotReady. Its gate
    and uncordon restart nothing, so quorum does not hold it: it is gated and uncordoned."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    bundle = _gpu_bundle(loaded)
    _left_verified(store, "cp01", bundle)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "cp01", unschedulable=True)
        _set_node(srv, "cp02", ready=False)
        apply_mod.apply(loaded, bundle, kube, {}, _opts(1, 2, 2), profile=profile,
                        installer=Recorder(srv, kubelet=None))
        assert store.node("cp01").phase is Phase.READY
        assert srv.load()["nodes"]["cp01"]["unschedulable"] is False


def test_two_control_planes_left_part_way_resume_one_at_a_time(tmp_path: Path) -> None:
    """cp01 and cp02 both failed in their roles (the failure budget allowed two). The rerun
    resumes cp01 alone, never both control planes in one batch; cp02 waits for a later run
    and says why (not started: exit 9)."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    _failed_mid_upgrade(store, ["cp01", "cp02"])
    with _cluster(tmp_path, hosts) as (srv, kube):
        for cp in ("cp01", "cp02"):
            _set_node(srv, cp, unschedulable=True)
        rec = Recorder(srv, kubelet=None)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, _opts(1, 2, 2),
                              profile=profile, installer=rec)
        assert not any({"cp01", "cp02"} <= set(b) for b in rec.installed), rec.installed
        assert ["cp01"] in rec.installed and "cp02" in res.rolling.not_started
        notes = [e.detail.get("note", "") for e in store.events() if e.kind == "note"]
        assert any("not resumed now: control plane cp01 resumes first" in n for n in notes)


def test_a_control_plane_drained_again_waits_while_its_restart_would_break_quorum(
        tmp_path: Path) -> None:
    """cp01 failed its gate (its roles had run) and an operator uncordoned it; cp02 is
    NotReady now. Resuming cp01 means its drain and roles again, a restart that would take
    etcd to one member of three: it waits, still uncordoned, not started (exit 9)."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    bundle = _gpu_bundle(loaded)
    _failed_at_gate(store, "cp01", bundle, "gate: the node is not Ready")
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "cp02", ready=False)
        rec = Recorder(srv, kubelet=None)
        res = apply_mod.apply(loaded, bundle, kube, {}, _opts(1, 2, 2), profile=profile,
                              installer=rec)
        assert not any("cp01" in b for b in rec.installed)
        assert "cp01" in res.rolling.not_started and not res.ok
        assert srv.load()["nodes"]["cp01"]["unschedulable"] is False
        notes = [e.detail.get("note", "") for e in store.events() if e.kind == "note"]
        assert any("not resumed now: cp02 down or going down (etcd quorum)" in n
                   for n in notes), notes
