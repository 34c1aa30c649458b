"""workflows.upgrade.apply's wiring without the lab: the example site, the official Kubernetes
client against the stand-in API server, a real state store; the host side (roles, reboot,
GPU checks) recorded instead of run (the lab e2e runs it for real). One node fails its gate:
it stays cordoned and failed, the rest are upgraded and recorded; after it is fixed a
re-run retries only it; then plan sees nothing left to change on any node."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from provisioner.errors import KubeError, PlaybookError, StateError
from provisioner.inventory import load
from provisioner.inventory.bundle_models import load_bundle
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import servers
from provisioner.kube import CORDONED_BY
from provisioner.kube.official import OfficialClient
from provisioner.kube.standin import StandInApiServer, move_versions, world
from provisioner.lifecycle import Phase
from provisioner.profile import Profile, for_site
from provisioner.state import StateStore
from provisioner.upgrade.drift import UPGRADED
from provisioner.upgrade.host import Outcome
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import EXAMPLE, moved_to

CPS = ("cp01", "cp02", "cp03")  # the example site's control planes
GATE_S = 0.3  # the health gate's wait for Ready (300 s on a site): a NotReady node fails fast


class Recorder:
    """The Installer seam: records which nodes got the roles and which rebooted; with the
    stand-in's world, leaves there what kubeadm upgrade would (the kubelet, and a control
    plane's API server, at the bundle's version), which the gate reads back."""

    def __init__(self, srv: StandInApiServer | None = None, kubelet: str | None = "v1.36.4"
                 ) -> None:
        self.installed: list[list[str]] = []
        self.rebooted: list[str] = []
        self.first: list[str] = []  # control planes upgraded in place, in order
        self.installed_after_first: list[list[str]] = []
        self.srv, self.kubelet = srv, kubelet

    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome:
        self.installed.append(list(batch))
        if len(self.first) == len(CPS):
            self.installed_after_first.append(list(batch))
        self.rebooted += reboot
        if self.srv is not None and self.kubelet is not None:
            kubelet = self.kubelet
            self.srv.edit(lambda w: move_versions(w, list(batch), kubelet))
        return dict.fromkeys(batch)

    def control_plane_first(self, host: str) -> str | None:
        self.first.append(host)
        if self.srv is not None and self.kubelet is not None:
            kubelet = self.kubelet
            self.srv.edit(lambda w: move_versions(w, [host], kubelet, kubelet=False))
        return None

    def gate(self, batch: Sequence[str]) -> Outcome:
        return dict.fromkeys(batch)


STOR01 = 'macs: {mgmt: "52:54:00:00:00:31", storage: "52:54:00:00:02:31"}'


def stor01_in_kubernetes(site: Path) -> None:
    """The example's stor01 is a storage node outside Kubernetes (no worker role: no
    kubelet, no Node object); here it joins the cluster as a worker too, so the cordon and
    drain rules have a third worker to show them on. test_upgrade_outside_kubernetes
    upgrades the example's own stor01."""
    placements = site / "placements.yaml"
    text = placements.read_text()
    assert text.count(STOR01) == 1
    placements.write_text(text.replace(STOR01, STOR01 + "\n        roles: [worker, storage]"))


