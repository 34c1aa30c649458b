"""provision schema: the committed docs/site.schema.json is the exporter's output, the shipped
inventories validate against it with check-jsonschema, and a wrong value fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.inventory.schema import site_schema
from tests.conftest import ROOT

SCHEMA_FILE = ROOT / "docs" / "site.schema.json"
# release bundles (bundles/, docs/upgrade.md) are not site files: the loader skips them
INVENTORY_FILES = sorted(p for p in (ROOT / "inventories").rglob("*.y*ml")
                         if not {".provision", "bundles"} & set(p.parts))
SCHEMA_LINE = "# yaml-language-server: $schema="


def _check_jsonschema() -> list[str]:
    exe = Path(sys.executable).with_name("check-jsonschema")
    if not exe.exists():
        exe_path = shutil.which("check-jsonschema")
        if exe_path is None:
            pytest.fail("check-jsonschema is missing: pip install -e '.[test]'")
        return [exe_path]
    return [str(exe)]


def test_committed_schema_is_the_exporters_output():
    assert json.loads(SCHEMA_FILE.read_text()) == site_schema(), (
        "run: provision schema --out docs/site.schema.json")


def test_cli_prints_the_schema():
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output) == site_schema()


def test_schema_has_descriptions_with_units_and_allows_partial_files():
    schema = site_schema()
    assert "required" not in schema  # a site split over files: each file is partial
    rack = schema["$defs"]["Rack"]["properties"]
    assert "kW" in rack["cooling_kw"]["description"]
    assert "CFM" in rack["airflow_limit_cfm"]["description"]
    assert "W" in schema["$defs"]["BlockType"]["properties"]["max_power_w"]["description"]
    assert schema["$defs"]["Placement"]["required"] == ["rack", "u", "block", "nodes"]


def test_example_inventories_point_at_the_schema():
    assert INVENTORY_FILES
    for path in INVENTORY_FILES:
        first = path.read_text().splitlines()[0]
        assert first.startswith(SCHEMA_LINE), path
        target = (path.parent / first.removeprefix(SCHEMA_LINE).strip()).resolve()
        assert target == SCHEMA_FILE.resolve(), path


def test_example_inventories_validate_with_check_jsonschema():
    result = subprocess.run([*_check_jsonschema(), "--schemafile", str(SCHEMA_FILE),
                             *map(str, INVENTORY_FILES)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


WRONG = {  # file name -> (text, what the validator must name)
    "phase.yaml": ("racks:\n  - {name: r01, cooling_kw: 10, feeds: [{name: A, phase: four, "
                   "voltage_v: 230, breaker_a: 32}]}\n", "phase"),
    "u.yaml": ("placements:\n  - {rack: r01, u: 0, block: dgx-h100, nodes: [{hostname: a}]}\n",
               "placements[0].u: 0 is less than the minimum of 1"),
    "host.yaml": ("placements:\n  - {rack: r01, u: 1, block: dgx-h100, "
                  "nodes: [{hostname: DGX_1}]}\n", "hostname"),
    "key.yaml": ("site: {name: x, colour: red}\n", "colour"),
}


def test_a_wrong_value_fails(tmp_path):
    for name, (text, _) in WRONG.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run([*_check_jsonschema(), "--schemafile", str(SCHEMA_FILE),
                             *(str(tmp_path / n) for n in WRONG)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout
    lines = (result.stdout + result.stderr).splitlines()
    for name, (_, where) in WRONG.items():
        assert any(name in line and where in line for line in lines), (name, lines)
