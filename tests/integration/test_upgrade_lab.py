"""`provision upgrade apply` end to end in the lab: the example site's SSH test hosts and
BMC emulators, the real rendered roles at the bundle's versions, and the stand-in
Kubernetes API server (these machines have no real one) answered through the official
client. One node fails its health gate (its node reports NotReady): it stays cordoned, the
others finish, the exit code says so; once it is fixed a re-run completes it.

To keep CI time down, the control planes are recorded as already on the bundle (as a run
that stopped after them leaves them; control planes first is shown by the unit test of
apply and the simulation): the run here upgrades the two GPU workers in one batch; stor01,
a storage node outside Kubernetes, has nothing to move and is left alone. The
in-place step of a control plane (`site.yml --tags kubernetes_control_plane_first`) runs
for real on cp01 apart from the run: apt moves its kubeadm, and nothing outside the tag
runs.

dgx01 is first installed for real at the site's pins (release 2026.10: driver 570.124.06,
DCGM 4.5.1, Kubernetes 1.35.8) from the lab's signed mirror, so the upgrade shows apt moving
installed packages to the bundle's versions, not a first install at them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.inventory.bundle_models import load_bundle
from provisioner.kube.standin import StandInApiServer, world
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.upgrade.host import AnsibleInstaller
from provisioner.upgrade.plan import effective, site_at
from tests.conftest import requires_ssh_hosts
from tests.integration.conftest import (
    ConvergedPair,
    control_planes_upgraded,
    provision,
    requires_ipmi_sim,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e, requires_ipmi_sim,
              requires_ssh_hosts]
BAD = "dgx02"
WORKERS = {"dgx01", "dgx02"}
# The example's storage node has no worker role: no Kubernetes node (the stand-in, as a
# real API server, does not know it; a cordon would be answered 404). The bundle moves
# nothing on it, and the run leaves it alone.
STORAGE = "stor01"
TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
           "libnvidia-container-tools", "libnvidia-container1")


@pytest.fixture(scope="module")
def upgrade_lab(tmp_path_factory: Any, converged_pair: ConvergedPair
                ) -> Iterator[tuple[Path, StandInApiServer, Path]]:
    site, state = converged_pair.site, converged_pair.state  # stopped by the execution test
    hosts = control_planes_upgraded(site, "2026.11")
    w = world([h for h in hosts if h != STORAGE], kubelet="v1.35.8")
    w["nodes"][BAD]["ready"] = False  # its kubelet does not come back: the gate fails
    w["pods"] = [
        {"namespace": "gpu-operator", "name": "dcgm-exporter-dgx01", "node": "dgx01",
         "owner": "DaemonSet"},
        {"namespace": "train", "name": "job-1", "node": "dgx01", "owner": "Job",
         "labels": {"app": "train"}},
    ]
    w["pdbs"] = [{"namespace": "train", "name": "train", "selector": {"app": "train"},
                  "disruptions_allowed": 1}]
    srv = StandInApiServer(tmp_path_factory.mktemp("kube") / "world.json")
    srv.save(w)
    srv.start()
    dgx01 = Path(next(h.upper for h in state.ssh_hosts if h.name == "dgx01"))
    # dgx01 as `up` left it: the roles at the site's own pins (converged_pair's run of
    # site.yml on dgx01 and cp01; test_up shows the rest)
    before = installed(dgx01)
    assert before["nvidia-driver-570-open"].startswith("570.124.06-"), before
    assert reboots(dgx01) == 1  # the role's handler rebooted it for the new driver
    assert before["datacenter-gpu-manager-4-core"] == "1:4.5.1-1", before
    try:
        yield site, srv, dgx01
    finally:
        srv.shutdown()
        srv.server_close()


def apply(site: Path, url: str) -> tuple[int, dict[str, Any], str]:
    proc = provision("upgrade", "apply", str(site), "--to", "2026.11", "--kube-api", url,
                     "--batch", "100%", "--max-unavailable", "3", "--max-failures", "2",
                     "--drain-timeout", "5", "--gate-timeout", "2", "--json",
                     "--no-progress", timeout=3000)
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, doc, proc.stdout[-3000:] + proc.stderr[-3000:]


def installed(upper: Path) -> dict[str, str]:
    """Package -> version, from the dpkg database apt wrote on the lab host."""
    text = (upper / "var/lib/dpkg/status").read_text()
    return {m["p"]: m["v"] for m in re.finditer(
        r"^Package: (?P<p>\S+)\n(?:(?!\n\n).)*?^Version: (?P<v>\S+)", text, re.M | re.S)}


def reboots(upper: Path) -> int:
    """How often the lab host rebooted for real (its launcher logs each boot after one)."""
    return (upper.parent / "host.log").read_text().count(f"lab host {upper.parent.name}: "
                                                         "reboot\n")


def test_upgrade_apply_one_node_fails_its_gate_then_a_rerun_completes(upgrade_lab):
    site, srv, dgx01 = upgrade_lab
    booted = reboots(dgx01)
    before_toolkit = {p: installed(dgx01)[p] for p in TOOLKIT}
    plan = json.loads(provision("upgrade", "plan", str(site), "--to", "2026.11",
                                "--batch", "100%", "--max-unavailable", "3", "--json",
                                check=True).stdout)
    assert plan["ok"] and [sorted(b) for b in plan["batches"]] == [sorted(WORKERS)]

    code, doc, out = apply(site, srv.url)
    assert code == 9, out  # some nodes failed, within the failure budget
    assert doc["failed"] == [BAD] and not doc["budget_spent"] and not doc["not_started"], \
        [(n["hostname"], n.get("reason")) for n in doc["nodes"]]
    phases = {n["hostname"]: n for n in doc["nodes"]}
    assert phases[BAD]["phase"] == "failed" and phases[BAD]["failed_phase"] == "configured"
    assert "node is not Ready" in phases[BAD]["reason"]
    assert {h for h, n in phases.items() if n["phase"] == "ready"} == set(phases) - {BAD}
    assert {h for h, n in phases.items() if n["steps"]} == WORKERS  # the roles ran there
    assert any("needs_gpu" in n for n in doc["notes"])  # GPU checks said skipped, not passed
    w = srv.load()
    assert w["nodes"][BAD]["unschedulable"] is True  # it stays cordoned
    assert not any(n["unschedulable"] for h, n in w["nodes"].items() if h != BAD)
    assert [p["name"] for p in w["pods"]] == ["dcgm-exporter-dgx01"]  # Job evicted, DS kept
    evictions = [e for e in w["log"] if "eviction" in e.get("path", "")]
    assert len(evictions) == 1
    store = StateStore(for_site(load(site)).state_path)
    upgraded = {e.hostname for e in store.events() if e.kind == "upgraded"}
    # the control planes' earlier records included; stor01 had nothing to move
    assert upgraded == set(phases) - {BAD, STORAGE}
    assert phases[STORAGE]["phase"] == "ready" and not phases[STORAGE]["steps"]
    assert not [e for e in w["log"] if STORAGE in e.get("path", "")]  # never cordoned
    assert store.lease_holder() is None  # the lease went with the run
    # apt really moved the packages, from the lab's signed mirror, to the bundle's versions
    bundle = load_bundle(site, "2026.11").bundle
    now = installed(dgx01)
    assert now["kubeadm"].startswith(f"{bundle.kubernetes}-"), now.get("kubeadm")
    assert bundle.nvidia_driver.version
    assert now["nvidia-driver-570-open"].startswith(bundle.nvidia_driver.version + "-")
    assert now["libnvidia-compute-570"] == now["nvidia-driver-570-open"]
    assert now["nvidia-fabricmanager-570"].startswith(bundle.nvidia_driver.version + "-")
    assert now["datacenter-gpu-manager-4-core"] == f"1:{bundle.dcgm}-1"
    # the toolkit's release moved as one, past the pin the site's 1.17.4 had set
    assert before_toolkit == {p: "1.17.4-1" for p in TOOLKIT}, before_toolkit
    assert {p: now[p] for p in TOOLKIT} == {p: f"{bundle.container_toolkit}-1" for p in TOOLKIT}
    # a new driver: rebooted for real through the OS, once (by the roles, mid-play, which
    # the reboot step saw); the node that failed its gate too; no driver, no reboot
    assert reboots(dgx01) == booted + 1
    assert reboots(dgx01.parent.parent / BAD / "upper") == 1
    assert reboots(dgx01.parent.parent / "stor01" / "upper") == 0

    w["nodes"][BAD]["ready"] = True  # fixed
    srv.save(w)
    code, doc, out = apply(site, srv.url)
    assert code == 0, out
    assert [n["hostname"] for n in doc["nodes"] if n["steps"]] == [BAD]
    assert all(n["phase"] == "ready" for n in doc["nodes"])
    assert srv.load()["nodes"][BAD]["unschedulable"] is False
    again = json.loads(provision("upgrade", "plan", str(site), "--to", "2026.11", "--json",
                                 check=True).stdout)
    assert again["changes"] == [c for c in again["changes"] if not c["nodes"]]


def test_a_control_plane_moves_in_place_with_its_tagged_tasks_only(upgrade_lab):
    """What `upgrade apply` runs on each control plane before any drain when Kubernetes
    moves, for real on cp01 (brought up at the site's pins by the fixture): the rendered
    project at 2026.11, limited to the tag. kubeadm's own upgrade is needs_cluster (no
    cluster here); cp01 never joined one, so apt takes kubelet and kubectl with kubeadm, as
    for a new node (a member takes kubeadm alone: test_kubernetes_payload)."""
    site, _srv, dgx01 = upgrade_lab
    cp01 = dgx01.parent.parent / "cp01" / "upper"
    assert installed(cp01)["kubeadm"].startswith("1.35.8-")
    loaded = load(site)
    target = effective(loaded, load_bundle(site, "2026.11").bundle)
    inst = AnsibleInstaller(site_at(loaded, target), for_site(loaded, lab=True), {},
                            target.name, forks=5)
    assert inst.control_plane_first("cp01") is None
    assert installed(cp01)["kubeadm"].startswith("1.36.4-")  # apt, from the signed mirror
    artifacts = inst.project() / "artifacts"
    last = max(artifacts.iterdir(), key=lambda d: d.stat().st_mtime)
    ran = {json.loads(f.read_text()).get("event_data", {}).get("task", "")
           for f in (last / "job_events").glob("*.json")} - {""}
    moved = {"Set aside other entries for the kubernetes repository (a duplicate stops apt)",
             "Add the Kubernetes package repository for the pinned minor version",
             "Install kubeadm (with kubelet and kubectl on a new node) at the pinned version"}
    # besides: facts, the validation play (which runs under any tag), the member check
    project = inst.project() / "project"
    checks = {t["name"] for f in [project / "validate.yml"] for play in yaml.safe_load(
        f.read_text()) for t in play.get("tasks", [])}
    checks |= {t["name"] for f in (project / "roles").glob("*/tasks/validate.yml")
               for t in yaml.safe_load(f.read_text()) or []}
    extra = {"Gathering Facts", "Check whether this node is already a cluster member"}
    # and, tagged always (they change nothing), base_os's read of the Secure Boot state and
    # the kubernetes role's look for the control plane that holds the cluster
    for read_only in ("base_os/tasks/secure_boot.yml", "kubernetes/tasks/holder.yml"):
        extra |= {t["name"] for t in yaml.safe_load((project / "roles" / read_only).read_text())}
    assert moved <= ran and ran - moved <= checks | extra, sorted(ran - moved - checks)
