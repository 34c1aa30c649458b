"""Every invalid fixture fails with the right code, file, line and key path.

Each fixture states its expectation in its second line and marks the offending line with
'# <- expect', so the expected line number does not come from the tool itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.errors import InventoryError
from provisioner.inventory import check, load
from provisioner.inventory.findings import errors
from tests.conftest import FIXTURES

INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))


def expectation(path: Path) -> tuple[str, str, int, int]:
    text = path.read_text()
    m = re.search(r"^# expect: code=(\S+) key=(\S+) exit=(\d+)$", text, re.MULTILINE)
    assert m, f"{path} has no expect header"
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "# <- expect" in ln)
    return m.group(1), m.group(2), line, int(m.group(3))


def findings_of(path: Path):
    try:
        loaded = load(path)
    except InventoryError as exc:
        return exc.findings
    return errors(check(loaded))


def test_there_is_a_fixture_per_error_kind():
    codes = {expectation(p)[0] for p in INVALID}
    required = {"unknown-block", "u-overlap", "u-out-of-range", "duplicate-hostname",
                "duplicate-ip", "duplicate-mac", "duplicate-bmc", "address-outside-cidr",
                "inline-secret", "cuda-needs-newer-driver", "open-modules-unsupported",
                "fabric-manager-missing", "power-over-budget", "cooling-over-budget"}
    assert required <= codes


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_fixture_reports_code_line_and_key(path: Path):
    code, key, line, _ = expectation(path)
    found = findings_of(path)
    assert found, "expected at least one error"
    match = [f for f in found if f.code == code]
    assert match, f"no {code} in {[f.code for f in found]}"
    f = match[0]
    assert f.location is not None
    assert Path(f.location.file).name == path.name
    assert f.location.line == line
    assert f.location.key_path == key
    assert f.message


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_cli_exit_code_and_output(path: Path):
    _, key, line, exit_code = expectation(path)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == exit_code, result.output
    assert f"{path.name}:{line}:" in result.output
    assert key in result.output
    assert "Traceback" not in result.output


def test_json_lists_errors_with_locations():
    path = FIXTURES / "invalid" / "duplicate_mac.yaml"
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc["schema"] == "provisioner.validate/v1"
    assert doc["valid"] is False and doc["exit_code"] == 3
    err = doc["errors"][0]
    assert err["code"] == "duplicate-mac"
    assert err["location"]["key_path"] == "placements[1].nodes[0].macs.mgmt"
    assert err["severity"] == "error" and err["category"] == "inventory"


def test_inline_secret_value_is_not_echoed():
    path = FIXTURES / "invalid" / "inline_secret.yaml"
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 3
    assert "hunter2" not in result.output
