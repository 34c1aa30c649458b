"""Molecule scenarios (default driver, no Docker) for the key roles, each against an SSH
test host that its create.yml starts in a network namespace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, requires_ssh_hosts

pytestmark = [pytest.mark.integration,
              requires_ssh_hosts]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("role", ["base_os", "roce_host", "container_runtime"])
def test_molecule_scenario(role):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_FORCE_COLOR": "0",
           "NO_COLOR": "1"}
    proc = subprocess.run([str(BIN / "molecule"), "test"], cwd=ROOT / "roles" / role, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    for step in ("syntax", "create", "converge", "idempotence", "verify", "destroy"):
        assert f"{step}: Executed: Successful" in out, step