def _ready_site(tmp_path: Path) -> tuple[LoadedSite, Profile, list[str], StateStore]:
    """A copy of the example site whose servers are all recorded ready (stor01 a worker
    too: stor01_in_kubernetes)."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    stor01_in_kubernetes(site)
    loaded = load(site)
    profile = for_site(loaded, lab=False)
    hosts = [p.hostname for p in servers(loaded)]
    store = StateStore(profile.state_path)
    moved_to(store, hosts, Phase.READY)
    return loaded, profile, hosts, store


def test_apply_fails_one_gate_then_the_rerun_completes(tmp_path: Path) -> None:
    loaded, profile, hosts, store = _ready_site(tmp_path)
    w = world(hosts, control_planes=CPS)
    w["nodes"]["dgx02"]["ready"] = False
    srv = StandInApiServer(tmp_path / "world.json")
    srv.save(w)
    srv.start()
    try:
        kube = OfficialClient(url=srv.url)
        opts = _opts(1, 2, 2)
        rec = Recorder(srv)
        r1 = apply_mod.apply(loaded, "2026.11", kube, {}, opts, profile=profile,
                             installer=rec)
        assert [n.hostname for n in r1.failed] == ["dgx02"] and not r1.ok
        assert "node is not Ready" in (r1.failed[0].reason or "")
        # 2026.11 moves Kubernetes: each control plane's kubeadm upgrade in place first,
        # then every round carries one control plane and workers beside it
        assert rec.first == list(CPS) and rec.installed_after_first == rec.installed
        assert [sum(h in CPS for h in b) for b in rec.installed][:3] == [1, 1, 1], \
            rec.installed
        assert rec.installed[0] != ["cp01"]  # a worker went beside the first control plane
        notes = [e.detail.get("note", "") for e in store.events() if e.kind == "note"]
        assert any("the API servers are on v1.36.4" in n for n in notes), notes
        assert sorted(rec.rebooted) == ["dgx01", "dgx02"]  # the driver changed on GPU nodes
        nodes = srv.load()["nodes"]
        assert nodes["dgx02"]["unschedulable"] is True
        assert [h for h in hosts if nodes[h]["unschedulable"]] == ["dgx02"]
        upgraded = {e.hostname for e in store.events() if e.kind == "upgraded"}
        assert upgraded == set(hosts) - {"dgx02"}

        _set_node(srv, "dgx02", ready=True)
        rec2 = Recorder(srv)
        r2 = apply_mod.apply(loaded, "2026.11", kube, {}, opts, profile=profile,
                             installer=rec2)
        assert r2.ok and rec2.installed == []  # retried from its gate, not reinstalled
        assert all(store.node(h).phase is Phase.READY for h in hosts)
        assert srv.load()["nodes"]["dgx02"]["unschedulable"] is False
        again, _ = apply_mod.plan(loaded, "2026.11", opts.plan, profile=profile)
        assert all(not n.changes for n in again.nodes)
    finally:
        srv.shutdown()
        srv.server_close()


class SlowInstaller(Recorder):
    """A long first install: it watches the run's lease (in the state store, as another CI
    runner sees it) until the heartbeat has moved it on for a second, then looks at it as a
    runner on another machine would."""

    POLL_S = 0.01
    POLLS = 6000  # a guard against a hang only; a working heartbeat needs ~1 s of it

    def __init__(self, store: StateStore, srv: StandInApiServer) -> None:
        super().__init__(srv)
        self.store = store
        self.beats: list[float] = []
        self.started_at = 0.0
        self.foreign_view: str = ""

    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome:
        if not self.beats:
            for _ in range(self.POLLS):
                holder = self.store.lease_holder()
                assert holder is not None and holder["pid"] == os.getpid()
                self.started_at = holder["started_at"]
                if not self.beats or holder["heartbeat_at"] > self.beats[-1]:
                    self.beats.append(holder["heartbeat_at"])
                if self.beats[-1] - self.started_at >= 1.0:
                    break
                time.sleep(self.POLL_S)
            # A runner elsewhere cannot see our pid: only the heartbeat keeps the lease
            # alive for it. Its stale limit lies between the beat's age and the run's age.
            now = time.time()
            stale_s = ((now - self.started_at) + (now - self.beats[-1])) / 2
            with mock.patch("provisioner.state.lease.socket.gethostname",
                            return_value="ci-runner-elsewhere"):
                try:
                    with self.store.lease("upgrade apply (elsewhere)", stale_after_s=stale_s):
                        self.foreign_view = "took it over"
                except StateError as exc:
                    self.foreign_view = str(exc)
        return super().install(batch, reboot)


def test_the_lease_heartbeat_keeps_a_long_run_alive_for_other_machines(
        tmp_path: Path) -> None:
    loaded, profile, hosts, store = _ready_site(tmp_path)
    srv = StandInApiServer(tmp_path / "world.json")
    srv.save(world(hosts, control_planes=CPS))
    srv.start()
    try:
        slow = SlowInstaller(store, srv)
        opts = apply_mod.ApplyOptions(gate_timeout_s=GATE_S, lease_heartbeat_s=0.05)
        r = apply_mod.apply(loaded, "2026.11", OfficialClient(url=srv.url), {}, opts,
                            profile=profile, installer=slow)
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.ok
    assert len(slow.beats) >= 3 and slow.beats[-1] - slow.started_at >= 1.0, slow.beats
    assert "is held by `upgrade apply --to 2026.11`" in slow.foreign_view
    assert store.lease_holder() is None  # released at the end; the beat thread stopped


def _opts(batch: int, max_unavailable: int, max_failures: int, limit: str | None = None
          ) -> apply_mod.ApplyOptions:
    return apply_mod.ApplyOptions(gate_timeout_s=GATE_S, plan=apply_mod.PlanOptions(
        batch=batch, max_unavailable=max_unavailable), max_failures=max_failures, limit=limit)


@contextlib.contextmanager
def _cluster(tmp_path: Path, hosts: list[str]
             ) -> Iterator[tuple[StandInApiServer, OfficialClient]]:
    """The stand-in API server with every node Ready, and the official client on it."""
    srv = StandInApiServer(tmp_path / "world.json")
    srv.save(world(hosts, control_planes=CPS))
    srv.start()
    try:
        yield srv, OfficialClient(url=srv.url)
    finally:
        srv.shutdown()
        srv.server_close()


def _set_node(srv: StandInApiServer, host: str, **fields: object) -> None:
    srv.edit(lambda w: w["nodes"][host].update(fields))


def _gpu_bundle(loaded: LoadedSite) -> str:
    """2026.11 without its Kubernetes minor (a GPU-stack bundle: control planes may be left
    out with --limit, and it can be rolled back to 2026.10)."""
    text = (loaded.base_dir / "bundles/2026.11.yaml").read_text()
    text = text.replace('name: "2026.11"', 'name: "2026.11-gpu"').replace(
        'kubernetes: "1.36.4"', 'kubernetes: "1.35.8"')
    (loaded.base_dir / "bundles/2026.11-gpu.yaml").write_text(text)
    return "2026.11-gpu"


def _nothing_starts(loaded: LoadedSite, profile: Profile, kube: OfficialClient,
                    opts: apply_mod.ApplyOptions, why: str) -> Recorder:
    """Apply the GPU bundle: no node may start, and the run says `why`."""
    rec = Recorder()
    res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, opts, profile=profile,
                          installer=rec)
    assert rec.installed == [] and not res.ok
    assert why in (res.rolling.stopped or ""), res.rolling.stopped
    return rec


def _failed_mid_upgrade(store: StateStore, hosts: list[str]) -> None:
    """What an earlier run left: these nodes failed with their roles, cordoned."""
    for h in hosts:
        for p in (Phase.CORDONED, Phase.DRAINING, Phase.UPGRADING):
            store.transition(h, p)
        store.transition(h, Phase.FAILED, reason="the OS did not come back")


def test_limit_leaves_out_a_down_node_but_still_counts_it(tmp_path: Path) -> None:
    """--limit '!cp01,!dgx01' past two failed nodes: they are still down, so their rack's
    allowance (2) is spent and a second control plane down would lose etcd quorum."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    _failed_mid_upgrade(store, ["cp01", "dgx01"])
    with _cluster(tmp_path, hosts) as (srv, kube):
        _nothing_starts(loaded, profile, kube, _opts(1, 2, 5, limit="!cp01,!dgx01"),
                        "etcd quorum")
        assert not any(srv.load()["nodes"][h]["unschedulable"] for h in hosts)


