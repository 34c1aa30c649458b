"""Secret files, the .provision directory, and transport warnings from validate."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.inventory import check, load
from provisioner.secrets import write_private
from provisioner.state import StateStore
from provisioner.state.dir import state_dir
from tests.conftest import FIXTURES, requires_git

VALID = (FIXTURES / "valid_small.yaml").read_text()
REDFISH = "bmc: {protocol: redfish, address: 10.2.0.11, credentials: bmc}"
runner = CliRunner()


def test_write_private_over_a_readable_file_never_exposes_the_secret(tmp_path):
    """The old file (0644, maybe open elsewhere) never holds the new text: it is replaced."""
    path = tmp_path / "bmc-password"
    path.write_text("old\n")
    path.chmod(0o644)
    with path.open() as reader:  # someone who could read the old file, e.g. another user
        write_private(path, "s3cret\n")
        reader.seek(0)
        assert reader.read() == "old\n"
    assert path.read_text() == "s3cret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["bmc-password"]  # no temp file left


@requires_git
def test_state_dir_is_private_and_ignored_by_git(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "site.yaml").write_text(VALID)
    StateStore(tmp_path / ".provision" / "state.db")
    d = tmp_path / ".provision"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert (d / ".gitignore").read_text().splitlines()[-1] == "*"
    status = subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain",
                             "--untracked-files=all"], capture_output=True, text=True,
                            check=True).stdout
    assert "site.yaml" in status and ".provision" not in status


def test_state_dir_fixes_a_wide_mode(tmp_path):
    (tmp_path / ".provision").mkdir(mode=0o755)
    os.chmod(tmp_path / ".provision", 0o755)
    d = state_dir(tmp_path)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700 and (d / ".gitignore").exists()


@pytest.mark.parametrize(("bmc", "code"), [
    ("bmc: {protocol: redfish, address: 10.2.0.11, credentials: bmc, scheme: http}",
     "bmc-plain-http"),
    ("bmc: {protocol: redfish, address: 10.2.0.11, credentials: bmc, tls: {verify: false}}",
     "bmc-tls-unverified"),
])
def test_validate_warns_on_plain_http_and_unverified_tls(write_site, bmc, code):
    assert REDFISH in VALID
    path = write_site(VALID.replace(REDFISH, bmc))
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0
    warns = [w for w in json.loads(result.stdout)["warnings"] if w["code"] == code]
    assert len(warns) == 1
    want = VALID.split("\n").index(next(x for x in VALID.split("\n") if REDFISH in x)) + 1
    assert warns[0]["location"]["line"] == want and warns[0]["severity"] == "warning"
    assert "gpu01" in warns[0]["message"]


def test_transport_warnings_are_said_of_the_site_as_written_while_a_lab_runs(tmp_path):
    """validate checks the site as written: its plain-HTTP BMC is said while a lab runs for
    it too, and the lab's own plain-HTTP emulators (applied after the checks) are not."""
    from provisioner.lab import overlay

    site = tmp_path / "site.yaml"
    site.write_text(VALID.replace(REDFISH, REDFISH.replace("}", ", scheme: http}")))
    assert any(f.code == "bmc-plain-http" for f in check(load(site)))
    lab = overlay.path_of(tmp_path)
    lab.parent.mkdir(parents=True)
    lab.write_text("bmc:\n  gpu01: {address: 127.0.0.1, port: 8000, scheme: http}\n")
    assert any(f.code == "bmc-plain-http" for f in check(load(site)))
    site.write_text(VALID)
    assert not any(f.code.startswith("bmc-") for f in check(load(site)))
    lab_site = overlay.load(site)
    assert lab_site.site.placements[0].nodes[0].bmc.scheme == "http"  # the lab's endpoint


def test_state_dir_that_cannot_be_made_is_a_state_error(tmp_path):
    from provisioner.errors import StateError

    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StateError, match="cannot prepare"):
        state_dir(tmp_path / "file")
