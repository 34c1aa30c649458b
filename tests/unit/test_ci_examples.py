"""The example pipelines in docs/ci/ are checked by the linters their platforms' users run:
actionlint for the GitHub Actions workflow, the GitLab CI JSON schema (vendored in
check-jsonschema) for the GitLab job; and every `provision upgrade` option they use exists."""

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
ACTIONLINT = shutil.which("actionlint") or (str(BIN / "actionlint")
                                            if (BIN / "actionlint").exists() else None)
CHECK_JSONSCHEMA = shutil.which("check-jsonschema") or (
    str(BIN / "check-jsonschema") if (BIN / "check-jsonschema").exists() else None)


@requires_peer(ACTIONLINT, "actionlint not installed (scripts/bootstrap.sh installs the "
               "ci-lint extra, whose build needs github.com)")
def test_github_actions_example_passes_actionlint() -> None:
    assert ACTIONLINT is not None
    proc = subprocess.run([ACTIONLINT, "-no-color", str(CI_DIR / "github-actions.yml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
