"""The Ansible side for real: ansible-lint (production profile), syntax check of the
rendered project, and the validation play refusing an unsupported combination."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import render, runner
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from tests.conftest import EXAMPLE, FIXTURES, ROOT

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent


def test_ansible_lint_production_profile():
    proc = subprocess.run([str(BIN / "ansible-lint"), "--offline", "--profile", "production",
                           "playbooks", "roles"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stderr


@pytest.mark.parametrize("playbook", ["site.yml", "validate.yml", "verify.yml", "ping.yml",
                                      "join.yml", "upgrade_gate.yml", "upgrade_reboot.yml"])
def test_rendered_project_passes_syntax_check(tmp_path, playbook):
    out = render.render(load(EXAMPLE), tmp_path / "out", lab=True).out
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "../inventory", playbook,
                           "--syntax-check"], cwd=out / "project", capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Could not match supplied host pattern" not in proc.stderr


def test_validation_play_accepts_the_example(tmp_path):
    out = render.render(load(EXAMPLE), tmp_path / "out", lab=True).out
    result = runner.run_playbook(out, "validate.yml")
    assert result.ok, [f"{e.host}: {e.message}" for e in result.failures]
    assert result.changed_total == 0
    assert {"dgx01", "dgx02", "cp01"} <= set(result.hosts)


def test_validation_play_refuses_cuda_newer_than_the_driver(tmp_path):
    """The tool's `validate` refuses this site too; the play refuses it on its own, so a
    rendered project run by hand cannot install it either."""
    out = render.render(load(FIXTURES / "sites" / "refused_cuda.yaml"), tmp_path / "out").out
    result = runner.run_playbook(out, "site.yml")
    assert not result.ok and result.rc != 0
    failed = result.failures
    assert [e.host for e in failed] == ["gpu01"]
    assert "CUDA 13.0 needs NVIDIA driver >= 580.65.06" in failed[0].message
    assert "570.124.06" in failed[0].message
    assert result.changed_total == 0  # nothing was changed anywhere
    # any_errors_fatal: no later play ran on any host
    assert not [e for e in result.events if e.role == "base_os"]
