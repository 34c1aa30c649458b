"""The CNI follows the cluster's Kubernetes minor: the newest release its vendor tests on
that minor (sources.CNI_RELEASES), untested minors warned about by validate, Cilium moved a
minor at a time, and the manifest applied server-side with a diff that tells the truth."""

from __future__ import annotations

import pytest
import yaml

from provisioner import render, sources
from provisioner.inventory import load
from provisioner.inventory.checks import check
from tests.conftest import EXAMPLE, ROOT, ansible_eval, edited_example, holds, role_task

EXAMPLE_K8S = 'kubernetes: {version: "1.35.8", cni: calico, vip: 10.250.0.250}'


@pytest.mark.parametrize(("cni", "kubernetes", "version", "tested"), [
    ("calico", "1.27.3", "v3.28.5", True),
    ("calico", "1.30.2", "v3.29.7", True),  # 3.30 is tested from 1.31
    ("calico", "1.31.4", "v3.30.7", True),
    ("calico", "1.33.1", "v3.31.7", True),
    ("calico", "1.34.0", "v3.32.1", True),
    ("calico", "1.37.2", "v3.33.0", True),
    ("calico", "1.38.0", "v3.33.0", False),  # newer than any known release's tests
    ("calico", "1.25.0", "v3.28.5", False),
    ("cilium", "1.31.4", "1.18.14", True),
    ("cilium", "1.32.4", "1.19.6", True),
    ("cilium", "1.36.0", "1.19.6", False),
    ("flannel", "1.37.0", "v0.25.7", True)])
def test_the_newest_release_tested_on_the_clusters_minor(cni, kubernetes, version, tested):
    got, release = sources.cni_release(cni, kubernetes)
    assert got == version and (release is not None) is tested


def test_a_minor_by_minor_kubernetes_upgrade_moves_each_cni_a_minor_at_most():
    """Kubernetes moves one minor per upgrade (kubeadm's skew policy): its CNI then moves at
    most one minor too, which Cilium requires of its upgrades."""
    for cni in sources.CNI_RELEASES:
        for minor in range(27, 38):
            a = sources.cni_release(cni, f"1.{minor}.0")[0].lstrip("v").split(".")
            b = sources.cni_release(cni, f"1.{minor + 1}.0")[0].lstrip("v").split(".")
            assert a[0] == b[0] and 0 <= int(b[1]) - int(a[1]) <= 1, (cni, minor, a, b)


def test_the_site_and_its_artifacts_get_the_release_for_its_minor(tmp_path):
    site = edited_example(tmp_path, EXAMPLE_K8S, EXAMPLE_K8S.replace("1.35.8", "1.34.2"))
    loaded = load(site)
    gv = (render.render(loaded, tmp_path / "o").out / "inventory/group_vars/all.yml"
          ).read_text()
    assert "kubernetes_cni_version: v3.32.1" in gv
    assert "calico/v3.32.1/manifests/calico.yaml" in gv
    files = {i["name"]: i["version"] for i in render.artifacts(loaded) if i["kind"] == "file"}
    assert files["calico CNI manifest (calico.yaml)"] == "v3.32.1"
    assert not [f for f in check(loaded) if f.code == "cni-untested"]


def test_validate_warns_of_a_minor_no_known_release_is_tested_on(tmp_path):
    site = edited_example(tmp_path, EXAMPLE_K8S, EXAMPLE_K8S.replace("1.35.8", "1.38.1"))
    hits = [f for f in check(load(site)) if f.code == "cni-untested"]
    assert len(hits) == 1 and hits[0].severity.value == "warning"
    assert "calico v3.33.0 is used" in hits[0].message
    assert hits[0].location.key_path == "software.kubernetes.version"


def _role_vars() -> dict[str, str]:
    return yaml.safe_load((ROOT / "roles/kubernetes/vars/main.yml").read_text())