def test_a_node_up_left_configured_is_not_taken_for_an_upgrade(tmp_path: Path) -> None:
    """dgx02 is configured by `provision up` (not yet verified): the upgrade leaves it alone
    instead of gating it and recording it on the bundle without its roles ever running."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    site = [h for h in hosts if h != "dgx02"]
    with _cluster(tmp_path, hosts) as (_srv, kube):
        # rewind dgx02 to configured, as a killed `up` leaves it
        store.transition("dgx02", Phase.OS_READY)
        store.transition("dgx02", Phase.CONFIGURED)
        opts = _opts(2, 2, 2)
        rec = Recorder(_srv)
        res = apply_mod.apply(loaded, "2026.11", kube, {}, opts, profile=profile,
                              installer=rec)
        assert "dgx02" not in {h for b in rec.installed for h in b}
        upgraded = {e.hostname for e in store.events() if e.kind == "upgraded"}
        assert upgraded == set(site)
        assert store.node("dgx02").phase is Phase.CONFIGURED
        assert any("dgx02 is configured from `provision up`" in n for n in res.notes)
        assert res.rolling.not_started == ["dgx02"] and not res.ok  # not on the bundle


def test_a_rollback_runs_the_roles_again_on_a_node_that_failed_its_gate(
        tmp_path: Path) -> None:
    """dgx02 failed its gate on a GPU bundle (roles ran at it); `--to 2026.10` must run the
    roles at .10 on it, with the reboot step, not gate it as it is and record it on .10.
    When it fails its gate again there, the next try toward 2026.10 resumes at the gate,
    without the roles and a reboot once more."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "dgx02", ready=False)
        opts = _opts(2, 2, 2, limit="dgx01,dgx02")
        runs = []
        for bundle in (_gpu_bundle(loaded), "2026.10"):  # fails on each: not Ready
            runs.append(Recorder(srv, "v1.35.8"))  # both bundles pin Kubernetes 1.35.8
            apply_mod.apply(loaded, bundle, kube, {}, opts, profile=profile,
                            installer=runs[-1])
            assert store.node("dgx02").failed_phase is Phase.CONFIGURED
        assert "dgx02" in {h for b in runs[1].installed for h in b}  # retargeted: roles
        assert "dgx02" in runs[1].rebooted
        moves = [e.detail for e in store.events() if e.kind == "transition"
                 and e.hostname == "dgx02" and e.to_phase == "upgrading"]
        assert moves[-1].get("from_bundle") == "2026.11-gpu"
        _set_node(srv, "dgx02", ready=True)
        rec = Recorder(srv, "v1.35.8")
        res = apply_mod.apply(loaded, "2026.10", kube, {}, opts, profile=profile,
                              installer=rec)
        assert res.ok, [(n.hostname, n.reason) for n in res.nodes]
        assert rec.installed == [] and rec.rebooted == []  # same target: from its gate
        last = [e for e in store.events() if e.kind == "upgraded" and e.hostname == "dgx02"]
        assert last[-1].detail["bundle"] == "2026.10"


