"""Renderer: golden files, determinism, secret-free output, artifacts, role/table sync.

Golden files live in tests/golden/<site>/; regenerate with UPDATE_GOLDEN=1 and review the
diff like code.
"""

from __future__ import annotations

import filecmp
import os
import shutil

import pytest
import yaml

from provisioner import render, roce
from provisioner.errors import RenderError
from provisioner.inventory import compat, load
from provisioner.inventory.checks import check
from tests.conftest import EXAMPLE, FIXTURES, ROOT, ansible_eval, edited_example

SITES = FIXTURES / "sites"
GOLDEN = ROOT / "tests" / "golden"
GOLDEN_FILES = ("inventory/hosts.yml", "inventory/group_vars/all.yml",
                "inventory/host_vars/gpu01.yml", "inventory/host_vars/cp01.yml")


@pytest.mark.parametrize("site", ["dgx1", "dgx_h100"])
def test_golden(site, tmp_path):
    out = tmp_path / "out"
    render.render(load(SITES / f"{site}.yaml"), out)
    for rel in GOLDEN_FILES:
        golden = GOLDEN / site / rel.replace("/", "__")
        got = (out / rel).read_text()
        if os.environ.get("UPDATE_GOLDEN"):
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(got)
        assert got == golden.read_text(), f"{rel} differs from {golden}"


def test_dgx1_gets_proprietary_modules_and_h100_open_with_fabric_manager(tmp_path):
    dgx1 = render.render(load(SITES / "dgx1.yaml"), tmp_path / "a")
    hv = yaml.safe_load((dgx1.out / "inventory/host_vars/gpu01.yml").read_text())
    assert hv["nvidia_driver_kernel_modules"] == "proprietary"
    assert dgx1.groups["nvswitch_nodes"] == []  # DGX-1 has no NVSwitch
    h100 = render.render(load(SITES / "dgx_h100.yaml"), tmp_path / "b")
    hv = yaml.safe_load((h100.out / "inventory/host_vars/gpu01.yml").read_text())
    gv = yaml.safe_load((h100.out / "inventory/group_vars/all.yml").read_text())
    assert hv["nvidia_driver_kernel_modules"] == "open"
    assert gv["fabric_manager_version"] == gv["nvidia_driver_version"] == "570.124.06"
    assert h100.groups["nvswitch_nodes"] == ["gpu01"] and h100.groups["roce_nodes"] == ["gpu01"]
    assert gv["roce_host_tos"] == 106 and gv["roce_host_pfc"] == "0,0,0,1,0,0,0,0"
    assert gv["roce_host_interfaces"] == ["ens1f0np0"]


def test_groups_by_role_block_rack_and_gpu(tmp_path):
    groups = render.render(load(EXAMPLE), tmp_path / "o").groups
    assert groups["kube_control_plane"] == ["cp01", "cp02", "cp03"]
    assert groups["kube_node"] == ["dgx01", "dgx02"]
    assert groups["dgx_h100"] == ["dgx01", "dgx02"] and groups["gpu_h100"] == ["dgx01", "dgx02"]
    assert "stor01" in groups["rack_r01"] and groups["storage_nodes"] == ["stor01"]
    assert groups["switches"] == ["leaf01", "mgmt01"] and "leaf01" not in groups["servers"]
    assert groups["imex_nodes"] == []


def test_render_is_deterministic(tmp_path):
    loaded = load(EXAMPLE)
    render.render(loaded, tmp_path / "a", lab=True)
    render.render(load(EXAMPLE), tmp_path / "b", lab=True)
    cmp = filecmp.dircmp(tmp_path / "a", tmp_path / "b")

    def same(c: filecmp.dircmp) -> bool:
        mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)[1:]
        return (not c.left_only and not c.right_only and not mismatch and not errors
                and all(same(sub) for sub in c.subdirs.values()))

    assert same(cmp)


def test_render_holds_no_secret(tmp_path, monkeypatch):
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site)
    secret = "s3cr3t-bmc-password-do-not-render"
    monkeypatch.setenv("PROVISION_BMC_PASSWORD", secret)
    out = render.render(load(site), tmp_path / "out").out
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert secret not in text, path
            assert "PROVISION_BMC_PASSWORD" not in text, path  # not even the reference


