"""Kubernetes that forms, read from the role itself: a stable controlPlaneEndpoint (kube-vip
VIP or the site's load balancer), the rendered join configuration used by `kubeadm join
--config` (secrets in a 0600 file, never argv), swap off, Helm, pinned CNIs and operators,
and handler orders that work (br_netfilter before sysctl, openibd before RoCE QoS)."""

from __future__ import annotations

import base64
import re
import subprocess
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import render, sources
from provisioner.inventory import load
from provisioner.inventory.software_models import Kubernetes
from tests.conftest import (
    EXAMPLE,
    FIXTURES,
    ROOT,
    ansible_eval,
    edited_example,
    holds,
    role_task,
    role_template,
)

ROLE = ROOT / "roles" / "kubernetes"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_every_supported_cni_is_pinned_and_has_a_source():
    cnis = typing.get_args(Kubernetes.model_fields["cni"].annotation)
    assert set(cnis) == set(sources.CNI_RELEASES)
    for cni in cnis:
        assert all(version and first <= last
                   for version, first, last in sources.CNI_RELEASES[cni])
        # a manifest, or (cilium) a chart installed by the role
        assert cni in sources.CNI_MANIFESTS or cni == "cilium"
    tasks = (ROLE / "tasks/main.yml").read_text()
    assert "chart: cilium/cilium" in tasks and 'version: "{{ kubernetes_cni_version }}"' in tasks


def test_each_cni_renders_a_pinned_version(tmp_path):
    for cni in ("calico", "cilium", "flannel"):
        site = tmp_path / cni
        site.mkdir()
        text = (FIXTURES / "sites" / "dgx_h100.yaml").read_text().replace(
            'kubernetes: {version: "1.31.4"}', f'kubernetes: {{version: "1.31.4", cni: {cni}}}')
        (site / "s.yaml").write_text(text)
        out = render.render(load(site / "s.yaml"), tmp_path / f"o-{cni}").out
        gv = _yaml(out / "inventory/group_vars/all.yml")
        assert gv["kubernetes_cni_version"] == sources.cni_release(cni, "1.31.4")[0]
        if cni != "cilium":
            assert gv["kubernetes_cni_version"] in gv["kubernetes_cni_manifest_url"]


def test_flannel_takes_the_sites_pod_network():
    """kube-flannel.yml ships 10.244.0.0/16: a site with its own pod CIDR gets it in
    net-conf.json before the manifest is applied (Python's re, as Ansible's replace uses)."""
    names = [t["name"] for t in _yaml(ROLE / "tasks/main.yml")]
    assert names.index("Fetch the pinned CNI manifest") < names.index(
        "Give flannel the site's pod network") < names.index(
        "Compare the CNI manifest with the cluster")
    task = role_task("kubernetes", "Give flannel the site's pod network")
    replace = task["ansible.builtin.replace"]
    shipped = ('  net-conf.json: |\n    {\n      "Network": "10.244.0.0/16",\n'
               '      "EnableNFTables": false,\n      "Backend": {\n        "Type": "vxlan"\n'
               '      }\n    }\n')
    new = ansible_eval(replace["replace"], kubernetes_pod_cidr="10.32.0.0/12")
    edited = re.sub(replace["regexp"], new, shipped)
    assert '"Network": "10.32.0.0/12",' in edited and "10.244" not in edited
    assert re.sub(replace["regexp"], new, edited) == edited  # a second run changes nothing
    assert "kubernetes_cni == 'flannel'" in task["when"]


def test_operators_are_pinned(tmp_path):
    for version in (sources.GPU_OPERATOR_CHART_VERSION, sources.NETWORK_OPERATOR_CHART_VERSION):
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", version)
    assert sources.NETWORK_OPERATOR_COMPONENT_VERSION.endswith(
        sources.NETWORK_OPERATOR_CHART_VERSION)
    # The role holds no version of its own: render writes the pinned ones, and
    # render --artifacts lists the same charts at the same versions.
    d = _yaml(ROLE / "defaults/main.yml")
    assert d["kubernetes_gpu_operator_chart_version"] == ""
    loaded = load(EXAMPLE)
    out = render.render(loaded, tmp_path / "o").out
    gv = _yaml(out / "inventory/group_vars/all.yml")
    charts = {i["name"]: i["version"] for i in render.artifacts(loaded)
              if i["kind"] == "helm-chart"}
    assert charts == {
        "nvidia/gpu-operator": gv["kubernetes_gpu_operator_chart_version"],
        "nvidia/network-operator": gv["kubernetes_network_operator_chart_version"]}
    assert all(charts.values())
    # an air-gapped site mirrors what each chart and the CNI manifest deploy, at the same
    # versions (their image: lines), not only the charts
    sets = {i["name"]: i["version"] for i in render.artifacts(loaded)
            if i["kind"] == "image-set"}
    for chart, version in charts.items():
        assert sets[f"the images the {chart} chart deploys (`helm show values`: each "
                    "component's repository, image and version)"] == version
    assert sets["the images the calico manifest names (its image: lines)"] == \
        sources.cni_release("calico", loaded.site.software.kubernetes.version)[0]
    release = {t["name"]: t for t in _yaml(ROLE / "tasks/helm_release.yml")}
    argv = ansible_eval(next(t for n, t in release.items() if n.startswith(
        "Install or upgrade"))["ansible.builtin.command"]["argv"], **_release_ctx())
    assert argv[argv.index("--version") + 1] == "v25.3.0"


@pytest.mark.parametrize(("version", "tag"), [
    ("1.24.17", "3.7"), ("1.25.16", "3.8"), ("1.26.0", "3.9"), ("1.30.9", "3.9"),
    ("1.31.4", "3.10"), ("1.33.2", "3.10"), ("1.34.1", "3.10.1"),
    ("1.35.0", "3.10.1"), ("1.36.0", "3.10.2")])
def test_containerds_pause_image_is_the_one_kubeadm_pulls(tmp_path, version, tag):
    """kubeadm's preflight pulls its own pause image; containerd's sandbox image, and the
    image render --artifacts tells an air-gapped site to mirror, are the same one."""
    loaded = load(edited_example(tmp_path, 'version: "1.35.8"', f'version: "{version}"'))
    gv = _yaml(render.render(loaded, tmp_path / "o").out / "inventory/group_vars/all.yml")
    assert gv["container_runtime_sandbox_image"] == f"registry.k8s.io/pause:{tag}"
    images = {i["name"]: i["version"] for i in render.artifacts(loaded) if i["kind"] == "image"}
    assert images["registry.k8s.io/pause"] == tag