class BrokenInstaller(Recorder):
    """The roles cannot run at all (the project failed to render, ansible missing)."""

    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome:
        raise PlaybookError("ansible-playbook exited 4 before any task ran")


def test_roles_that_cannot_run_fail_the_batch_not_the_run(tmp_path: Path) -> None:
    """The batch's nodes fail with the reason and stay cordoned; the run still returns its
    per-node result (what --json prints) and stops on the failure budget."""
    loaded, profile, hosts, _store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        opts = _opts(1, 2, 1, limit="dgx01,dgx02")
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, opts, profile=profile,
                              installer=BrokenInstaller())
        [failed] = res.failed
        assert "the roles did not run: ansible-playbook exited 4" in (failed.reason or "")
        assert srv.load()["nodes"][failed.hostname]["unschedulable"] is True
        assert res.rolling.budget_spent and res.rolling.not_started


def test_a_node_cordoned_by_hand_uses_its_domains_allowance(tmp_path: Path) -> None:
    """stor01 is cordoned for maintenance by an operator (the state store says ready): with
    one node of the rack allowed down, no other may go; the run stops and says why."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "stor01", unschedulable=True)
        opts = _opts(1, 1, 1, limit="!stor01")
        rec = _nothing_starts(loaded, profile, kube, opts, "max-unavailable")
        notes = [e.detail.get("note", "") for e in store.events() if e.hostname == "stor01"]
        assert any("unschedulable in the cluster (not by this upgrade)" in n for n in notes)
        # once it is back, the same run goes through
        _set_node(srv, "stor01", unschedulable=False)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, opts, profile=profile,
                              installer=rec)
        assert res.ok and {h for b in rec.installed for h in b} == set(hosts) - {"stor01"}


def test_a_selected_node_cordoned_by_hand_is_left_alone_and_stays_cordoned(
        tmp_path: Path) -> None:
    """stor01 is selected but cordoned for maintenance: never drained, upgraded or
    uncordoned by the run (the operator's cordon stays), reported not started (exit 9);
    with two down allowed, the others go on beside it."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "stor01", unschedulable=True)
        rec = Recorder(srv)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, _opts(1, 2, 1),
                              profile=profile, installer=rec)
        assert {h for b in rec.installed for h in b} == set(hosts) - {"stor01"}
        assert res.rolling.not_started == ["stor01"] and not res.ok
        assert "left alone" in (res.rolling.stopped or ""), res.rolling.stopped
        assert srv.load()["nodes"]["stor01"]["unschedulable"] is True
        assert store.node("stor01").phase is Phase.READY
        assert not [e for e in store.events("stor01") if e.kind == "transition"
                    and e.run_id == res.run_id]


