"""Loader: multi-file sites, locations, YAML safety."""

from __future__ import annotations

import pytest

from provisioner.errors import InventoryError
from provisioner.inventory import check, load
from provisioner.inventory.findings import errors
from tests.conftest import EXAMPLE, FIXTURES

VALID = (FIXTURES / "valid_small.yaml").read_text()


def test_example_site_loads_from_three_files():
    loaded = load(EXAMPLE)
    assert loaded.site.site.name == "example"
    assert sorted(p.split("/")[-1] for p in loaded.sources.files) == [
        "placements.yaml", "racks.yaml", "site.yaml"]
    assert errors(check(loaded)) == []


def test_lists_concatenate_across_files_and_locations_map_back(write_site):
    racks = VALID.split("placements:")[0]
    placements = "placements:" + VALID.split("placements:")[1]
    extra = ("placements:\n  - rack: r01\n    u: 30\n    block: nope-block\n"
             "    nodes: [{hostname: x1}]\n")
    root = write_site({"a.yaml": racks, "b.yaml": placements, "c.yaml": extra})
    loaded = load(root)
    assert len(loaded.site.placements) == 3
    bad = [f for f in check(loaded) if f.code == "unknown-block"]
    assert len(bad) == 1
    loc = bad[0].location
    assert loc.file.endswith("c.yaml") and loc.line == 4
    assert loc.key_path == "placements[0].block"  # index within c.yaml


def test_single_key_defined_twice_across_files(write_site):
    root = write_site({"a.yaml": VALID, "b.yaml": "site: {name: other}\n"})
    with pytest.raises(InventoryError) as exc:
        load(root)
    assert exc.value.findings[0].code == "duplicate-key"
    assert "already defined in" in exc.value.findings[0].message


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(InventoryError, match="no such inventory"):
        load(tmp_path / "nope")
    with pytest.raises(InventoryError, match=r"no \*\.yaml files"):
        load(tmp_path)


def test_non_mapping_top_level(write_site):
    with pytest.raises(InventoryError) as exc:
        load(write_site("- a\n- b\n"))
    assert exc.value.findings[0].code == "inventory-file"


def test_python_tags_are_refused(write_site):
    text = "site: !!python/object/apply:os.system ['true']\n"
    with pytest.raises(InventoryError) as exc:
        load(write_site(text))
    assert exc.value.findings[0].code == "yaml-syntax"


def test_alias_bomb_is_refused(write_site):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(InventoryError) as exc:
        load(write_site("\n".join(lines) + "\n"))
    assert exc.value.findings[0].code == "yaml-alias-bomb"


def test_small_anchors_are_fine(write_site):
    text = VALID.replace("site: {name: fixture,",
                         "x-bmc: &bmc {credentials: bmc}\nsite: {name: fixture,")
    assert text != VALID
    with pytest.raises(InventoryError) as exc:  # x-bmc is an unknown key, but no alias bomb
        load(write_site(text))
    assert exc.value.findings[0].code == "schema-extra_forbidden"


def test_non_utf8_bytes(tmp_path):
    p = tmp_path / "site.yaml"
    p.write_bytes(b"site: {name: \xff\xfe}\n")
    with pytest.raises(InventoryError) as exc:
        load(p)
    assert exc.value.findings[0].code == "yaml-syntax"


def test_deep_nesting_is_a_clean_error(write_site):
    with pytest.raises(InventoryError):
        load(write_site("site: " + "[" * 5000 + "]" * 5000 + "\n"))


def test_mac_normalised_and_int_branch_accepted(write_site):
    text = VALID.replace('"52:54:00:00:00:11"', '"52-54-00-AA-BB-CC"').replace(
        'branch: "570"', "branch: 570")
    loaded = load(write_site(text))
    assert loaded.site.placements[0].nodes[0].macs["mgmt"] == "52:54:00:aa:bb:cc"
    assert loaded.site.software.nvidia_driver.branch == "570"


def test_yes_no_booleans_for_fabric_manager(write_site):
    text = VALID.replace("fabric_manager: {enabled: auto}", "fabric_manager: {enabled: no}")
    codes = {f.code for f in errors(check(load(write_site(text))))}
    assert "fabric-manager-missing" in codes


def test_site_catalog_extends_and_overrides(write_site):
    text = VALID + (
        "catalog:\n"
        "  - {name: my-gpu-box, kind: gpu_server, rack_units: 4, max_power_w: 5000,"
        " typical_power_w: 4000, gpu: {model: L40S, count: 8, architecture: ada},"
        " estimated: [typical_power_w]}\n"
        "  - {name: hci-2u4n, kind: hci, rack_units: 2, nodes_per_chassis: 4,"
        " max_power_w: 1800, typical_power_w: 1200}\n")
    loaded = load(write_site(text))
    assert loaded.catalog["my-gpu-box"].gpu.model == "L40S"
    assert loaded.catalog["hci-2u4n"].max_power_w == 1800
    assert [w.code for w in loaded.warnings] == ["catalog-override"]


@pytest.mark.parametrize("value", ["true", "42", "yes"])
def test_addresses_must_be_text(write_site, value):
    text = VALID.replace("cidr: 10.1.0.0/24", f"cidr: {value}")
    with pytest.raises(InventoryError) as exc:
        load(write_site(text))
    assert "write the address as text" in exc.value.findings[0].message
    assert exc.value.findings[0].location.key_path == "networks[0].cidr"
