"""Where the generated files of a site go: .provision/ beside the site, and, for the
embedded example of an installed provisioner (a site inside the package), in the current
directory, never into the read-only package. `fabric render` writes there too, so a site
directory is never made to read its own output as inventory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import profile, resources
from provisioner.cli import app
from provisioner.errors import InventoryError
from provisioner.inventory import load
from provisioner.render import render
from provisioner.state.dir import location, state_dir
from tests.conftest import EXAMPLE

runner = CliRunner()


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(package, its example site, the current directory): the example as a wheel ships it,
    inside a package directory, with the current directory elsewhere."""
    package = tmp_path / "site-packages" / "provisioner"
    site = package / "_data" / "inventories" / "example"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    monkeypatch.setattr(resources, "_package", lambda: package.resolve())
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return package, site, cwd


def _written_into(package: Path) -> list[Path]:
    return sorted(package.rglob(".provision*"))


def test_state_of_the_shipped_example_is_in_the_current_directory(shipped) -> None:
    package, site, cwd = shipped
    assert resources.is_shipped(site)
    assert location(site) == cwd / ".provision"
    assert state_dir(site) == cwd / ".provision"
    assert profile.for_site(load(site)).state_path == cwd.resolve() / ".provision" / "state.db"
    assert profile.for_site(load(site), lab=True).state_path.is_relative_to(cwd.resolve())
    assert _written_into(package) == []


def test_a_site_of_ones_own_keeps_its_state_beside_it(tmp_path, monkeypatch) -> None:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    monkeypatch.chdir(tmp_path)
    assert not resources.is_shipped(site)
    assert state_dir(site) == site / ".provision"
    assert profile.for_site(load(site)).state_path == site.resolve() / ".provision" / "state.db"


def test_commands_on_the_shipped_example_write_nothing_into_the_package(shipped) -> None:
    package, site, cwd = shipped
    for args in (["report", str(site)], ["pxe", "render", str(site), "--interface", "eth0"],
                 ["fabric", "render", str(site)], ["render", str(site)],
                 ["status", str(site)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    state = cwd / ".provision"
    assert (state / "report" / "index.html").is_file()
    assert (state / "pxe" / "dnsmasq.conf").is_file()
    assert sorted(p.name for p in (state / "fabric").glob("*/*"))
    cfg = (state / "ansible" / "project" / "ansible.cfg").read_text()
    assert str(cwd.resolve() / ".provision" / "known_hosts") in cfg  # render's known_hosts
    assert str(package) not in cfg
    assert _written_into(package) == []


def test_fabric_render_from_inside_the_site_leaves_it_loadable(tmp_path, monkeypatch) -> None:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    monkeypatch.chdir(site)
    result = runner.invoke(app, ["fabric", "render", "."])
    assert result.exit_code == 0, result.output
    assert sorted((site / ".provision" / "fabric").glob("*/nvue.yaml"))
    assert not (site / "build").exists()
    result = runner.invoke(app, ["validate", "."])
    assert result.exit_code == 0, result.output


def test_the_loader_skips_what_provisioner_generated(tmp_path) -> None:
    """.provision/ and a render's output inside the site are not read; a rendered switch
    config dropped among the site's files is refused with a hint that says what it is."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    files = len(load(site).sources.files)
    (site / ".provision" / "fabric" / "leaf01").mkdir(parents=True)
    (site / ".provision" / "fabric" / "leaf01" / "nvue.yaml").write_text("- set: {}\n")
    render(load(site), site / "out")  # an Ansible project with its YAML, inside the site
    assert len(load(site).sources.files) == files
    config = site / "leaf01" / "nvue.yaml"
    config.parent.mkdir()
    config.write_text("# leaf01: RoCE fabric settings\n# Rendered by provisioner from the "
                      "site inventory; edit the inventory, not this file.\n- set: {}\n")
    with pytest.raises(InventoryError) as err:
        load(site)
    (finding,) = err.value.findings
    assert finding.location.file.endswith("leaf01/nvue.yaml")
    assert "provisioner's output" in finding.hint