def test_a_control_plane_left_alone_still_holds_the_workers(tmp_path: Path) -> None:
    """2026.11 changes Kubernetes; cp03 is cordoned for maintenance, so it is left alone and
    still serves the old API version: no kubelet may become newer, the workers wait."""
    loaded, profile, hosts, _store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "cp03", unschedulable=True)
        rec = Recorder(srv)
        res = apply_mod.apply(loaded, "2026.11", kube, {}, _opts(1, 3, 1), profile=profile,
                              installer=rec)
        assert rec.installed == [["cp01"], ["cp02"]], rec.installed
        assert rec.first == []  # not even in place: the operator's cordon stays untouched
        assert "cp03 did not finish" in (res.rolling.stopped or ""), res.rolling.stopped
        assert sorted(res.rolling.not_started) == ["cp03", "dgx01", "dgx02", "stor01"]


class LyingInPlace(Recorder):
    """cp02's in-place upgrade reports success, but its API server stays on the old
    version (a static pod that did not restart)."""

    def control_plane_first(self, host: str) -> str | None:
        if host != "cp02":
            return super().control_plane_first(host)
        self.first.append(host)
        return None


def test_control_planes_first_falls_back_when_an_api_server_did_not_move(
        tmp_path: Path) -> None:
    """The run asks the cluster, not the installer: cp02's API server still reports the
    old version, so no worker goes before the control planes' full rounds."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        rec = LyingInPlace(srv)
        res = apply_mod.apply(loaded, "2026.11", kube, {}, _opts(3, 3, 1), profile=profile,
                              installer=rec)
        assert res.ok, [(n.hostname, n.reason) for n in res.failed]
        assert rec.first == ["cp01", "cp02"]  # stopped at the first that did not move
        assert rec.installed[:3] == [["cp01"], ["cp02"], ["cp03"]], rec.installed
        notes = [str(e.detail.get("note", "")) for e in store.events("cp02")
                 if e.kind == "note"]
        assert any("its API server reports v1.35.8, not v1.36.4" in n
                   and "every control plane goes alone" in n for n in notes), notes


def test_no_control_plane_moves_in_place_below_etcd_quorum(tmp_path: Path) -> None:
    """cp03 finished earlier (on the bundle, not selected again) and is now NotReady: its
    etcd member may be down, so kubeadm restarting cp01's would leave one of three. Nothing
    moves in place, and no control plane goes down at all."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    target = apply_mod.effective(loaded, load_bundle(loaded.base_dir, "2026.11").bundle)
    store.record("cp03", UPGRADED, {"bundle": target.name, "versions": target.components()})
    with _cluster(tmp_path, hosts) as (srv, kube):
        srv.edit(lambda w: move_versions(w, ["cp03"], "v1.36.4"))
        _set_node(srv, "cp03", ready=False)
        rec = Recorder(srv)
        res = apply_mod.apply(loaded, "2026.11", kube, {}, _opts(3, 3, 1), profile=profile,
                              installer=rec)
        assert res.plan.control_planes_first == ["cp01", "cp02"]  # what the plan expected
        assert rec.first == [] and rec.installed == [], (rec.first, rec.installed)
        notes = [str(e.detail.get("note", "")) for e in store.events() if e.kind == "note"]
        assert any("cp03 down (etcd quorum)" in n for n in notes), notes
        assert "etcd quorum" in (res.rolling.stopped or ""), res.rolling.stopped


