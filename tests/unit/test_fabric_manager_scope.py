"""Fabric manager is spoken of only where a block runs it (NVSwitch) or IMEX: a DGX-1 (V100
over NVLink, no NVSwitch) installs neither, so its validate findings, render, upgrade plan
and the upgrade gate's lab message say nothing of it."""

from __future__ import annotations

from pathlib import Path

import yaml

from provisioner import render
from provisioner.inventory import load
from provisioner.inventory.checks import check
from provisioner.profile import for_site
from provisioner.workflows.upgrade import apply as apply_mod
from tests.conftest import FIXTURES, ansible_eval, role_task

SITES = FIXTURES / "sites"
DGX1_FM = '  fabric_manager: {enabled: auto}\n'


def _site(tmp_path: Path, fixture: str, old: str, new: str) -> Path:
    text = (SITES / fixture).read_text()
    assert old in text
    (tmp_path / "bundles").mkdir(exist_ok=True)
    site = tmp_path / fixture
    site.write_text(text.replace(old, new))
    return site


def test_a_fabric_manager_pin_on_a_dgx1_is_no_finding(tmp_path: Path) -> None:
    """The same pins that are refused on an H100 site (fabric manager at another version
    than the driver, or without a driver version) are nothing on a DGX-1."""
    other = '  fabric_manager: {enabled: auto, version: "535.216.01"}\n'
    dgx1 = {f.code for f in check(load(_site(tmp_path, "dgx1.yaml", DGX1_FM, other)))}
    assert not {c for c in dgx1 if "fabric-manager" in c}, dgx1
    branch_only = _site(tmp_path, "dgx1.yaml", 'version: "535.230.02", ', "")
    branch_only.write_text(branch_only.read_text().replace(DGX1_FM, other))
    alone = {f.code for f in check(load(branch_only))}
    assert not {c for c in alone if "fabric-manager" in c}, alone
    # the control: an NVSwitch site with the same mismatch is refused
    h100 = (SITES / "dgx_h100.yaml").read_text()
    assert "fabric_manager: {enabled: auto" in h100
    (tmp_path / "h").mkdir()
    bad = tmp_path / "h" / "dgx_h100.yaml"
    bad.write_text(h100.replace("fabric_manager: {enabled: auto",
                                'fabric_manager: {enabled: auto, version: "570.1.1"', 1))
    assert "fabric-manager-version" in {f.code for f in check(load(bad))}


def test_a_dgx1_render_has_no_fabric_manager_group_vars(tmp_path: Path) -> None:
    out = render.render(load(SITES / "dgx1.yaml"), tmp_path / "o").out
    gv = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    assert not [k for k in gv if k.startswith("fabric_manager")], gv
    assert gv["nvidia_driver_version"] == "535.230.02"
    h100 = render.render(load(SITES / "dgx_h100.yaml"), tmp_path / "h").out
    hv = yaml.safe_load((h100 / "inventory/group_vars/all.yml").read_text())
    assert hv["fabric_manager_version"] == hv["nvidia_driver_version"]


def test_a_dgx1_upgrade_plan_refuses_no_fabric_manager_or_nscq_row(tmp_path: Path) -> None:
    """A bundle whose fabric manager and NSCQ rows differ from its driver: a DGX-1 site
    installs neither, so the plan goes on (an NVSwitch site refuses both rows)."""
    site = _site(tmp_path, "dgx1.yaml", "x", "x")
    (tmp_path / "bundles" / "b.yaml").write_text(
        'bundle: {name: "b"}\n'
        'nvidia_driver: {branch: "535", version: "535.247.01", kernel_modules: auto}\n'
        'fabric_manager: "535.230.02"\nnscq: "535.230.02"\ncuda: "12.2"\n'
        'kubernetes: "1.31.4"\n')
    loaded = load(site)
    plan, _ = apply_mod.plan(loaded, "b", profile=for_site(loaded))
    assert plan.ok, plan.refusals
    assert not [w for w in plan.warnings if "fabric manager" in w], plan.warnings
    assert {c.component for c in plan.changes} == {"nvidia_driver"}


def test_the_upgrade_gates_lab_message_names_fabric_manager_only_where_it_runs() -> None:
    msg = str(role_task("upgrade_gate", "Say so when the GPU checks are skipped (a lab host "
                        "has no GPU)")["ansible.builtin.debug"]["msg"])  # type: ignore[index]
    ctx = {"upgrade_gate_fabric_manager_version": "570.148.08", "upgrade_gate_dcgm_level": 1}
    nvswitch = ansible_eval(msg, upgrade_gate_fabric_manager="True", **ctx)
    assert "(fabric manager 570.148.08, DCGM diagnostic level 1)" in nvswitch
    dgx1 = ansible_eval(msg, upgrade_gate_fabric_manager="False", **ctx)
    assert "fabric manager" not in dgx1 and "(DCGM diagnostic level 1)" in dgx1