def test_vip_is_the_control_plane_endpoint_served_by_kube_vip(tmp_path):
    out = render.render(load(FIXTURES / "sites" / "gb200.yaml"), tmp_path / "o").out
    gv = _yaml(out / "inventory/group_vars/all.yml")
    assert gv["kubernetes_control_plane_endpoint"] == "10.1.0.5:6443"
    init = role_template("kubernetes", "kubeadm-init.yaml.j2", **gv, inventory_hostname="cp01",
                     kubernetes_kubeadm_api="kubeadm.k8s.io/v1beta4",
                     kubernetes_advertise_address="10.1.0.21")
    docs = list(yaml.safe_load_all(init))
    cluster = next(d for d in docs if d["kind"] == "ClusterConfiguration")
    assert cluster["controlPlaneEndpoint"] == "10.1.0.5:6443"
    # init's own bootstrap token lives as long as the role's join tokens, not kubeadm's 24 h
    init_doc = next(d for d in docs if d["kind"] == "InitConfiguration")
    assert init_doc["bootstrapTokens"] == [{"ttl": "2h0m0s"}]
    assert cluster["apiServer"]["certSANs"] == ["10.1.0.5"]
    pod = yaml.safe_load(role_template("kubernetes", "kube-vip.yaml.j2", **gv,
                                   kubernetes_vip_interface="eno1",
                                   kubernetes_config_dir="/etc/kubernetes",
                                   kubernetes_kube_vip_kubeconfig="super-admin.conf"))
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["address"] == "10.1.0.5" and env["cp_enable"] == "true"
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/super-admin.conf"
    # a renewed admin.conf changes the manifest, so the kubelet restarts kube-vip with it
    assert pod["metadata"]["annotations"] == {"provisioner/admin-conf-sha1": "none"}
    renewed = yaml.safe_load(role_template(
        "kubernetes", "kube-vip.yaml.j2", **gv, kubernetes_vip_interface="eno1",
        kubernetes_config_dir="/etc/kubernetes", kubernetes_kube_vip_kubeconfig="admin.conf",
        kubernetes_kube_vip_conf_checksum="3f7a" * 10))
    assert renewed["metadata"]["annotations"] == {"provisioner/admin-conf-sha1": "3f7a" * 10}
    # every manifest write carries the checksum of admin.conf as it is then: the writes
    # after the join read it again, so the next run (which reads it before) writes the same
    by_name = {t["name"]: t for t in _yaml(ROLE / "tasks/main.yml")}
    reads = {"Serve the control-plane VIP with kube-vip on the first control plane":
             "kubernetes_admin_conf",
             "Point kube-vip at admin.conf once the cluster is initialised":
             "kubernetes_admin_conf_joined",
             "Serve the control-plane VIP with kube-vip on the further control planes":
             "kubernetes_admin_conf_joined"}
    for task, stat in reads.items():
        checksum = by_name[task]["vars"]["kubernetes_kube_vip_conf_checksum"]
        assert ansible_eval(checksum, **{stat: {"stat": {"exists": True, "checksum": "ab"}}}) \
            == "ab"
    assert by_name["Read admin.conf for kube-vip's manifest"]["ansible.builtin.stat"][
        "path"] == "{{ kubernetes_config_dir }}/admin.conf"
    tasks = [t["name"] for t in _yaml(ROLE / "tasks/main.yml")]
    assert tasks.index("Serve the control-plane VIP with kube-vip on the first control plane") \
        < tasks.index("Initialise the cluster and join the further control planes and workers") \
        < tasks.index("Point kube-vip at admin.conf once the cluster is initialised")


def test_load_balancer_endpoint_and_ha_without_one_is_refused(tmp_path):
    from provisioner.inventory.checks import check
    text = (FIXTURES / "sites" / "gb200.yaml").read_text()
    lb = tmp_path / "lb.yaml"
    lb.write_text(text.replace("vip: 10.1.0.5", "load_balancer: api.site.internal"))
    out = render.render(load(lb), tmp_path / "o").out
    assert _yaml(out / "inventory/group_vars/all.yml")[
        "kubernetes_control_plane_endpoint"] == "api.site.internal:6443"
    bare = tmp_path / "bare.yaml"
    bare.write_text(text.replace(", vip: 10.1.0.5", ""))
    hit = [f for f in check(load(bare)) if f.code == "kubernetes-no-endpoint"]
    assert hit and hit[0].severity.value == "error"


def test_vip_outside_management_or_on_a_node_is_refused(tmp_path):
    from provisioner.inventory.checks import check
    text = (FIXTURES / "sites" / "gb200.yaml").read_text()
    codes = {}
    for name, vip in (("ok", "10.1.0.5"), ("outside", "10.9.0.5"), ("taken", "10.1.0.11")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text.replace("vip: 10.1.0.5", f"vip: {vip}"))
        codes[name] = {f.code for f in check(load(path)) if f.severity.value == "error"}
    assert not codes["ok"] & {"vip-outside-management", "vip-taken"}
    assert "vip-outside-management" in codes["outside"]
    assert "vip-taken" in codes["taken"]
    # kube-vip bootstraps from super-admin.conf, which kubeadm writes from 1.29 on
    for version, refused in (("1.28.15", True), ("1.29.0", False)):
        path = tmp_path / f"k{version}.yaml"
        path.write_text(text.replace('version: "1.31.4"', f'version: "{version}"'))
        hit = [f for f in check(load(path)) if f.code == "vip-needs-kubernetes-1-29"]
        assert bool(hit) is refused
        assert not hit or (hit[0].severity.value == "error"
                           and "load_balancer" in (hit[0].hint or ""))
    lb = tmp_path / "lb128.yaml"
    lb.write_text(text.replace('version: "1.31.4"', 'version: "1.28.15"')
                  .replace("vip: 10.1.0.5", "load_balancer: api.site.internal"))
    assert not [f for f in check(load(lb)) if f.code == "vip-needs-kubernetes-1-29"]


def test_kube_vip_announces_on_the_nic_holding_the_management_address():
    """On a GPU server whose default route leaves through another NIC (storage, a bond, an
    uplink), the VIP is announced where the management address is."""
    expr = _yaml(ROLE / "defaults/main.yml")["kubernetes_vip_interface"]
    facts = {"default_ipv4": {"interface": "ens2f0", "address": "10.3.0.21"},
             "interfaces": ["lo", "eno1", "ens2f0"], "kernel": "6.8.0",
             "eno1": {"device": "eno1", "ipv4": {"address": "10.1.0.21"}},
             "ens2f0": {"device": "ens2f0", "ipv4": {"address": "10.3.0.21"}},
             "lo": {"device": "lo", "ipv4": {"address": "127.0.0.1"}}}

    def nic(address: str) -> str:
        return str(ansible_eval(expr, ansible_facts=facts, kubernetes_advertise_address=address))

    assert nic("10.1.0.21") == "eno1"
    assert nic("10.9.9.9") == "ens2f0"  # no NIC holds it: the default route's


def test_a_node_is_tainted_only_when_a_taint_is_missing():
    """kubectl taint --overwrite reports "modified" every time: the role reads the node's
    taints and sets them only when one is missing, so a second run changes nothing."""
    read = role_task("kubernetes", "Read the node's taints", "tasks/labels.yml")
    assert read["changed_when"] is False
    assert read["ansible.builtin.command"]["argv"][-1] == (
        'jsonpath={range .spec.taints[*]}{.key}={.value}:{.effect}{"\\n"}{end}')
    taint = role_task("kubernetes", "Taint the node by building block", "tasks/labels.yml")
    want = ["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"]

    def taints(lines: list[str]) -> bool:
        return holds(taint["when"], kubernetes_node_taints=want,
                     kubernetes_taints_now={"stdout_lines": lines})

    assert taints([]) is True
    assert taints(["nvidia.com/gpu=present:NoSchedule"]) is True
    assert taints(["nvidia.com/gpu=present:NoSchedule", "dedicated=:NoExecute"]) is False
    assert taints(["nvidia.com/gpu=other:NoSchedule", "dedicated=:NoExecute"]) is True