def test_plan_expects_control_planes_first_as_apply_does_it(tmp_path: Path) -> None:
    """The plan reads the state store as apply will. cp02, left cordoned by a killed run,
    is resumed first (and assumed to pass): the other two move in place, in both. A control
    plane `up` has not finished may serve anything: the workers wait, in both."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    opts = _opts(3, 3, 1)
    before, _ = apply_mod.plan(loaded, "2026.11", opts.plan, profile=profile)
    assert before.control_planes_first == list(CPS)
    store.transition("cp02", Phase.CORDONED)
    planned, _ = apply_mod.plan(loaded, "2026.11", opts.plan, profile=profile)
    assert planned.control_planes_first == ["cp01", "cp03"]
    with _cluster(tmp_path, hosts) as (srv, kube):
        rec = Recorder(srv)
        res = apply_mod.apply(loaded, "2026.11", kube, {}, opts, profile=profile,
                              installer=rec)
        assert res.ok and rec.installed[0] == ["cp02"]  # resumed first
        assert rec.first == planned.control_planes_first

    site = tmp_path / "configured"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    loaded = load(site)
    profile = for_site(loaded, lab=False)
    store = StateStore(profile.state_path)
    moved_to(store, [h for h in hosts if h != "cp03"], Phase.READY)
    moved_to(store, ["cp03"], Phase.CONFIGURED)  # as `up` leaves it before its verify
    waits, _ = apply_mod.plan(loaded, "2026.11", opts.plan, profile=profile)
    assert waits.control_planes_first == [] and "workers wait" in waits.order
    assert waits.planned_s > before.planned_s


def test_a_patch_move_goes_beside_a_control_plane_left_out(tmp_path: Path) -> None:
    """A Kubernetes patch (1.35.8 -> 1.35.9) with cp03 left out by --limit: the plan allows
    it (the skew rule is per minor), cp01 and cp02 move in place, and cp03 serving 1.35.8
    holds nothing: the workers go beside the control planes' rounds."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    text = (loaded.base_dir / "bundles/2026.10.yaml").read_text()
    (loaded.base_dir / "bundles/patch.yaml").write_text(
        text.replace('name: "2026.10"', 'name: "patch"')
        .replace('kubernetes: "1.35.8"', 'kubernetes: "1.35.9"'))
    with _cluster(tmp_path, hosts) as (srv, kube):
        srv.edit(lambda w: move_versions(w, hosts, "v1.35.8"))
        rec = Recorder(srv, kubelet="v1.35.9")
        res = apply_mod.apply(loaded, "patch", kube, {}, _opts(3, 3, 1, limit="!cp03"),
                              profile=profile, installer=rec)
        assert res.ok, [(n.hostname, n.reason) for n in res.failed]
        assert rec.first == ["cp01", "cp02"]
        assert rec.installed[0] != ["cp01"], rec.installed  # workers beside it
        notes = [str(e.detail.get("note", "")) for e in store.events() if e.kind == "note"]
        assert any("the API servers are on v1.35.9" in n for n in notes), notes


def test_our_own_cordon_left_unrecorded_is_not_taken_for_an_operators(
        tmp_path: Path) -> None:
    """A run killed between its cordon and the record of it leaves stor01 cordoned, with the
    tool's own mark: the next run upgrades and uncordons it, mark and all."""
    loaded, profile, hosts, _store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "stor01", unschedulable=True, annotations={CORDONED_BY: "upgrade"})
        rec = Recorder(srv)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, _opts(1, 2, 1),
                              profile=profile, installer=rec)
        assert res.ok and "stor01" in {h for b in rec.installed for h in b}
        node = srv.load()["nodes"]["stor01"]
        assert node["unschedulable"] is False and CORDONED_BY not in node["annotations"]


class LateReady(Recorder):
    """dgx02's kubelet reports Ready only a moment after the roles and the reboot (as a
    real node's kubelet and device plugin come back)."""

    def __init__(self, srv: StandInApiServer) -> None:
        super().__init__(srv)

    def gate(self, batch: Sequence[str]) -> Outcome:
        if "dgx02" in batch:
            threading.Timer(0.5, _set_node, (self.srv, "dgx02"), {"ready": True}).start()
        return super().gate(batch)


