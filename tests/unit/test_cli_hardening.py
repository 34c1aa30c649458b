"""CLI hardening: validate --json for load errors, power runs validate's checks, --debug."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from tests.conftest import FIXTURES, ROOT

runner = CliRunner()
VALID = (FIXTURES / "valid_small.yaml").read_text()


@pytest.mark.parametrize(("text", "code"), [
    ("site: [unclosed\n", "yaml-syntax"),
    ("- just\n- a list\n", "inventory-file"),
    ("site: {name: x}\nracks: " + "[" * 100 + "]" * 100 + "\n", "yaml-too-deep"),
])
def test_validate_json_prints_load_and_syntax_errors(write_site, text, code):
    result = runner.invoke(app, ["validate", str(write_site(text)), "--json"])
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc["valid"] is False and doc["exit_code"] == 3
    assert doc["errors"][0]["code"] == code
    assert doc["errors"][0]["location"]["line"] >= 1
    assert doc["errors"][0]["location"]["file"].endswith("site.yaml")


def test_validate_json_missing_path(tmp_path):
    result = runner.invoke(app, ["validate", str(tmp_path / "nope"), "--json"])
    assert result.exit_code == 3
    assert "no such inventory" in json.loads(result.stdout)["errors"][0]["message"]


def test_power_refuses_an_invalid_inventory(write_site):
    """A placement on an unknown rack used to be dropped silently and the report said ok."""
    text = VALID.replace("- rack: r01", "- rack: r99", 1)
    assert "r99" in text
    path = str(write_site(text))
    assert runner.invoke(app, ["validate", path]).exit_code == 3
    result = runner.invoke(app, ["power", path])
    assert result.exit_code == 3
    assert "r99" in result.output


def test_power_valid_site_still_works(write_site):
    result = runner.invoke(app, ["power", str(write_site(VALID)), "--json"])
    assert result.exit_code in (0, 4)
    assert json.loads(result.stdout)["schema"] == "provisioner.power/v1"


def test_debug_adds_the_traceback_and_keeps_the_exit_code(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text("site: [unclosed\n")
    cmd = [sys.executable, "-m", "provisioner"]
    plain = subprocess.run([*cmd, "validate", str(bad)], capture_output=True, text=True,
                           cwd=ROOT, timeout=60)
    debug = subprocess.run([*cmd, "--debug", "validate", str(bad)], capture_output=True,
                           text=True, cwd=ROOT, timeout=60)
    assert plain.returncode == debug.returncode == 3
    assert "Traceback" not in plain.stderr
    assert "Traceback" in debug.stderr and "InventoryError" in debug.stderr
    assert "YAML syntax error" in debug.stderr