def test_a_node_kubeadm_left_part_way_is_refused_not_taken_for_done():
    """kubeadm writes admin.conf and kubelet.conf before it has finished: a rerun after a
    stopped init or join asks the cluster when the role's mark is missing, and refuses a
    node kubeadm left part way with what to do (it never resets one itself)."""
    listed = _yaml(ROLE / "tasks/join.yml")
    block = next(t for t in listed if "block" in t)
    names = [t["name"] for t in listed]
    assert names.index("Refuse a first control plane that kubeadm init left part way") \
        < names.index("Initialise the first control plane") \
        < names.index("Mark that kubeadm init finished here") \
        < names.index("Refuse a node that kubeadm join left part way") \
        < names.index(block["name"]) < names.index("Mark that kubeadm join finished here")
    tasks = {t["name"]: t for t in listed}
    # the init is still skipped on admin.conf: a node that has it passed the check above
    assert tasks["Initialise the first control plane"]["ansible.builtin.command"][
        "creates"] == "{{ kubernetes_config_dir }}/admin.conf"
    ask = tasks["Ask the cluster whether kubeadm init finished (admin.conf without the mark)"]
    assert "configmap/kubeadm-config" in ask["ansible.builtin.command"]["argv"]
    assert "not kubernetes_done.stat.exists" in ask["when"]
    [init_ok] = tasks["Refuse a first control plane that kubeadm init left part way"][
        "ansible.builtin.assert"]["that"]
    assert holds(init_ok, kubernetes_init_found={"rc": 0}) is True
    assert holds(init_ok, kubernetes_init_found={"rc": 1}) is False
    refuse = tasks["Refuse a node that kubeadm join left part way"]["ansible.builtin.assert"]
    assert "kubeadm reset -f" in refuse["fail_msg"]

    def joined(rc: int, labels: str, control_plane: bool) -> bool:
        return all(holds(c, kubernetes_join_found={"rc": rc, "stdout": labels},
                         kubernetes_is_control_plane=control_plane) for c in refuse["that"])

    cp_labels = '{"node-role.kubernetes.io/control-plane":"","kubernetes.io/os":"linux"}'
    assert joined(0, cp_labels, True) and joined(0, '{"kubernetes.io/os":"linux"}', False)
    # the etcd member add or the labelling never happened: the control plane stopped part way
    assert not joined(0, '{"kubernetes.io/os":"linux"}', True)
    assert not joined(1, "", False)  # the cluster does not know the node
    assert all(tasks[n]["tags"] == ["needs_cluster"] for n in (
        "Mark that kubeadm init finished here", "Mark that kubeadm join finished here"))
    # kubeadm reset takes kubeadm's files but not the mark: the mark goes with them
    forget = tasks["Forget the mark where kubeadm's own file is gone (kubeadm reset)"]
    assert names.index("Check whether the node has joined") < names.index(forget["name"]) \
        < names.index("Ask the cluster whether kubeadm init finished (admin.conf without the "
                      "mark)")
    assert forget["ansible.builtin.file"]["state"] == "absent"

    def forgets(first: bool, mark: bool, conf: bool) -> bool:
        skipped = {"skipped": True}
        return holds(forget["when"], kubernetes_is_first=first,
                     kubernetes_done={"stat": {"exists": mark}},
                     kubernetes_init_conf={"stat": {"exists": conf}} if first else skipped,
                     kubernetes_kubelet_conf={"stat": {"exists": conf}})

    assert forgets(True, True, False) and forgets(False, True, False)
    assert not forgets(True, True, True) and not forgets(False, True, True)
    assert not forgets(False, False, False)


def _join_context(cp: bool, secrets: bool) -> dict[str, Any]:
    return {"kubernetes_kubeadm_api": "kubeadm.k8s.io/v1beta4", "inventory_hostname": "n1",
            "kubernetes_is_control_plane": cp, "kubernetes_advertise_address": "10.0.0.2",
            "kubernetes_join_with_secrets": secrets, "kubernetes_join_endpoint": "10.0.0.5:6443",
            "kubernetes_join_token": "abcdef.0123456789abcdef",
            "kubernetes_join_ca_hash": "sha256:00", "kubernetes_certificate_key": "k" * 64}


def test_join_uses_the_rendered_configuration_and_no_secret_in_argv():
    cp = yaml.safe_load(role_template("kubernetes", "kubeadm-join.yaml.j2",
                                  **_join_context(cp=True, secrets=True)))
    assert cp["discovery"]["bootstrapToken"]["token"] == "abcdef.0123456789abcdef"
    assert cp["controlPlane"]["certificateKey"] == "k" * 64
    worker = yaml.safe_load(role_template("kubernetes", "kubeadm-join.yaml.j2",
                                      **_join_context(cp=False, secrets=True)))
    assert "controlPlane" not in worker and worker["discovery"]["bootstrapToken"]["token"]
    on_disk = yaml.safe_load(role_template("kubernetes", "kubeadm-join.yaml.j2",
                                       **_join_context(cp=True, secrets=False)))
    assert "discovery" not in on_disk and "certificateKey" not in on_disk["controlPlane"]
    listed = _yaml(ROLE / "tasks/join.yml")
    block = next(t for t in listed if "block" in t)
    # the file with the secrets goes even when a join fails (always:), and so does the token
    assert [t["name"] for t in block["always"]] == [
        "Remove the join configuration (it holds the bootstrap token and certificate key)",
        "Delete the bootstrap token the joins used"]
    assert all(t["no_log"] is True for t in block["always"])
    join = {t["name"]: t for t in listed + block["block"] + block["always"] if "block" not in t}
    one_cp = {t["name"]: t for t in _yaml(ROLE / "tasks/join_control_plane.yml")}
    cp_join = one_cp["Join a further control plane: {{ kubernetes_joining }}"]
    for task, conf in ((cp_join, "kubernetes_joining_config_dir"),
                       (join["Join the workers"], "kubernetes_config_dir")):
        cmd = task["ansible.builtin.command"]["cmd"]
        assert cmd == "kubeadm join --config {{ " + conf + " }}/kubeadm-join.yaml"
        assert task["no_log"] is True
    # the joining node's own config dir, not the looping host's
    assert "hostvars[kubernetes_joining].kubernetes_config_dir" in \
        cp_join["vars"]["kubernetes_joining_config_dir"]
    # each control plane is a new etcd member: they join one by one, from one host's loop,
    # which a failure stops (a throttled task would run on the next host anyway)
    loop = join["Join further control planes, one at a time, none after one that failed"]
    assert loop["run_once"] is True and loop["loop_control"]["loop_var"] == "kubernetes_joining"
    assert loop["ansible.builtin.include_tasks"] == "join_control_plane.yml"
    assert ansible_eval(loop["loop"], ansible_play_hosts=["cp01", "cp02", "dgx01", "cp03"],
                        groups={"kube_control_plane": ["cp01", "cp02", "cp03"]},
                        kubernetes_first_control_plane="cp01") == ["cp02", "cp03"]
    assert cp_join["delegate_to"] == "{{ kubernetes_joining }}"
    stop = one_cp["Stop where kubeadm join failed, with what it said: {{ kubernetes_joining }}"]
    said = ansible_eval(_yaml(ROLE / "vars/main.yml")["kubernetes_kubeadm_failure"],
                        inventory_hostname="cp01",
                        **{k: ansible_eval(v, kubernetes_joining="cp03",
                                           kubernetes_cp_join={"rc": 1, "stderr_lines": [
                                               "error: etcd cluster is not healthy"]})
                           for k, v in stop["vars"].items()})
    assert said.startswith("kubeadm join failed on cp03 (exit 1)") and "etcd" in said
    assert "throttle" not in join["Join the workers"]
    write = join["Write the join configuration with the bootstrap token and certificate key"]
    assert write["ansible.builtin.template"]["mode"] == "0600" and write["no_log"] is True
    # what a task runs, writes or registers (not its name, nor an assert's message)
    carrying = [t for t in [*join.values(), *one_cp.values()]
                if "ansible.builtin.assert" not in t and re.search(
        r"kubeadm-join\.yaml|join_command|upload-certs|token create|kubeadm init",
        str({k: v for k, v in t.items() if k != "name"}))]
    assert len(carrying) == 7 and all(t.get("no_log") is True for t in carrying)