def test_render_refuses_a_non_render_directory(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    with pytest.raises(RenderError, match="not empty"):
        render.render(load(EXAMPLE), tmp_path / "out")
    assert (tmp_path / "out" / "precious.txt").exists()


def test_cuda_table_in_the_role_equals_the_tools():
    role_vars = yaml.safe_load((ROOT / "roles/cuda_toolkit/vars/main.yml").read_text())
    table = role_vars["cuda_toolkit_min_driver_table"]
    expected = [[".".join(map(str, k[:2])) + (f".{k[2]}" if k[2] else ""), v]
                for k, v in sorted(compat.CUDA_MIN_DRIVER.items(), reverse=True)]
    assert table == expected


@pytest.mark.parametrize("cuda", ["12.8", "12.8.1", "12.8.2", "12.3", "12.1", "13.0", "13.7",
                                  "11.8", "12.4.1", "12.10"])
def test_the_roles_minimum_driver_is_the_tools_for_any_cuda(cuda):
    """A release the table lacks (12.3) found no entry in the role, which then refused it
    ("an unknown version") while validate checked it against 12.2's: one rule for both."""
    role_vars = yaml.safe_load((ROOT / "roles/cuda_toolkit/vars/main.yml").read_text())
    got = ansible_eval(role_vars["cuda_toolkit_min_driver"], cuda_toolkit_version=cuda,
                       cuda_toolkit_min_driver_table=role_vars["cuda_toolkit_min_driver_table"])
    assert got == compat.cuda_min_driver(cuda)[0]
    assert ansible_eval(role_vars["cuda_toolkit_min_driver"], cuda_toolkit_version="11.7",
                        cuda_toolkit_min_driver_table=role_vars[
                            "cuda_toolkit_min_driver_table"]) == ""


def test_artifacts_list_what_roles_fetch(tmp_path):
    loaded = load(SITES / "dgx_h100.yaml")
    items = render.artifacts(loaded)
    names = {(i["kind"], i["name"]): i for i in items}
    drv = names[("package", "nvidia-driver-570-open")]
    assert drv["version"] == "570.124.06" and drv["hosts"] == "gpu01"
    assert names[("package", "nvidia-fabricmanager-570")]["version"] == "570.124.06"
    assert names[("package", "libnvidia-nscq-570")]["version"] == "570.124.06"
    assert names[("package", "cuda-toolkit-12-8")]["role"] == "cuda_toolkit"
    assert names[("package", "kubeadm")]["version"] == "1.31.4"
    assert ("helm-chart", "nvidia/gpu-operator") in names
    # DOCA where the site pins it (its RoCE node's QoS needs it), and only there
    assert names[("package", "doca-ofed")]["version"] == "2.9.1"
    example = {i["name"]: i["version"] for i in render.artifacts(load(EXAMPLE))}
    assert example["doca-ofed"] == "2.9.1"
    dgx1 = {i["name"] for i in render.artifacts(load(SITES / "dgx1.yaml"))}
    assert "cuda-drivers-535" in dgx1 and "nvidia-driver-535-open" not in dgx1
    assert "doca" not in (SITES / "dgx1.yaml").read_text()
    assert not any("doca" in name for name in dgx1)
    # One source of truth: every package the rendered host variables hand the roles is
    # listed by --artifacts, and nothing NVIDIA-made is listed that no role installs.
    out = render.render(loaded, tmp_path / "o").out
    hv = yaml.safe_load((out / "inventory/host_vars/gpu01.yml").read_text())
    rendered = {p for key in ("nvidia_driver_packages", "nvidia_driver_pinning_packages",
                              "fabric_manager_packages", "dcgm_packages",
                              "cuda_toolkit_packages") for p in hv[key]}
    listed = {i["name"] for i in items if i["kind"] == "package"
              and i["role"] in ("nvidia_driver", "fabric_manager", "dcgm", "cuda_toolkit")}
    assert rendered == listed and rendered


def test_roce_values_derived_from_dscp():
    assert roce.tos(26) == 106
    assert roce.pfc_vector(3) == "0,0,0,1,0,0,0,0"
    assert render.group_name("rack", "R-01") == "rack_r_01"


@pytest.mark.parametrize(("cuda", "said"), [("12.8", False), ("12.8.1", False), ("12.3", True),
                                            ("13.7", True)])
def test_validate_warns_of_a_cuda_release_the_table_lacks(tmp_path, cuda, said):
    """12.3 was checked against 12.2's minimum in silence: that is a lower bound only."""
    site = edited_example(tmp_path, 'cuda: "12.8"', f'cuda: "{cuda}"')
    hits = [f for f in check(load(site)) if f.code == "cuda-unknown"]
    assert bool(hits) is said
    if said:
        assert hits[0].severity.value == "warning" and "as a lower bound only" in \
            hits[0].message


def test_each_host_names_its_roce_macs_for_the_qos(tmp_path):
    """roce_host_macs: the node's MACs on RoCE networks (not its management or storage
    MACs), so the host QoS leaves the other ConnectX ports alone."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    placements = site / "placements.yaml"
    text = placements.read_text()
    old = ('macs: {mgmt: "52:54:00:00:00:21", roce: "52:54:00:00:01:21", '
           'storage: "52:54:00:00:02:21"}')
    assert old in text
    placements.write_text(text.replace(old, 'macs: {mgmt: "52:54:00:00:00:21", '
                                            'roce: "B8:3F:D2:00:00:21", '
                                            'storage: "b8:3f:d2:00:01:21"}'))
    out = render.render(load(site), tmp_path / "out").out
    hv = yaml.safe_load((out / "inventory/host_vars/dgx01.yml").read_text())
    assert hv["roce_host_macs"] == ["b8:3f:d2:00:00:21"]
    assert yaml.safe_load((out / "inventory/host_vars/dgx02.yml").read_text())[
        "roce_host_macs"] == ["52:54:00:00:01:22"]
    assert yaml.safe_load((out / "inventory/host_vars/cp01.yml").read_text())[
        "roce_host_macs"] == []