def test_the_gate_waits_for_a_node_that_comes_ready_late(tmp_path: Path) -> None:
    loaded, profile, hosts, _store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "dgx02", ready=False)
        opts = apply_mod.ApplyOptions(gate_timeout_s=60,
                                      plan=apply_mod.PlanOptions(batch=2, max_unavailable=2),
                                      max_failures=1, limit="dgx01,dgx02")
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {}, opts, profile=profile,
                              installer=LateReady(srv))
        assert res.ok, [(n.hostname, n.reason) for n in res.nodes]
        reads = [e for e in srv.load()["log"] if e["path"] == "/api/v1/nodes/dgx02"
                 and e["method"] == "GET"]
        assert len(reads) >= 2  # it asked again until the node was Ready


def test_no_api_server_ends_the_run_with_a_kube_error_before_any_node(tmp_path: Path) -> None:
    """The cluster is asked before the first batch: no answer is exit 13 (KubeError), and
    no node was cordoned or installed."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, _):
        url = srv.url  # nothing listens there once it is shut down
    rec = Recorder()
    with pytest.raises(KubeError):
        apply_mod.apply(loaded, _gpu_bundle(loaded), OfficialClient(url=url), {},
                        apply_mod.ApplyOptions(gate_timeout_s=GATE_S), profile=profile,
                        installer=rec)
    assert rec.installed == [] and all(store.node(h).phase is Phase.READY for h in hosts)
    assert store.lease_holder() is None  # released on the way out


class TakenOver(Recorder):
    """While the first batch installs, a runner elsewhere takes the site's lease over (as
    after this run's heartbeat had gone stale): the install waits until this run noticed."""

    def __init__(self, store: StateStore, stop_seen: threading.Event) -> None:
        super().__init__()
        self.store, self.stop_seen = store, stop_seen

    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome:
        if not self.installed:
            with sqlite3.connect(self.store.path) as con:
                con.execute("UPDATE lease SET host = 'runner-elsewhere', pid = 1, "
                            "holder = '' WHERE id = 1")
            assert self.stop_seen.wait(60)
        return super().install(batch, reboot)


def test_a_run_whose_lease_was_taken_over_stops_and_says_so(tmp_path: Path) -> None:
    loaded, profile, hosts, store = _ready_site(tmp_path)
    stop = threading.Event()
    with _cluster(tmp_path, hosts) as (_srv, kube):
        opts = apply_mod.ApplyOptions(gate_timeout_s=GATE_S, lease_heartbeat_s=0.05)
        res = apply_mod.apply(loaded, "2026.11", kube, {}, opts, profile=profile,
                              installer=TakenOver(store, stop), stop=stop)
    assert res.interrupted and not res.ok
    assert any("lost the site lease" in n for n in res.notes), res.notes
    assert store.lease_holder()["host"] == "runner-elsewhere"  # its row is left alone


class KubeletStaysBehind(Recorder):
    """kubeadm upgrade moves every node but `behind`: its kubelet still reports the old
    version (a package held back, a kubelet that did not restart), or on a control plane
    its API server's static pod still runs the old image."""

    def __init__(self, srv: StandInApiServer, behind: str, part: str) -> None:
        super().__init__(srv)
        self.behind, self.part = behind, part

    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome:
        out = super().install(batch, reboot)
        if self.behind in batch:
            assert self.srv is not None
            if self.part == "kubelet":
                _set_node(self.srv, self.behind, kubelet="v1.35.8")
            else:
                self.srv.edit(lambda w: move_versions(w, [self.behind], "v1.35.8")
                              or w["nodes"][self.behind].update(kubelet="v1.36.4"))
        return out


@pytest.mark.parametrize(("behind", "part", "why"), [
    ("dgx01", "kubelet", "the kubelet reports v1.35.8, expected v1.36.4"),
    ("cp01", "apiserver", "its API server (kube-system/kube-apiserver-cp01) runs v1.35.8, "
                          "expected v1.36.4")])
def test_the_gate_checks_the_kubernetes_version_the_cluster_reports(
        tmp_path: Path, behind: str, part: str, why: str) -> None:
    """A bundle that moves Kubernetes: the gate asks the cluster what each node's kubelet
    and each control plane's API server run; a node left behind fails and stays cordoned."""
    loaded, profile, hosts, _store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        res = apply_mod.apply(loaded, "2026.11", kube, {}, _opts(1, 1, 1), profile=profile,
                              installer=KubeletStaysBehind(srv, behind, part))
        assert [n.hostname for n in res.failed] == [behind]
        assert why in (res.failed[0].reason or "")
        assert srv.load()["nodes"][behind]["unschedulable"] is True
        # the API server pods are static pods: listed on their node, never evicted
        assert not [e for e in srv.load()["log"] if e["path"].endswith("/eviction")
                    and "kube-apiserver" in e["path"]]