def test_swap_off_now_and_across_reboots():
    assert {"name": "Swap off, now and at every boot",
            "ansible.builtin.import_tasks": "swap.yml"} in _yaml(ROLE / "tasks/main.yml")
    tasks = {t["name"]: t for t in _yaml(ROLE / "tasks/swap.yml")}
    assert tasks["Turn swap off now"]["ansible.builtin.command"] == "swapoff -a"
    rule = tasks["Keep swap off across reboots"]["ansible.builtin.replace"]
    fstab = ("UUID=1 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n"
             "# /old none swap sw 0 0\n")
    py_repl = rule["replace"].replace("\\1", "\\g<1>")
    once = re.sub(rule["regexp"], py_repl, fstab, flags=re.M)
    assert "# /swap.img none swap sw 0 0" in once and "UUID=1 / ext4" in once
    assert re.sub(rule["regexp"], py_repl, once, flags=re.M) == once  # idempotent


def test_helm_is_installed_where_charts_are_at_its_pinned_version(tmp_path: Path) -> None:
    tasks = {t["name"]: t for t in _yaml(ROLE / "tasks/main.yml")}
    install = tasks["Install Helm on the first control plane"]["ansible.builtin.apt"]
    # render pins it (an unpinned helm was the repository's newest: Helm 4 on a new
    # cluster, whatever an old one had), and render --artifacts lists the same version
    loaded = load(EXAMPLE)
    gv = _yaml(render.render(loaded, tmp_path / "o").out / "inventory/group_vars/all.yml")
    assert gv["kubernetes_helm_version"] == sources.HELM_VERSION
    assert ("helm", sources.HELM_VERSION) in {
        (i["name"], i["version"]) for i in render.artifacts(loaded) if i["kind"] == "package"}
    assert ansible_eval(install["name"], kubernetes_helm_version=gv["kubernetes_helm_version"]
                        ) == f"helm={sources.HELM_VERSION}-*"
    assert ansible_eval(install["name"], kubernetes_helm_version="") == "helm"
    # a newer Helm already there (Helm 4, an admin's) is kept and said, not downgraded (apt
    # refuses a downgrade at every run) nor reinstalled
    newer = _yaml(ROLE / "vars/main.yml")["kubernetes_helm_newer"]
    for installed, rc, is_newer in (("4.3.0-1", 0, True), ("3.22.1-1", 0, True),
                                    ("3.22.0-1", 0, False), ("3.19.2-1", 0, False),
                                    ("", 1, False)):
        assert ansible_eval(newer, kubernetes_helm_version=sources.HELM_VERSION,
                            kubernetes_helm_installed={"rc": rc, "stdout": installed}
                            ) is is_newer, installed
    said = tasks["Say so when the first control plane keeps a Helm newer than the pin"]
    assert "kubernetes_helm_newer" in said["when"]
    assert "not kubernetes_helm_newer" in tasks["Install Helm on the first control plane"][
        "when"]
    names = list(tasks)
    # a hand-written helm-stable-debian.list is set aside on the host helm runs on, before
    # the role's own entry is added
    aside = tasks["Set aside other entries for the helm repository (a duplicate stops apt)"]
    assert aside["ansible.builtin.include_role"]["tasks_from"] == "other_sources.yml"
    assert aside["ansible.builtin.include_role"]["apply"]["delegate_to"] == \
        tasks["Add the Helm package repository"]["delegate_to"]
    assert aside["run_once"] is True
    assert names.index(aside["name"]) < names.index("Add the Helm package repository") \
        < names.index("Install Helm on the first control plane")
    assert names.index("Install Helm on the first control plane") < names.index(
        "Install the GPU Operator, keeping the host-installed driver and toolkit")
    # a chart pinned after the repository was added is found: the index is read again
    # before any release, every run, for the repositories the releases come from
    update = "Read the chart repositories' indexes again"
    assert names.index("Add the chart repositories Helm lacks") < names.index(update) \
        < names.index("Install Cilium from its pinned chart")
    argv = tasks[update]["ansible.builtin.command"]["argv"].strip()
    repos = [{"name": "nvidia", "url": "u"}, {"name": "cilium", "url": "v"}]
    assert ansible_eval(argv, kubernetes_chart_repos=repos) == [
        "helm", "repo", "update", "nvidia", "cilium"]
    assert tasks[update]["changed_when"] is False


def test_nic_cluster_policy_for_roce_sites(tmp_path):
    out = render.render(load(EXAMPLE), tmp_path / "o").out
    gv = _yaml(out / "inventory/group_vars/all.yml")
    policy = yaml.safe_load(role_template(
        "kubernetes", "nic-cluster-policy.yaml.j2", **gv, kubernetes_roce_interfaces=[]))
    assert policy["kind"] == "NicClusterPolicy"
    plugin = policy["spec"]["rdmaSharedDevicePlugin"]
    assert plugin["version"] == sources.NETWORK_OPERATOR_COMPONENT_VERSION
    assert plugin["repository"] == sources.NETWORK_OPERATOR_REPOSITORY
    assert "ofedDriver" not in policy["spec"]  # DOCA is on the host
    config = __import__("json").loads(policy["spec"]["rdmaSharedDevicePlugin"]["config"])
    assert config["configList"][0]["selectors"] == {"vendors": ["15b3"]}


def test_handlers_run_in_an_order_that_works():
    base = [h["name"] for h in _yaml(ROOT / "roles/base_os/handlers/main.yml")]
    assert base.index("Load kernel modules") < base.index("Apply kernel parameters")
    roce = [h["name"] for h in _yaml(ROOT / "roles/roce_host/handlers/main.yml")]
    assert roce.index("Restart openibd") < roce.index("Apply RoCE QoS")
    doca = next(t for t in _yaml(ROOT / "roles/roce_host/tasks/main.yml")
                if t["name"] == "Install DOCA (MOFED)")
    assert doca["notify"][0] == "Restart openibd"  # or the reboot in its place (below)
    assert "roce_host_install_doca" in doca["when"]


def test_one_node_feature_discovery_when_both_operators_run():
    """The GPU Operator deploys NFD; the Network Operator's own is switched off then."""
    tasks = {t["name"]: t for t in _yaml(ROLE / "tasks/main.yml")}
    gpu = tasks["Install the GPU Operator, keeping the host-installed driver and toolkit"]
    net = tasks["Install the Network Operator for RoCE"]
    assert "nfd" not in _gpu_operator_values(gpu, host_dcgm=True)
    for gpu_operator, enabled in ((True, False), (False, True)):
        assert ansible_eval(net["vars"]["kubernetes_release"]["values"]["nfd"]["enabled"],
                            kubernetes_gpu_operator=gpu_operator) is enabled


def _gpu_operator_values(task: dict[str, Any], *, host_dcgm: bool) -> dict[str, Any]:
    """The GPU Operator's values as the play evaluates them."""
    d = _yaml(ROLE / "defaults/main.yml")
    return dict(ansible_eval(
        task["vars"]["kubernetes_release"]["values"],
        kubernetes_gpu_operator_host_driver=True, kubernetes_gpu_operator_host_dcgm=host_dcgm,
        kubernetes_gpu_operator_host_dcgm_port=d["kubernetes_gpu_operator_host_dcgm_port"]))


