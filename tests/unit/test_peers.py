"""A test whose peer is missing is skipped locally and fails on CI (CI=true)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

BODY = """
from tests.conftest import requires_peer

@requires_peer(None, "the frobnicator is not installed")
def test_needs_a_missing_peer():
    assert True

@requires_peer("/usr/bin/true", "present")
def test_needs_a_present_peer():
    assert True
"""


@pytest.mark.parametrize(("ci", "want"), [("true", "1 passed, 1 error"),
                                          ("", "1 passed, 1 skipped")])
def test_missing_peer_fails_on_ci_and_skips_locally(tmp_path, ci, want):
    (tmp_path / "test_peer_probe.py").write_text(BODY)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q",
                        "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert want in r.stdout, r.stdout[-1500:]
    assert (r.returncode != 0) == bool(ci)
    if ci:
        assert "CI=true and a peer is missing: the frobnicator is not installed" in r.stdout
