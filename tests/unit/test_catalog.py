"""The shipped catalog: sourced figures, and the traps where secondary sources contradict the
vendor (DGX H100 8U 4+2 per NVIDIA's user guide, not 4U; DGX-2 10U, not 8U; V100 needs the
proprietary kernel modules; GB200 runs IMEX, not fabric manager)."""

from __future__ import annotations

import re
from importlib import resources

from provisioner.inventory import shipped_catalog
from provisioner.inventory.models import BlockKind, GpuArch


def test_required_block_types_present():
    names = set(shipped_catalog())
    required = {"hci-2u4n", "compute-2u4n", "storage-flash-2u", "stor-xl-4u", "vgpu-1u",
                "dgx-1", "dgx-2", "dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "hgx-8gpu",
                "sn2700", "sn3700", "sn4600c", "sn4700", "sn5600", "mgmt-switch-1g",
                "ipmi-switch-1g"}
    assert required <= names


def test_dgx_figures_from_vendor_sources():
    c = shipped_catalog()
    h100 = c["dgx-h100"]
    # trap: DGX H100 is 8U / 6 x 3.3 kW / 4+2, not 4U / 4 x 3 kW
    assert (h100.rack_units, h100.max_power_w, h100.psu.count, h100.psu.rating_w,
            h100.psu.redundancy, h100.airflow_cfm) == (8, 10200, 6, 3300, "4+2", 1105)
    assert c["dgx-2"].rack_units == 10  # trap: not 8U
    assert (c["dgx-b200"].rack_units, c["dgx-b200"].max_power_w,
            c["dgx-b200"].psu.redundancy) == (10, 14300, "5+1")
    assert (c["dgx-a100"].rack_units, c["dgx-a100"].max_power_w,
            c["dgx-a100"].psu.redundancy) == (6, 6500, "3+3")
    assert (c["dgx-1"].rack_units, c["dgx-1"].max_power_w) == (3, 3500)
    assert c["dgx-2"].typical_power_w == 7800  # measured under ResNet (vScaler)


def test_nvswitch_flags_follow_deepops():
    c = shipped_catalog()
    assert not c["dgx-1"].nvswitch
    for name in ("dgx-2", "dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200"):
        assert c[name].nvswitch, name
    assert c["dgx-1"].gpu.architecture is GpuArch.VOLTA
    assert c["dgx-b200"].gpu.architecture is GpuArch.BLACKWELL


def test_every_source_tag_is_defined_in_the_header():
    text = resources.files("provisioner.inventory").joinpath("catalog.yaml").read_text()
    defined = set(re.findall(r"^#\s+\[(\w+)\]", text, re.MULTILINE))
    for block in shipped_catalog().values():
        assert block.sources, f"{block.name} cites no source"
        assert set(block.sources) <= defined, block.name


def test_switches_have_roles_and_unsourced_power_is_marked():
    for block in shipped_catalog().values():
        if block.kind is BlockKind.SWITCH:
            assert block.switch_role
    assert "max_power_w" in shipped_catalog()["sn2700"].estimated  # no datasheet figure found
    assert "max_power_w" not in shipped_catalog()["dgx-h100"].estimated
