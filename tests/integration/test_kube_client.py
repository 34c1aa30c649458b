"""The official `kubernetes` client (provisioner.kube.official) against the stand-in API
server: every call the rolling upgrade makes goes over real HTTP through the official
client's own serialisation, including the 429 a PodDisruptionBudget answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.errors import KubeError
from provisioner.kube import Eviction, PodRef, image_tag
from provisioner.kube.official import OfficialClient
from provisioner.kube.standin import StandInApiServer, world
from provisioner.secrets import Secret
from provisioner.workflows.engine import StepFailed
from provisioner.workflows.upgrade.steps import Drain


@pytest.fixture
def api(tmp_path: Path) -> Iterator[StandInApiServer]:
    w = world(["n1", "n2"])
    w["nodes"]["n2"]["ready"] = False
    w["pods"] = [
        {"namespace": "kube-system", "name": "dp", "node": "n1", "owner": "DaemonSet"},
        {"namespace": "train", "name": "job-a", "node": "n1", "owner": "Job",
         "labels": {"app": "train"}},
        {"namespace": "train", "name": "job-b", "node": "n1", "owner": "Job",
         "labels": {"app": "train"}},
    ]
    w["pdbs"] = [{"namespace": "train", "name": "train", "selector": {"app": "train"},
                  "disruptions_allowed": 1}]
    state = tmp_path / "world.json"
    srv = StandInApiServer(state)
    srv.save(w)
    srv.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def test_cordon_evict_uncordon_through_the_official_client(api: StandInApiServer) -> None:
    kube = OfficialClient(url=api.url, token=Secret("not-a-real-token"))
    kube.cordon("n1")
    assert api.load()["nodes"]["n1"]["unschedulable"] is True
    pods = kube.pods_on("n1")
    assert {p.name: p.owner_kind for p in pods} == {"dp": "DaemonSet", "job-a": "Job",
                                                   "job-b": "Job"}
    assert kube.pdbs() == ["train/train"]
    # The PDB allows one disruption: the first eviction goes, the second gets 429.
    assert kube.evict(PodRef("train", "job-a", "Job")) is Eviction.EVICTED
    assert kube.evict(PodRef("train", "job-b", "Job")) is Eviction.BLOCKED
    assert kube.evict(PodRef("train", "no-such-pod", "Job")) is Eviction.GONE
    left = {p["name"] for p in api.load()["pods"]}
    assert left == {"dp", "job-b"}
    kube.delete(PodRef("train", "job-b", "Job"))
    assert {p["name"] for p in api.load()["pods"]} == {"dp"}
    h1, h2 = kube.health("n1"), kube.health("n2")
    assert (h1.ready, h1.unschedulable, h1.allocatable_gpus) == (True, True, 8)
    assert h2.ready is False and h1.kubelet_version == "v1.35.8"
    kube.uncordon("n1")
    assert api.load()["nodes"]["n1"]["unschedulable"] is False
    # The bearer token went in a header, and nowhere the stand-in records.
    assert "not-a-real-token" not in api.state.read_text()


def test_a_control_planes_api_server_version_is_its_static_pods_image_tag(
        tmp_path: Path) -> None:
    """Read from kubeadm's kube-apiserver mirror pod on that node; a node without one (a
    worker) has none; the mirror pod is a static pod, which a drain leaves alone."""
    srv = StandInApiServer(tmp_path / "world.json")
    srv.save(world(["cp1", "w1"], kubelet="v1.32.4", control_planes=("cp1",)))
    srv.start()
    try:
        kube = OfficialClient(url=srv.url)
        assert kube.apiserver_version("cp1") == "v1.32.4"
        assert kube.apiserver_version("w1") is None
        pod, = kube.pods_on("cp1")
        assert (pod.namespace, pod.name, pod.mirror) == ("kube-system",
                                                         "kube-apiserver-cp1", True)
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize(("ref", "tag"), [
    ("registry.k8s.io/kube-apiserver:v1.32.4", "v1.32.4"),
    ("mirror.site:5000/k8s/kube-apiserver:v1.32.4", "v1.32.4"),
    ("registry.k8s.io/kube-apiserver:v1.32.4@sha256:0123abcd", "v1.32.4"),
    ("mirror.site:5000/kube-apiserver@sha256:0123abcd", None)])
def test_the_version_is_the_image_tag(ref: str, tag: str | None) -> None:
    assert image_tag(ref) == tag


def test_an_unknown_node_is_a_kube_error_that_names_it(api: StandInApiServer) -> None:
    kube = OfficialClient(url=api.url)
    with pytest.raises(KubeError, match="nope") as exc:
        kube.cordon("nope")
    assert exc.value.status == 404


def test_no_api_server_is_a_kube_error(tmp_path: Path) -> None:
    srv = StandInApiServer(tmp_path / "w.json")
    url = srv.url
    srv.server_close()  # the port is free again: nothing answers
    with pytest.raises(KubeError):
        OfficialClient(url=url).health("n1")


def _terminating_world(api: StandInApiServer, lists: int) -> None:
    w = api.load()
    w["pdbs"] = []
    for p in w["pods"]:
        p["terminating_lists"] = lists  # listed that many more times once evicted
    api.save(w)


def test_drain_waits_until_the_evicted_pods_have_terminated(api: StandInApiServer) -> None:
    """As `kubectl drain`: the step ends when the evicted pods are no longer listed (their
    grace period over), so the roles never stop containerd under a checkpointing job."""
    _terminating_world(api, 3)
    kube = OfficialClient(url=api.url)
    drain = Drain(kube, None, timeout_s=60, retry_s=0.01)  # type: ignore[arg-type]
    detail = drain("n1", None)
    assert detail["evicted"] == 2 and detail["terminating_polls"] >= 2
    assert {p["name"] for p in api.load()["pods"]} == {"dp"}  # the DaemonSet pod stays


def test_drain_fails_when_evicted_pods_never_terminate(api: StandInApiServer) -> None:
    _terminating_world(api, 10**6)
    drain = Drain(OfficialClient(url=api.url), None, timeout_s=0.2,  # type: ignore[arg-type]
                  retry_s=0.01)
    with pytest.raises(StepFailed, match=r"2 evicted pod\(s\) still terminating"):
        drain("n1", None)
    assert {p["name"] for p in api.load()["pods"]} == {"dp", "job-a", "job-b"}


def test_drain_does_not_wait_for_a_pod_recreated_under_the_same_name(
        api: StandInApiServer) -> None:
    """A StatefulSet pod that tolerates the cordon comes back at once under the same name:
    another pod (another UID), which the drain must not wait for, as kubectl drain."""
    _terminating_world(api, 0)
    w = api.load()
    w["pods"][1]["recreate"] = True  # job-a
    api.save(w)
    detail = Drain(OfficialClient(url=api.url), None, timeout_s=5,  # type: ignore[arg-type]
                   retry_s=0.01)("n1", None)
    assert detail["evicted"] == 2 and detail["terminating_polls"] == 0
    left = {p["name"]: p.get("uid") for p in api.load()["pods"]}
    assert left == {"dp": None, "job-a": "uid-job-a-2"}


def test_drain_refuses_what_kubectl_drain_would_and_evicts_nothing(tmp_path: Path) -> None:
    """A pod no controller owns is gone for good once evicted, an emptyDir's data with its
    pod: as kubectl drain, the step evicts nothing until told (--drain-force,
    --drain-delete-emptydir-data); a finished bare pod is no one's work."""
    srv = StandInApiServer(tmp_path / "world.json")
    w = world(["n1"])
    w["pods"] = [
        {"namespace": "kube-system", "name": "dp", "node": "n1", "owner": "DaemonSet"},
        {"namespace": "train", "name": "job-a", "node": "n1", "owner": "Job"},
        {"namespace": "dev", "name": "notebook", "node": "n1"},  # kubectl run
        {"namespace": "train", "name": "scratch", "node": "n1", "owner": "Job",
         "emptydir": True},
        {"namespace": "dev", "name": "done", "node": "n1", "phase": "Succeeded"},
    ]
    srv.save(w)
    srv.start()
    try:
        kube = OfficialClient(url=srv.url)
        seen = {p.name: (p.unmanaged, p.local_storage, p.finished) for p in kube.pods_on("n1")}
        assert seen == {"dp": (False, False, False), "job-a": (False, False, False),
                        "notebook": (True, False, False), "scratch": (False, True, False),
                        "done": (True, False, True)}
        drain = Drain(kube, None, timeout_s=5, retry_s=0.01)  # type: ignore[arg-type]
        with pytest.raises(StepFailed) as refused:
            drain("n1", None)
        why = str(refused.value)
        assert why.startswith("drain: 2 pod(s) kubectl drain would not evict")
        assert "dev/notebook (no controller would recreate it: --drain-force)" in why
        assert "train/scratch (its emptyDir data goes with it: " \
               "--drain-delete-emptydir-data)" in why
        assert "dev/done" not in why and "nothing was evicted" in why
        assert len(srv.load()["pods"]) == 5  # nothing evicted
        told = Drain(kube, None, timeout_s=5, retry_s=0.01, force=True,  # type: ignore[arg-type]
                     delete_emptydir_data=True)
        assert told("n1", None)["evicted"] == 4
        assert {p["name"] for p in srv.load()["pods"]} == {"dp"}
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_https_api_server_is_verified_against_the_ca_given(tmp_path: Path) -> None:
    """TLS to the API server is always verified: a cluster whose certificate chains to
    kubeadm's own CA is refused with the system's CAs and reached with `--kube-ca`."""
    import ssl

    from tests.integration.test_secrets_tls import _self_signed

    crt, key, _fp = _self_signed(tmp_path)
    srv = StandInApiServer(tmp_path / "world.json")
    srv.save(world(["n1"]))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.start()
    url = srv.url.replace("http://", "https://")
    try:
        with pytest.raises(KubeError, match="no answer from the API server"):
            OfficialClient(url=url, timeout_s=5).health("n1")
        assert OfficialClient(url=url, ca_file=crt).health("n1").ready is True
        with pytest.raises(KubeError, match="no such file"):
            OfficialClient(url=url, ca_file=tmp_path / "missing.crt")
    finally:
        srv.shutdown()
        srv.server_close()