def test_the_gpu_operators_exporter_reads_the_host_engine_the_dcgm_role_runs():
    """One DCGM host engine per GPU node: the dcgm role starts nvidia-dcgm (nv-hostengine on
    127.0.0.1:5555), so the GPU Operator's exporter connects to it over the host network
    instead of starting an embedded engine with its own inventory and cache."""
    d = _yaml(ROLE / "defaults/main.yml")
    assert d["kubernetes_gpu_operator_host_dcgm"] is True
    assert d["kubernetes_gpu_operator_host_dcgm_port"] == 5555
    started = role_task("dcgm", "Start the DCGM host engine (again where it runs replaced "
                        "libraries), enabled at boot")
    assert started["ansible.builtin.systemd_service"]["name"] == "nvidia-dcgm"
    assert started["ansible.builtin.systemd_service"]["enabled"] is True
    gpu = role_task("kubernetes", "Install the GPU Operator, keeping the host-installed "
                    "driver and toolkit")
    host_driver = {"driver": {"enabled": False}, "toolkit": {"enabled": False}}
    assert _gpu_operator_values(gpu, host_dcgm=True) == {
        **host_driver, "dcgm": {"enabled": False},
        # "localhost" is the node's own only on the host network, which the operator no
        # longer turns on for an engine named in env (from 25.10)
        "dcgmExporter": {"hostNetwork": True,
                         "env": [{"name": "DCGM_REMOTE_HOSTENGINE_INFO",
                                  "value": "localhost:5555"}]}}
    assert _gpu_operator_values(gpu, host_dcgm=False) == host_driver


def _release_ctx(**release: Any) -> dict[str, Any]:
    wanted = {"driver": {"enabled": False}, "dcgm": {"enabled": False}}
    return {"kubernetes_release": {"name": "gpu-operator", "chart": "nvidia/gpu-operator",
                                   "version": "v25.3.0", "namespace": "gpu-operator",
                                   "values": wanted, **release},
            "kubernetes_release_values_file": "/etc/kubernetes/helm-gpu-operator-values.yaml",
            "kubernetes_config_dir": "/etc/kubernetes"}


def test_a_release_moves_when_its_chart_or_its_values_differ_or_it_failed():
    """helm upgrade runs when the deployed chart is not the pinned one, or the values it was
    given (helm get values) are not the site's: a setting added later (the DCGM host engine
    above) reaches a cluster already at the pinned chart, and a second run changes nothing.
    A release whose last helm run failed is upgraded again at the same chart and values
    (before, the run called it done); one a killed run left pending is refused with the way
    out; the GPU Operator's upgrade turns helm's OpenAPI check off for its CRD hook."""
    tasks = {t["name"]: t for t in _yaml(ROLE / "tasks/helm_release.yml")}
    upgrade = next(t for n, t in tasks.items() if n.startswith("Install or upgrade"))
    ctx = _release_ctx()
    argv = ansible_eval(upgrade["ansible.builtin.command"]["argv"], **ctx)
    assert "--values" in argv and not [a for a in argv if "--set" in str(a)]
    assert "--disable-openapi-validation" not in argv
    operator = ansible_eval(upgrade["ansible.builtin.command"]["argv"], **_release_ctx(
        extra_args=["--disable-openapi-validation"]))
    assert operator == [*argv, "--disable-openapi-validation"]
    main = {t["name"]: t for t in _yaml(ROLE / "tasks/main.yml")}
    assert main["Install the GPU Operator, keeping the host-installed driver and toolkit"][
        "vars"]["kubernetes_release"]["extra_args"] == ["--disable-openapi-validation"]
    listed = next(t for n, t in tasks.items() if n.startswith("Read the deployed release"))
    assert "--all" in listed["ansible.builtin.command"]["argv"]

    role_vars = _yaml(ROLE / "vars/main.yml")

    def listed(deployed: dict[str, str]) -> Any:
        """kubernetes_release_listed (vars/main.yml), as the play computes it."""
        return ansible_eval(role_vars["kubernetes_release_listed"],
                            kubernetes_release_deployed=deployed)

    def moves(chart: str, given: str, status: str = "deployed") -> bool:
        deployed = {"stdout": f'[{{"chart": "{chart}", "status": "{status}"}}]'}
        return holds(upgrade["when"], **ctx, kubernetes_release_listed=listed(deployed),
                     kubernetes_release_values_deployed={"stdout": given})

    same = '{"dcgm": {"enabled": false}, "driver": {"enabled": false}}'
    assert not moves("gpu-operator-v25.3.0", same)
    assert moves("gpu-operator-v24.9.2", same)
    assert moves("gpu-operator-v25.3.0", '{"driver": {"enabled": false}}')  # an older run's
    assert moves("gpu-operator-v25.3.0", "")  # helm get values failed: not installed
    assert moves("gpu-operator-v25.3.0", same, status="failed")
    pending = next(t for n, t in tasks.items() if n.startswith("Refuse a release"))
    for status, refused in (("pending-upgrade", True), ("pending-install", True),
                            ("deployed", False), ("failed", False)):
        deployed = {"stdout": f'[{{"chart": "gpu-operator-v25.3.0", "status": "{status}"}}]'}
        status_var = ansible_eval(pending["vars"]["kubernetes_release_status"],
                                  kubernetes_release_listed=listed(deployed))
        assert holds(pending["ansible.builtin.assert"]["that"],
                     kubernetes_release_status=status_var) is not refused
    assert "helm rollback gpu-operator -n gpu-operator" in " ".join(ansible_eval(
        pending["ansible.builtin.assert"]["fail_msg"], **ctx,
        kubernetes_release_status="pending-upgrade").split())
    written = next(t for n, t in tasks.items() if n.startswith("Write the values file"))
    assert written["ansible.builtin.copy"]["mode"] == "0600"
    assert ansible_eval(written["ansible.builtin.copy"]["dest"], **ctx) in argv


@pytest.mark.parametrize("api", ["kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta3"])
def test_the_kubelet_node_ip_is_the_management_address_and_calico_takes_it(api):
    """On a host with management, storage and RoCE NICs the kubelet and Calico must not pick
    whichever address comes first: node-ip is the management address (v1beta4 takes a list
    of name/value arguments, v1beta3 a map), and Calico autodetects the InternalIP."""
    ctx = {**_join_context(cp=True, secrets=False), "kubernetes_kubeadm_api": api,
           "kubernetes_advertise_address": "10.0.0.21"}
    init = next(d for d in yaml.safe_load_all(role_template(
        "kubernetes", "kubeadm-init.yaml.j2", **ctx, kubernetes_control_plane_endpoint="x",
        kubernetes_version="1.31.4", kubernetes_image_repository="", kubernetes_vip="",
        kubernetes_pod_cidr="10.244.0.0/16", kubernetes_service_cidr="10.96.0.0/12"))
        if d and d["kind"] == "InitConfiguration")
    join = yaml.safe_load(role_template("kubernetes", "kubeadm-join.yaml.j2", **ctx))
    want = ([{"name": "node-ip", "value": "10.0.0.21"}] if api.endswith("v1beta4")
            else {"node-ip": "10.0.0.21"})
    assert init["nodeRegistration"]["kubeletExtraArgs"] == want
    assert join["nodeRegistration"]["kubeletExtraArgs"] == want
    tasks = {t["name"]: t for t in _yaml(ROLE / "tasks/main.yml")}
    calico = tasks["Calico takes each node's Kubernetes InternalIP (the kubelet's node-ip)"]
    assert "IP_AUTODETECTION_METHOD=kubernetes-internal-ip" in \
        calico["ansible.builtin.command"]
    assert "kubernetes_cni == 'calico'" in calico["when"]


