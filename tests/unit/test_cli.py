"""CLI: help, version, exit codes and the --json shapes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from provisioner import __version__
from provisioner.cli import app
from tests.conftest import EXAMPLE, FIXTURES, ROOT, VSCALER

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"provision {__version__}"


@pytest.mark.parametrize("cmd", [[], ["validate"], ["power"], ["catalog"]])
def test_help(cmd):
    result = runner.invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output
    if cmd:
        assert "--json" in result.output


def test_root_help_documents_exit_codes():
    result = runner.invoke(app, ["--help"])
    assert "4 budget" in result.output and "3 inventory" in result.output


def test_validate_example_is_valid():
    result = runner.invoke(app, ["validate", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


def test_default_site_from_environment(monkeypatch):
    monkeypatch.setenv("PROVISION_SITE", str(FIXTURES / "invalid" / "u_overlap.yaml"))
    assert runner.invoke(app, ["validate"]).exit_code == 3
    monkeypatch.setenv("PROVISION_SITE", str(EXAMPLE))
    assert runner.invoke(app, ["validate"]).exit_code == 0


def test_power_json_schema_vscaler():
    result = runner.invoke(app, ["power", str(VSCALER), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "provisioner.power/v1"
    assert doc["basis"] == "nameplate" and doc["ok"] is True
    rack = doc["racks"][0]
    assert rack["space"] == {"height_u": 42, "reserved_u": 0, "used_u": 40, "free_u": 2}
    assert rack["power"]["load_w"] == doc["totals"]["load_w"] == 28580.0
    assert rack["power"]["redundancy"] == "2N"
    assert rack["power"]["usable_va"] == rack["power"]["feeds"][0]["usable_va"]
    assert rack["power"]["usable_va"] == pytest.approx(34918, abs=1)
    assert rack["cooling"]["heat_btu_h"] == pytest.approx(28580 * 3.412, abs=0.1)
    assert set(rack) == {"name", "ok", "space", "chassis", "nodes", "power", "cooling",
                         "estimated_blocks", "failures"}


def test_power_typical_basis():
    result = runner.invoke(app, ["power", str(VSCALER), "--json", "--basis", "typical"])
    doc = json.loads(result.stdout)
    assert doc["basis"] == "typical"
    assert doc["totals"]["load_w"] == 21310.0


def test_power_over_budget_exits_4_and_says_by_how_much():
    path = FIXTURES / "invalid" / "over_power_budget.yaml"
    result = runner.invoke(app, ["power", str(path)])
    assert result.exit_code == 4
    assert "feed A" in result.output and "exceeds usable 8,646 VA by" in result.output
    doc = json.loads(runner.invoke(app, ["power", str(path), "--json"]).stdout)
    fail = doc["racks"][0]["failures"][0]
    assert fail["check"] == "power" and fail["subject"] == "feed A" and fail["over_by"] > 0


def test_power_on_invalid_inventory_exits_3():
    result = runner.invoke(app, ["power", str(FIXTURES / "invalid" / "wrong_type.yaml")])
    assert result.exit_code == 3
    assert "height_u" in result.output


def test_catalog_json():
    doc = json.loads(runner.invoke(app, ["catalog", "--json"]).stdout)
    names = {b["name"] for b in doc["blocks"]}
    assert "dgx-h100" in names


def test_console_script_entry_point():
    """The real process: exit codes survive the entry point, errors go to stderr."""
    bad = FIXTURES / "invalid" / "unknown_block.yaml"
    proc = subprocess.run([sys.executable, "-m", "provisioner", "validate", str(bad)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 3
    assert "unknown_block.yaml:" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_usage_error_exits_2():
    assert runner.invoke(app, ["power", "--basis", "bogus"]).exit_code == 2


def test_render_artifacts_at_a_bundle_lists_what_the_upgrade_will_fetch():
    """`render --artifacts --bundle 2026.11`: what an air-gapped mirror must hold before the
    upgrade (2026.11 moves Kubernetes to 1.36.4; the CNI release is the one tested on each
    minor, Calico v3.33 on both 1.35 and 1.36)."""
    from provisioner import sources

    def versions(*extra: str) -> dict[str, str]:
        result = runner.invoke(app, ["render", str(EXAMPLE), "--artifacts", "--json", *extra])
        assert result.exit_code == 0, result.output
        return {a["name"]: a["version"] for a in json.loads(result.output)["artifacts"]}

    now, then = versions(), versions("--bundle", "2026.11")
    assert now["kubeadm"] == "1.35.8" and then["kubeadm"] == "1.36.4"
    manifest = "calico CNI manifest (calico.yaml)"
    assert (now[manifest], then[manifest]) == (sources.cni_release("calico", "1.35.8")[0],
                                               sources.cni_release("calico", "1.36.4")[0])
    refused = runner.invoke(app, ["render", str(EXAMPLE), "--bundle", "2026.11"])
    assert refused.exit_code != 0 and "--bundle goes with --artifacts" in refused.output