def test_the_lab_does_not_check_kubernetes_versions_and_says_so(tmp_path: Path) -> None:
    """In the lab nothing runs kubeadm upgrade (needs_cluster): the stand-in keeps the old
    versions, so the gate does not read them, and the run's notes say they are not
    verified."""
    loaded, _profile, hosts, _store = _ready_site(tmp_path)
    lab = for_site(loaded, lab=True)
    moved_to(StateStore(lab.state_path), hosts, Phase.READY)
    with _cluster(tmp_path, hosts) as (_srv, kube):
        res = apply_mod.apply(loaded, "2026.11", kube, {}, _opts(2, 2, 1),
                              profile=lab, installer=Recorder())
    assert res.ok, [(n.hostname, n.reason) for n in res.nodes]
    assert any("kubelet and API server versions" in n for n in res.notes), res.notes


def test_a_control_plane_left_part_way_is_checked_at_the_new_target(tmp_path: Path) -> None:
    """cp01's roles ran at 2026.11 (kubeadm upgrade apply: its API server and kubelet at
    1.36.4), then it failed its gate. Retargeted to a bundle pinning 1.35.8, whose plan shows
    no Kubernetes change (nothing was recorded done), the gate still asks the cluster, and
    finds the control plane at 1.36.4: it fails, it is not recorded on the new bundle."""
    loaded, profile, hosts, store = _ready_site(tmp_path)
    with _cluster(tmp_path, hosts) as (srv, kube):
        _set_node(srv, "cp01", ready=False)
        apply_mod.apply(loaded, "2026.11", kube, {}, _opts(1, 1, 1, limit="cp01"),
                        profile=profile, installer=Recorder(srv))
        assert store.node("cp01").failed_phase is Phase.CONFIGURED
        _set_node(srv, "cp01", ready=True)
        res = apply_mod.apply(loaded, _gpu_bundle(loaded), kube, {},
                              _opts(1, 1, 1, limit="cp01"), profile=profile,
                              installer=Recorder(srv, kubelet=None))  # nothing moves back
        assert [n.hostname for n in res.failed] == ["cp01"]
        why = res.failed[0].reason or ""
        assert "the kubelet reports v1.36.4, expected v1.35.8" in why
        assert "kube-apiserver-cp01) runs v1.36.4, expected v1.35.8" in why
        assert not [e for e in store.events() if e.kind == "upgraded"]


def test_the_plan_is_made_again_under_the_lease(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """Another run held the lease and finished every node between this run's first plan
    and its lease: the plan made again under the lease finds nothing to move, so no node is
    cordoned or drained a second time."""
    from provisioner.inventory.bundle_models import load_bundle
    from provisioner.upgrade.drift import UPGRADED
    from provisioner.upgrade.plan import effective

    loaded, profile, hosts, store = _ready_site(tmp_path)
    bundle = _gpu_bundle(loaded)
    done = effective(loaded, load_bundle(loaded.base_dir, bundle).bundle).components()
    real_plan = apply_mod.plan
    calls: list[int] = []

    def plan_then_other_run(*a: object, **kw: object) -> tuple[Any, Any]:
        made = real_plan(*a, **kw)
        if not calls:  # the other run finishes between the first plan and the lease
            for h in hosts:
                store.record(h, UPGRADED, {"bundle": bundle, "versions": done})
        calls.append(len(made[0].nodes))
        return made

    monkeypatch.setattr(apply_mod, "plan", plan_then_other_run)
    with _cluster(tmp_path, hosts) as (srv, kube):
        rec = Recorder(srv, kubelet=None)
        res = apply_mod.apply(loaded, bundle, kube, {}, _opts(1, 2, 2), profile=profile,
                              installer=rec)
        assert len(calls) == 2 and rec.installed == [], rec.installed
        assert not any(n.changes for n in res.plan.nodes)
        assert not any(srv.load()["nodes"][h]["unschedulable"] for h in hosts)