def test_a_control_plane_with_the_worker_role_gets_no_control_plane_taint():
    """kubeadm taints a control plane NoSchedule unless nodeRegistration.taints is an
    empty list: one the inventory also makes a worker is rendered with `taints: []`, in
    init and join alike; a control plane alone and a worker keep kubeadm's default."""
    from tests.conftest import ansible_eval
    groups = {"kube_control_plane": ["cp01", "n1"], "kube_node": ["n1", "w1"]}
    expr = (ROLE / "vars/main.yml").read_text()
    schedulable = yaml.safe_load(expr)["kubernetes_cp_schedulable"]
    for host, cp, want in (("n1", True, True), ("cp01", True, False), ("w1", False, False)):
        got = ansible_eval(schedulable, inventory_hostname=host, groups=groups,
                           kubernetes_is_control_plane=cp)
        assert str(got).strip() == str(want), host
    ctx = {**_join_context(cp=True, secrets=False), "kubernetes_cp_schedulable": True}
    join = yaml.safe_load(role_template("kubernetes", "kubeadm-join.yaml.j2", **ctx))
    init = next(d for d in yaml.safe_load_all(role_template(
        "kubernetes", "kubeadm-init.yaml.j2", **ctx, kubernetes_control_plane_endpoint="x",
        kubernetes_version="1.31.4", kubernetes_image_repository="", kubernetes_vip="",
        kubernetes_pod_cidr="10.244.0.0/16", kubernetes_service_cidr="10.96.0.0/12"))
        if d and d["kind"] == "InitConfiguration")
    assert join["nodeRegistration"]["taints"] == [] == init["nodeRegistration"]["taints"]
    alone = yaml.safe_load(role_template("kubernetes", "kubeadm-join.yaml.j2",
                                         **{**ctx, "kubernetes_cp_schedulable": False}))
    assert "taints" not in alone["nodeRegistration"]


