"""`provision upgrade apply` as CI runs it, against the stand-in Kubernetes API server (these
machines have no real one) through a kubeconfig: Ctrl-C mid-run exits 130, leaves the
interrupted node cordoned where it was recorded and releases the site lease, and a re-run
resumes from the recorded phases. No lab: the control planes are recorded as already on
the bundle, and the run is stopped while the two workers' batch drains (a
PodDisruptionBudget holds dgx01's pod; dgx02 is drained), before any role runs; the
re-run's host side is recorded instead of run (the lab e2e runs the roles). stor01, a
storage node, is no Kubernetes node (the stand-in, as a real API server, does not know it):
the bundle moves nothing on it and it is left alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.errors import KubeError
from provisioner.kube.official import OfficialClient
from provisioner.kube.standin import StandInApiServer, world
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.secrets import write_private
from provisioner.state import StateStore
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import EXAMPLE, ROOT
from tests.integration.conftest import control_planes_upgraded
from tests.unit.test_upgrade_apply import Recorder

pytestmark = pytest.mark.integration
TOKEN = "standin-token-7f3a9c"  # a test value; it must never show in output
CONTROL_PLANES = ("cp01", "cp02", "cp03")
WORKERS = ("dgx01", "dgx02")
STORAGE = "stor01"  # no worker role: not in the cluster


def kubeconfig(path: Path, url: str, token: str) -> Path:
    write_private(path, f"""\
apiVersion: v1
kind: Config
clusters: [{{name: standin, cluster: {{server: "{url}"}}}}]
users: [{{name: ci, user: {{token: "{token}"}}}}]
contexts: [{{name: standin, context: {{cluster: standin, user: ci}}}}]
current-context: standin
""")
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, StandInApiServer, Path]]:
    """A copy of the example site, every server ready in its state store, and a stand-in
    API server that wants TOKEN, where a PodDisruptionBudget holds dgx01's one pod."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    hosts = control_planes_upgraded(site, "2026.11")
    w = world([h for h in hosts if h != STORAGE])
    w["pods"] = [{"namespace": "train", "name": "job-1", "node": "dgx01", "owner": "Job",
                  "labels": {"app": "train"}}]
    w["pdbs"] = [{"namespace": "train", "name": "train", "selector": {"app": "train"},
                  "disruptions_allowed": 0}]
    srv = StandInApiServer(tmp_path / "world.json", token=TOKEN)
    srv.save(w)
    srv.start()
    try:
        yield site, srv, kubeconfig(tmp_path / "kubeconfig", srv.url, TOKEN)
    finally:
        srv.shutdown()
        srv.server_close()


def test_kubeconfig_is_honoured_and_its_token_sent(cluster: Any, tmp_path: Path) -> None:
    _, srv, kc = cluster
    health = OfficialClient(kubeconfig=kc).health("dgx01")  # the stand-in wants the token
    assert health.ready and health.allocatable_gpus == 8
    wrong = kubeconfig(tmp_path / "wrong", srv.url, "not-the-token")
    with pytest.raises(KubeError, match="answered 401") as exc:
        OfficialClient(kubeconfig=wrong).health("dgx01")
    assert "not-the-token" not in str(exc.value)
    assert [e["code"] for e in srv.load()["log"]] == [200, 401]


def test_ctrl_c_exits_130_releases_the_lease_and_a_rerun_resumes(cluster: Any) -> None:
    site, srv, kc = cluster
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", "upgrade", "apply", str(site), "--to",
         "2026.11", "--kubeconfig", str(kc), "--batch", "100%", "--max-unavailable", "3",
         "--drain-timeout", "3600", "--json", "--no-progress"], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    store = StateStore(for_site(load(site)).state_path)

    def mid_run() -> bool:  # dgx01's eviction refused (429), dgx02 drained
        return any(e["code"] == 429 for e in srv.load()["log"]) and \
            store.node("dgx02").phase is Phase.UPGRADING

    try:
        while proc.poll() is None and not mid_run():
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    assert TOKEN not in out + err
    doc = json.loads(out)
    assert doc["interrupted"] and not doc["ok"]
    assert store.lease_holder() is None  # the lease went with the run
    # recorded where they stopped; no roles ran after the stop (none could: no SSH here)
    assert store.node("dgx01").phase is Phase.DRAINING
    assert store.node("dgx02").phase is Phase.UPGRADING
    assert all(store.node(h).phase is Phase.READY for h in (*CONTROL_PLANES, STORAGE))
    nodes = srv.load()["nodes"]
    assert sorted(h for h, n in nodes.items() if n["unschedulable"]) == sorted(WORKERS)

    w = srv.load()
    w["pdbs"][0]["disruptions_allowed"] = 1  # the backup may move now
    srv.save(w)
    rec = Recorder(srv)
    again = apply_mod.apply(load(site), "2026.11", OfficialClient(kubeconfig=kc), {},
                            apply_mod.ApplyOptions(max_failures=1), installer=rec)
    assert again.ok, [(n.hostname, n.reason) for n in again.nodes]
    assert [sorted(b) for b in rec.installed] == [sorted(WORKERS)]  # resumed as one batch
    assert any(e.kind == "resumed" and "2 node(s)" in e.detail["note"]
               for e in store.events())
    assert srv.load()["pods"] == []  # evicted once the PDB allowed it
    assert not any(n["unschedulable"] for n in srv.load()["nodes"].values())
    assert all(store.node(h).phase is Phase.READY for h in (*nodes, STORAGE))
    assert not [e for e in srv.load()["log"] if STORAGE in e.get("path", "")]