@pytest.mark.parametrize(("deployed", "target", "ok"), [
    ([], "1.18.14", True),  # a first install
    ([{"chart": "cilium-1.17.18", "status": "deployed"}], "1.18.14", True),
    ([{"chart": "cilium-1.18.14", "status": "deployed"}], "1.18.14", True),
    ([{"chart": "cilium-1.16.5", "status": "deployed"}], "1.18.14", False),
    ([{"chart": "cilium-1.19.6", "status": "deployed"}], "1.17.18", False),  # rollback too
    ([{"chart": "cilium-1.19.6", "status": "deployed"}], "v1.18.14", True)])
def test_cilium_is_upgraded_one_minor_at_a_time(deployed, target, ok):
    task = role_task("kubernetes", "Refuse to skip a minor release: "
                     "{{ kubernetes_release.name }}", file="tasks/helm_release.yml")
    release = {"name": "cilium", "chart": "cilium/cilium", "version": target,
               "namespace": "kube-system", "minor_by_minor": True}
    ctx = {"kubernetes_release": release, "kubernetes_release_listed": deployed}
    at = ansible_eval(_role_vars()["kubernetes_release_at"], **ctx)
    to = ansible_eval(task["vars"]["kubernetes_release_to"], **ctx)
    assert at == (deployed[0]["chart"].split("-")[1].rsplit(".", 1)[0] if deployed else "")
    runs = holds(task["when"], **ctx)
    assert runs is bool(deployed)  # a first install has no release to skip from
    if runs:
        assert holds(task["ansible.builtin.assert"]["that"], kubernetes_release_at=at,
                     kubernetes_release_to=to, **ctx) is ok
        # the message is templated whatever the answer (before `that` is read)
        said = ansible_eval(task["ansible.builtin.assert"]["fail_msg"],
                            kubernetes_release_at=at, kubernetes_release_to=to, **ctx)
        assert f"cilium is at {at}" in said
    cilium = role_task("kubernetes", "Install Cilium from its pinned chart")
    assert cilium["vars"]["kubernetes_release"]["minor_by_minor"] is True


def test_the_cni_manifest_is_applied_server_side_only_when_kubectl_diff_finds_a_change():
    diff = role_task("kubernetes", "Compare the CNI manifest with the cluster")
    apply = role_task("kubernetes", "Install or upgrade the CNI from its manifest")
    role_vars = yaml.safe_load((ROOT / "roles/kubernetes/vars/main.yml").read_text())
    manifest = "/etc/kubernetes/cni-calico-v3.30.7.yaml"
    assert ansible_eval(role_vars["kubernetes_cni_manifest_file"],
                        kubernetes_config_dir="/etc/kubernetes", kubernetes_cni="calico",
                        kubernetes_cni_version="v3.30.7") == manifest
    args = ansible_eval(role_vars["kubernetes_cni_apply_args"],
                        kubernetes_cni_manifest_file=manifest)
    argvs = [ansible_eval(task["ansible.builtin.command"]["argv"],
                          kubernetes_config_dir="/etc/kubernetes",
                          kubernetes_cni_apply_args=args) for task in (diff, apply)]
    for argv in argvs:
        assert "--server-side" in argv and "--force-conflicts" in argv
        assert "--field-manager=provisioner" in argv  # the diff as the apply's manager
        assert argv[-2:] == ["-f", manifest]
    assert argvs[0][3] == "diff" and argvs[1][3] == "apply"
    # exit 1: differences; above 1: an error, such as flannel's namespace not there yet
    # for a server-side diff (kubernetes#114141): the apply runs and says what is wrong
    assert diff["changed_when"] is False and diff["failed_when"] is False
    assert apply["when"].endswith("kubernetes_cni_diff.rc != 0")


@pytest.mark.parametrize(("cni", "severity"), [("calico", "warning"), ("cilium", "error"),
                                                ("flannel", "error")])