def _flat(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in tasks:
        out.append(t)
        out += _flat(t.get("block", []))
    return out


def test_a_cluster_member_moves_with_kubeadm_upgrade_in_kubeadms_order():
    """Installing newer packages never moves a cluster: kubeadm first, then `kubeadm upgrade
    apply` on the first control plane to move and `kubeadm upgrade node` everywhere else,
    then kubelet and kubectl, a kubelet restart, and a wait for the new version (kubeadm's
    "Upgrading kubeadm clusters"). Decided from what the cluster reports, so a resumed run
    does what is left."""
    tasks = _flat(_yaml(ROOT / "roles/kubernetes/tasks/main.yml"))
    names = [t["name"] for t in tasks]
    order = ["Check whether this node is already a cluster member",
             "Install kubeadm (with kubelet and kubectl on a new node) at the pinned version",
             "Read the version this node's kubelet runs",
             "Read the version of this control plane's API server",
             "Read the cluster's version",
             "Move one control plane first, and the workers after it",
             "Upgrade the control plane (the first control plane to move)",
             "Upgrade this node's components and kubelet configuration",
             "Install kubelet and kubectl at the pinned version",
             "Hold the Kubernetes packages at their version",
             "Restart the kubelet at its new version",
             "Wait for the kubelet to report the pinned version"]
    assert [names.index(n) for n in order] == sorted(names.index(n) for n in order)
    by = {t["name"]: t for t in tasks}
    assert by["Upgrade the control plane (the first control plane to move)"][
        "ansible.builtin.command"]["argv"] == ["kubeadm", "upgrade", "apply",
                                               "v{{ kubernetes_version }}", "--yes"]
    install = by["Install kubeadm (with kubelet and kubectl on a new node) at the pinned version"]
    pkgs = ["kubeadm=1.32.4-*", "kubelet=1.32.4-*", "kubectl=1.32.4-*"]
    for member, want in ((True, pkgs[:1]), (False, pkgs)):
        got = ansible_eval(install["ansible.builtin.apt"]["name"], kubernetes_packages=pkgs,
                           kubernetes_member={"stat": {"exists": member}})
        assert got == want
    block = by["Move this cluster member to the pinned version with kubeadm"]
    assert block["tags"] == ["needs_cluster", "kubernetes_control_plane_first"]
    assert "kubernetes_member" in block["when"]
    # what `upgrade apply` runs on each control plane before any drain (--tags): the
    # repository, kubeadm, and kubeadm's upgrade, nothing that restarts the kubelet
    first = [t["name"] for t in tasks if "kubernetes_control_plane_first" in t.get("tags", [])]
    assert first == ["Set aside other entries for the kubernetes repository (a duplicate "
                     "stops apt)",
                     "Add the Kubernetes package repository for the pinned minor version",
                     "Install kubeadm (with kubelet and kubectl on a new node) at the pinned "
                     "version", "Check the cluster's API endpoint is the one the site names",
                     "Move this cluster member to the pinned version with kubeadm"]

    role_vars = _yaml(ROOT / "roles/kubernetes/vars/main.yml")

    def ask(expr: str, **ctx: Any) -> bool:
        # a task its `when` skipped is still registered, as Ansible does, without stdout
        ctx = {"kubernetes_version": "1.32.4", "kubernetes_cluster_config": {"skipped": True},
               "kubernetes_apiserver_manifest": {"skipped": True},
               "ansible_play_hosts": ["cp01"], "groups": {"kube_control_plane": ["cp01"]},
               **ctx}
        for name in ("kubernetes_apiserver_moved", "kubernetes_moves",
                     "kubernetes_cluster_moved"):
            ctx.setdefault(name, ansible_eval(role_vars[name], **ctx))
        return holds(expr, **ctx)

    apply_when = by["Upgrade the control plane (the first control plane to move)"]["when"]
    node_when = by["Upgrade this node's components and kubelet configuration"]["when"]
    old = {"stdout": "v1.31.4"}
    moved = {"stdout": "kubernetesVersion: v1.32.4\n"}
    before = {"stdout": "kubernetesVersion: v1.31.4\n"}
    # the first control plane: apply, not node
    assert ask(apply_when, kubernetes_is_control_plane=True, kubernetes_running_version=old,
               kubernetes_cluster_config=before)
    assert not ask(node_when, kubernetes_is_control_plane=True,
                   kubernetes_running_version=old, kubernetes_cluster_config=before)
    # a further control plane once the cluster moved: node, not apply
    assert ask(node_when, kubernetes_is_control_plane=True, kubernetes_running_version=old,
               kubernetes_cluster_config=moved)
    assert not ask(apply_when, kubernetes_is_control_plane=True,
                   kubernetes_running_version=old, kubernetes_cluster_config=moved)
    # a worker: node
    assert ask(node_when, kubernetes_is_control_plane=False, kubernetes_running_version=old)
    # a control plane whose kubelet moved but whose API server did not (packages alone, as
    # before kubeadm upgrade ran): it moves, and applies
    manifest = {"content": base64.b64encode(
        b"    image: registry.k8s.io/kube-apiserver:v1.31.4\n").decode()}
    assert ask(apply_when, kubernetes_is_control_plane=True,
               kubernetes_running_version={"stdout": "v1.32.4"},
               kubernetes_apiserver_manifest=manifest, kubernetes_cluster_config=before)
    # a control plane whose API server moved in place (upgrade apply's control planes
    # first), back for its full round with the old kubelet: it moves (the kubelet), and
    # `kubeadm upgrade node` runs again (it finishes what an interrupted run left), never
    # `upgrade apply`
    new_manifest = {"content": base64.b64encode(
        b"    image: registry.k8s.io/kube-apiserver:v1.32.4\n").decode()}
    in_place = dict(kubernetes_is_control_plane=True, kubernetes_running_version=old,
                    kubernetes_apiserver_manifest=new_manifest,
                    kubernetes_cluster_config=moved)
    assert ask("kubernetes_moves", **in_place) and ask("kubernetes_apiserver_moved", **in_place)
    assert ask(node_when, **in_place) and not ask(apply_when, **in_place)
    # a control plane fully at the pin does not move (its tag ends the line: not v1.32.40)
    done = dict(in_place, kubernetes_running_version={"stdout": "v1.32.4"})
    assert not ask("kubernetes_moves", **done)
    near = {"content": base64.b64encode(
        b"    image: registry.k8s.io/kube-apiserver:v1.32.40\n").decode()}
    assert not ask("kubernetes_apiserver_moved", **dict(done, kubernetes_apiserver_manifest=near))
    # the guard: a worker before the cluster moved, or two control planes applying at once
    guard = by["Move one control plane first, and the workers after it"][
        "ansible.builtin.assert"]["that"]
    assert not all(ask(t, kubernetes_is_control_plane=False, kubernetes_running_version=old,
                       kubernetes_cluster_config=before) for t in guard)
    assert all(ask(t, kubernetes_is_control_plane=False, kubernetes_running_version=old,
                   kubernetes_cluster_config=moved) for t in guard)
    two = {"ansible_play_hosts": ["cp01", "cp02"],
           "groups": {"kube_control_plane": ["cp01", "cp02", "cp03"]}}
    assert not all(ask(t, kubernetes_is_control_plane=True, kubernetes_running_version=old,
                       kubernetes_cluster_config=before, **two) for t in guard)
    assert all(ask(t, kubernetes_is_control_plane=True, kubernetes_running_version=old,
                   kubernetes_cluster_config=before) for t in guard)
    # a node already at the version (or a new node, which reads nothing): neither
    for running in ({"stdout": "v1.32.4"}, {"skipped": True}):
        for cp in (True, False):
            assert not ask(apply_when, kubernetes_is_control_plane=cp,
                           kubernetes_running_version=running)
            assert not ask(node_when, kubernetes_is_control_plane=cp,
                           kubernetes_running_version=running)


def _session_port(tmp_path, address, ssh_connection=None):
    env = {"ROCE_SYSFS": str(tmp_path / "sys"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    if ssh_connection:
        env["SSH_CONNECTION"] = ssh_connection
    return subprocess.run(["bash", str(ROOT / "roles/roce_host/files/session-port.sh"),
                           address], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def test_openibd_restart_never_cuts_the_session_it_runs_over(tmp_path):
    """openibd's restart unloads mlx5_core: under a session whose address is on a ConnectX
    port (or a bond, VLAN or bridge over one), or not found on the host, the node reboots
    into DOCA's driver instead. The address is 127.0.0.1, on `lo`, with a sysfs tree that
    says what lo sits on."""
    net = tmp_path / "sys/class/net"
    drivers = tmp_path / "sys/bus/pci/drivers"
    for driver in ("mlx5_core", "virtio_net"):
        (drivers / driver).mkdir(parents=True)
    (net / "lo").mkdir(parents=True)
    assert _session_port(tmp_path, "127.0.0.1") == "other"  # a virtual device, no driver
    assert _session_port(tmp_path, "192.0.2.77") == "unknown"  # not on this host
    # lo as a bond over a ConnectX port, then over a virtio one
    (net / "ens1f0np0/device").mkdir(parents=True)
    (net / "lo/lower_ens1f0np0").symlink_to("../ens1f0np0")
    (net / "ens1f0np0/device/driver").symlink_to(drivers / "mlx5_core")
    assert _session_port(tmp_path, "127.0.0.1") == "nvidia"
    (net / "ens1f0np0/device/driver").unlink()
    (net / "ens1f0np0/device/driver").symlink_to(drivers / "virtio_net")
    assert _session_port(tmp_path, "127.0.0.1") == "other"
    # a routed fabric: the node's address on lo, its packets to the controller leaving by
    # a ConnectX port (this machine's route to a TEST-NET address names that port)
    route = subprocess.run(["ip", "route", "get", "192.0.2.55"], capture_output=True,
                           text=True, check=True).stdout.split()
    egress = route[route.index("dev") + 1]
    (net / "lo/lower_ens1f0np0").unlink()
    (net / egress / "device").mkdir(parents=True, exist_ok=True)
    (net / egress / "device/driver").symlink_to(drivers / "mlx5_core")
    assert _session_port(tmp_path, "127.0.0.1") == "other"  # no session: the holder only
    assert _session_port(tmp_path, "127.0.0.1", "192.0.2.55 50000 127.0.0.1 22") == "nvidia"
    # the handlers: restart only under a session on another port, reboot otherwise, in that
    # order before the QoS; the install notifies both, after the session's port is known
    handlers = {h["name"]: h for h in _yaml(ROOT / "roles/roce_host/handlers/main.yml")}
    names = list(handlers)
    assert names.index("Restart openibd") < names.index("Reboot into DOCA's driver") < \
        names.index("Apply RoCE QoS")
    assert "roce_host_session_on == 'other'" in handlers["Restart openibd"]["when"]
    assert handlers["Reboot into DOCA's driver"]["when"] == "roce_host_session_on != 'other'"
    # the script's last line, and "unknown" (a reboot) when the check did not run
    session_on = yaml.safe_load((ROOT / "roles/roce_host/vars/main.yml").read_text())[
        "roce_host_session_on"]
    for lines, expected in ((["sudo: unable to resolve host x", "nvidia\r"], "nvidia"),
                            (["other"], "other"), (None, "unknown")):
        port = {} if lines is None else {"stdout_lines": lines}
        assert ansible_eval(session_on, roce_host_session_port=port) == expected
    tasks = [t["name"] for t in _yaml(ROOT / "roles/roce_host/tasks/main.yml")]
    install = {t["name"]: t for t in _yaml(ROOT / "roles/roce_host/tasks/main.yml")}[
        "Install DOCA (MOFED)"]
    assert install["notify"] == ["Restart openibd", "Reboot into DOCA's driver",
                                 "Apply RoCE QoS"]
    assert tasks.index("Find whether this session runs over a ConnectX port") < tasks.index(
        "Install DOCA (MOFED)")


def test_two_control_planes_pass_the_role_as_they_pass_validate():
    """validate warns of an even count (even-control-plane); the role refused it, so a site
    growing from one control plane to three with `provision add` stopped at the second."""
    file = "tasks/validate.yml"
    check = role_task("kubernetes", "Check there is a control plane", file=file)
    say = role_task("kubernetes", "Say an even number of control planes adds no fault "
                    "tolerance", file=file)
    for cps, even in ((["cp01"], False), (["cp01", "cp02"], True),
                      (["cp01", "cp02", "cp03"], False)):
        groups = {"kube_control_plane": cps}
        assert holds(check["ansible.builtin.assert"]["that"], groups=groups)
        assert holds(say["when"], groups=groups) is even
    assert not holds(check["ansible.builtin.assert"]["that"], groups={})


def test_the_ready_check_reads_the_node_with_its_own_credentials():
    """Delegated to cp01 with admin.conf, every node's verify failed while cp01 was rebuilt
    or failed its upgrade round; the kubelet's credentials reach the cluster's endpoint."""
    task = role_task("node_verify", "Wait for the node to be Ready in Kubernetes")
    assert "delegate_to" not in task
    defaults = _yaml(ROOT / "roles/node_verify/defaults/main.yml")
    assert defaults["node_verify_kubeconfig"] == "/etc/kubernetes/kubelet.conf"
    assert "--kubeconfig={{ node_verify_kubeconfig }}" in task["ansible.builtin.command"]["argv"]


def test_a_running_cluster_built_with_another_api_endpoint_stops_the_run():
    """A VIP added to a one-control-plane site after init was rendered into the local file
    only: joins went through cp01's address and the run reported success."""
    block = role_task("kubernetes", "Check the cluster's API endpoint is the one the site names")
    check = next(t for t in block["block"] if t["name"].startswith("Refuse"))
    expr = _yaml(ROOT / "roles/kubernetes/vars/main.yml")["kubernetes_cluster_endpoint"]
    built = ("apiServer: {}\napiVersion: kubeadm.k8s.io/v1beta4\ncontrolPlaneEndpoint: "
             "10.250.0.11:6443\nkind: ClusterConfiguration\n")
    for stdout, site, ok in ((built, "10.250.0.11:6443", True),
                             (built, "10.250.0.250:6443", False),
                             ("", "10.250.0.250:6443", False)):
        endpoint = ansible_eval(expr, kubernetes_cluster_endpoint_config={"stdout": stdout})
        assert holds(check["ansible.builtin.assert"]["that"],
                     kubernetes_cluster_endpoint=endpoint,
                     kubernetes_control_plane_endpoint=site) is ok
    msg = ansible_eval(check["ansible.builtin.assert"]["fail_msg"],
                       kubernetes_cluster_endpoint="10.250.0.11:6443",
                       kubernetes_control_plane_endpoint="10.250.0.250:6443")
    assert msg.startswith("the cluster's API endpoint is 10.250.0.11:6443, the site names "
                          "10.250.0.250:6443")
    names = [t["name"] for t in _yaml(ROLE / "tasks/main.yml")]
    assert names.index("Check the cluster's API endpoint is the one the site names") < \
        names.index("Move this cluster member to the pinned version with kubeadm")
    assert "kubernetes_control_plane_first" in block["tags"]  # upgrade apply's first pass


def test_a_control_plane_certificate_near_its_end_fails_verify(tmp_path):
    """kubeadm's certificates last a year and only an upgrade renews them: the role's own
    openssl command, run for real on certificates made here (one with 5 days left)."""
    read = role_task("node_verify", "Read which control-plane certificates expire soon")
    check = role_task("node_verify", "Verify no control-plane certificate expires within the "
                      "margin")
    (tmp_path / "etcd").mkdir()
    for name, days in (("apiserver.crt", 365), ("etcd/peer.crt", 5)):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                        str(tmp_path / "key.pem"), "-out", str(tmp_path / name), "-days",
                        str(days), "-subj", "/CN=kube-apiserver"],
                       check=True, capture_output=True)
    results = []
    for item in ("apiserver.crt", "etcd/peer.crt", "etcd/server.crt"):  # the last is missing
        argv = [str(ansible_eval(a, item=item, node_verify_cert_min_days=14,
                                 node_verify_pki_dir=str(tmp_path)))
                for a in read["ansible.builtin.command"]["argv"]]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        result = {"item": item, "rc": proc.returncode, "stdout": proc.stdout}
        # a file openssl cannot read exits 1 as well: the read fails, not "expires soon"
        assert holds(read["failed_when"], node_verify_cert_ends=result) is (
            item == "etcd/server.crt"), result
        results.append(result)
    results.pop()
    assert [r["rc"] for r in results] == [0, 1]
    ends = {"results": results}
    assert not holds(check["ansible.builtin.assert"]["that"], node_verify_cert_ends=ends)
    msg = ansible_eval(check["ansible.builtin.assert"]["fail_msg"], node_verify_cert_ends=ends,
                       node_verify_cert_min_days=14)
    assert msg.startswith("etcd/peer.crt expire within 14 days: renew them")
    assert holds(check["ansible.builtin.assert"]["that"],
                 node_verify_cert_ends={"results": results[:1]})


def test_flannel_takes_the_management_nic_once(tmp_path):
    """flannel's VXLAN goes over the NIC that routes to the management network's own
    address (rendered from the site), added once after --kube-subnet-mgr: a second run
    leaves the manifest as it is."""
    from tests.conftest import ansible_eval
    out = render.render(load(EXAMPLE), tmp_path / "out").out
    gv = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    assert gv["kubernetes_flannel_iface_can_reach"] == "10.250.0.0"  # mgmt 10.250.0.0/24
    task = next(t for t in _yaml(ROLE / "tasks/main.yml")
                if t.get("name") == "Give flannel the management network's NIC")
    rep = task["ansible.builtin.replace"]
    manifest = ("      containers:\n      - args:\n        - --ip-masq\n"
                "        - --kube-subnet-mgr\n        command:\n        - /opt/bin/flanneld\n")
    with_arg = ansible_eval(rep["replace"], kubernetes_flannel_iface_can_reach="10.250.0.0")

    def apply(text: str) -> str:  # what the replace module does (re.MULTILINE, subn)
        return re.compile(rep["regexp"], re.MULTILINE).sub(with_arg, text)

    once = apply(manifest)
    assert "        - --kube-subnet-mgr\n        - --iface-can-reach=10.250.0.0\n" \
        "        command:\n" in once
    assert yaml.safe_load(once)["containers"][0]["args"] == [
        "--ip-masq", "--kube-subnet-mgr", "--iface-can-reach=10.250.0.0"]
    assert apply(once) == once


def test_the_cluster_is_reached_through_the_vip_again_before_the_cni():
    """Rewriting kube-vip's manifest restarts its pod, which gives the VIP up for a while:
    the first kubectl call through the VIP after it (the CNI's) waits until the API server
    answers there, and fails the node only when it never does."""
    names = [t.get("name") for t in _flat(_yaml(ROLE / "tasks/main.yml"))]
    wait = names.index("Wait for the API server to answer through the VIP")
    assert names.index("Serve the control-plane VIP with kube-vip on the further "
                       "control planes") < wait < names.index("Compare the CNI manifest "
                                                              "with the cluster")
    task = next(t for t in _flat(_yaml(ROLE / "tasks/main.yml"))
                if t.get("name") == "Wait for the API server to answer through the VIP")
    assert task["until"] == "kubernetes_vip_ready.rc == 0" and task["retries"] >= 12
    assert "--raw=/readyz" in task["ansible.builtin.command"]["argv"]
    assert "failed_when" not in task  # out of retries, the node fails
    # and not before the kubelet replaced the pod (the old one holds the VIP until then)
    pause = names.index("Give the kubelet time to replace kube-vip's pod")
    assert names.index("Point kube-vip at admin.conf once the cluster is initialised") \
        < pause < wait
    given = next(t for t in _flat(_yaml(ROLE / "tasks/main.yml"))
                 if t.get("name") == "Give the kubelet time to replace kube-vip's pod")
    assert given["ansible.builtin.wait_for"]["timeout"] > 20  # fileCheckFrequency: 20 s
    for changed, runs in (({"changed": True}, True), ({"changed": False}, False)):
        assert holds(given["when"], kubernetes_kube_vip_switched={"skipped": True},
                     kubernetes_kube_vip_served=changed) is runs


def test_a_site_whose_every_node_is_a_gpu_control_plane_is_warned(tmp_path):
    """render taints a GPU control plane nvidia.com/gpu=present:NoSchedule: where every
    Kubernetes node is one, CoreDNS and the CNI's controllers have no node to run on, which
    validate says; one node without the taint (the fixture's CPU control planes) is enough."""
    from provisioner.inventory.checks import check
    text = (FIXTURES / "sites" / "gb200.yaml").read_text()
    plain = tmp_path / "plain.yaml"
    plain.write_text(text)
    assert not [f for f in check(load(plain)) if f.code == "every-node-gpu-tainted"]
    for tray in ("gb01", "gb02", "gb03"):
        text = text.replace(f"      - hostname: {tray}\n",
                            f"      - hostname: {tray}\n        roles: [control-plane, worker]\n")
    for cp in ("cp01", "cp02", "cp03"):  # the CPU control planes become storage nodes
        text = text.replace(f"{{hostname: {cp}, roles: [control-plane]",
                            f"{{hostname: {cp}, roles: [storage]")
    all_gpu = tmp_path / "all_gpu.yaml"
    all_gpu.write_text(text)
    found = [f for f in check(load(all_gpu)) if f.code == "every-node-gpu-tainted"]
    assert len(found) == 1 and found[0].severity.value == "warning"
    assert "CoreDNS" in found[0].message and "(3)" in found[0].message
    assert found[0].location.key_path == "software.kubernetes"