def test_a_pod_cidr_with_fewer_node_ranges_than_nodes(tmp_path, cni, severity):
    """Each node gets a /24 of the pod CIDR: a /24 holds one. flannel and Cilium's cluster
    pool give the others' pods no address; Calico's own IPAM still does (a warning)."""
    site = edited_example(tmp_path, EXAMPLE_K8S, EXAMPLE_K8S.replace(
        "cni: calico", f"cni: {cni}, pod_cidr: 10.244.0.0/24"))
    loaded = load(site)
    nodes = sum(1 for p in loaded.site.placements for _ in p.nodes)
    hits = [f for f in check(loaded) if f.code == "pod-cidr-too-few-nodes"]
    assert len(hits) == 1 and hits[0].severity.value == severity, hits
    assert "pod_cidr /24 holds 1 node range (a /24 each) for " in hits[0].message
    assert nodes > 2 and f"use a /{24 - (nodes - 1).bit_length()} or larger" in hits[0].hint
    wide = edited_example(tmp_path, EXAMPLE_K8S, EXAMPLE_K8S.replace(
        "cni: calico", f"cni: {cni}, pod_cidr: 10.244.0.0/20"), name="wide")
    assert not [f for f in check(load(wide)) if f.code.startswith("pod-cidr")]


@pytest.mark.parametrize(("version", "said"), [("1.32.9", True), ("1.33.2", False),
                                               ("1.36.4", False), ("1.37.1", True)])
def test_validate_says_when_the_pinned_gpu_operator_does_not_support_the_minor(
        tmp_path, version, said):
    """The GPU Operator chart is pinned whatever the minor: v26.7.0 supports 1.33 to 1.36
    (its platform support page)."""
    site = edited_example(tmp_path, EXAMPLE_K8S, EXAMPLE_K8S.replace("1.35.8", version))
    hits = [f for f in check(load(site)) if f.code == "gpu-operator-unsupported"]
    assert bool(hits) is said
    if said:
        assert hits[0].severity.value == "warning"
        assert f"supports Kubernetes 1.33 to 1.36, not {version[:4]}" in hits[0].message


@pytest.mark.parametrize(("deployed", "ok"), [
    ([], True),  # a first install
    ([{"chart": "gpu-operator-v26.3.1", "status": "deployed"}], True),  # the line before
    ([{"chart": "gpu-operator-v26.7.0", "status": "deployed"}], True),
    ([{"chart": "gpu-operator-v25.3.0", "status": "deployed"}], False),  # skips 25.10, 26.3
    ([{"chart": "gpu-operator-v27.1.0", "status": "deployed"}], False)])  # a rollback
def test_an_nvidia_operator_moves_one_release_line_at_a_time(deployed, ok):
    """NVIDIA supports an operator's upgrade within its release line or to the next only:
    a cluster further behind stops before helm, told the lines to go through; the pinned
    release names the lines it may come from (sources.py), rendered into the role."""
    from tests.conftest import run_assert
    task = role_task("kubernetes", "Refuse to skip a release line: "
                     "{{ kubernetes_release.name }}", file="tasks/helm_release.yml")
    release = {"name": "gpu-operator", "chart": "nvidia/gpu-operator", "version": "v26.7.0",
               "namespace": "gpu-operator",
               "upgrade_from": list(sources.GPU_OPERATOR_UPGRADE_FROM)}
    ctx = {"kubernetes_release": release, "kubernetes_release_listed": deployed}
    ctx["kubernetes_release_at"] = ansible_eval(_role_vars()["kubernetes_release_at"], **ctx)
    runs = holds(task["when"], **ctx)
    assert runs is bool(deployed)
    if runs:
        passed, said = run_assert(task, **ctx)
        assert passed is ok
        line = deployed[0]["chart"].removeprefix("gpu-operator-v").rsplit(".", 1)[0]
        assert f"gpu-operator {line} is deployed" in said and "26.3 or 26.7" in said
    gv = sources.site_vars(load(EXAMPLE).site.software)
    assert gv["kubernetes_gpu_operator_upgrade_from"] == ["26.3", "26.7"]
    assert gv["kubernetes_network_operator_upgrade_from"] == ["26.4", "26.7"]
    for name in ("Install the GPU Operator, keeping the host-installed driver and toolkit",
                 "Install the Network Operator for RoCE"):
        assert "upgrade_from" in role_task("kubernetes", name)["vars"]["kubernetes_release"]
