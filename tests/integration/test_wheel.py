"""The built wheel (not editable), installed into a fresh virtual environment, gives a
working `provision` outside the checkout: playbooks, roles, templates and the example
inventories come from package data. Dependencies are reused from the running environment
(a .pth file), so the test installs only the wheel itself."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", ".provision",
                              "__pycache__", ".*_cache", ".hypothesis", "tests", "bench")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)  # a clean tree: no build/ from earlier runs
    pip = [sys.executable, "-m", "pip"]
    _ok([*pip, "wheel", "--no-deps", "-q", str(src), "-w", str(tmp / "dist")])
    wheel = next((tmp / "dist").glob("provisioner-*.whl"))
    venv = tmp / "venv"
    _ok([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    _ok([*pip, "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps",
         "--no-index", "--force-reinstall", str(wheel)])
    # Only now the dependencies (first, pip would see this checkout's editable install there).
    purelib = next(venv.glob("lib/python*/site-packages"))
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH (it points at the checkout), no site from the caller."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PROVISION_SITE", "VIRTUAL_ENV")}


def _ok(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_clean_env())
    assert r.returncode == 0, (cmd, r.stdout[-1000:], r.stderr[-2000:])


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "provision"), *args], capture_output=True,
                          text=True, cwd=cwd, env=_clean_env(), timeout=120)


def test_installed_wheel_validates_and_renders_outside_the_checkout(installed, tmp_path):
    where = subprocess.run([str(installed / "bin" / "python"), "-c",
                            "import provisioner; print(provisioner.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True,
                           env=_clean_env()).stdout
    assert where.startswith(str(installed)), where  # the wheel, not the checkout
    result = _run(installed, tmp_path, "validate")
    assert result.returncode == 0, result.stderr[-800:]
    assert "site example" in result.stdout and "_data/inventories/example" in result.stdout
    out = tmp_path / "rendered"
    result = _run(installed, tmp_path, "render", "--out", str(out))
    assert result.returncode == 0, result.stderr[-800:]
    project = out / "project"
    assert (project / "site.yml").is_file() and (project / "ansible.cfg").is_file()
    roles = {p.name for p in (project / "roles").iterdir()}
    assert {p.name for p in (ROOT / "roles").iterdir()} <= roles
    assert str(ROOT) not in (project / "ansible.cfg").read_text()


def _package_dir(venv: Path) -> Path:
    return next(venv.glob("lib/python*/site-packages")) / "provisioner"


def _written_into_package(venv: Path) -> list[Path]:
    """Anything a command left inside the installed package (its data is read-only)."""
    return sorted(p for p in _package_dir(venv).rglob(".provision*"))


def test_every_command_reading_shipped_data_works_from_a_copied_site(installed, tmp_path):
    """From a directory outside the checkout, on a copy of the example site: every command
    that reads the tool's own templates, playbooks, roles, catalog or models."""
    copy = tmp_path / "site"
    shutil.copytree(ROOT / "inventories" / "example", copy,
                    ignore=shutil.ignore_patterns(".provision"))

    def ok(*args: str) -> str:
        r = _run(installed, copy, *args)
        assert r.returncode == 0, (args, r.stdout[-1500:], r.stderr[-1500:])
        return r.stdout

    ok("report", ".")  # templates/report
    page = copy / ".provision" / "report" / "index.html"
    assert page.is_file() and "<svg" in page.read_text()

    assert "hosts and switches agree" in ok("fabric", "check", ".")  # templates/switch
    fabric_out = tmp_path / "fabric"  # not inside the site: the loader reads its *.yaml
    ok("fabric", "render", ".", "--out", str(fabric_out))
    configs = sorted(fabric_out.glob("*/*"))
    assert configs and all(p.read_text().strip() for p in configs), configs

    ok("pxe", "render", ".", "--interface", "eth0")  # templates/pxe
    pxe = copy / ".provision" / "pxe"
    assert "dhcp-range" in (pxe / "dnsmasq.conf").read_text()
    assert any((pxe / "ipxe").iterdir()) and any((pxe / "autoinstall").iterdir())

    ok("render", ".")  # no --out: beside the site, playbooks/ roles/ templates/ copied
    project = copy / ".provision" / "ansible" / "project"
    assert (project / "site.yml").is_file() and (project / "ansible.cfg").is_file()
    assert {p.name for p in (ROOT / "roles").iterdir()} <= {
        p.name for p in (project / "roles").iterdir()}

    catalog = ok("catalog", "--json")  # provisioner/inventory/catalog.yaml
    assert "ipmi-switch-1g" in catalog
    schema_file = tmp_path / "site.schema.json"
    ok("schema", "--out", str(schema_file))
    schema = json.loads(schema_file.read_text())
    assert schema["$schema"].startswith("https://json-schema.org/") and schema["properties"]
    assert _written_into_package(installed) == []


def test_render_of_the_embedded_example_writes_to_the_current_directory(installed, tmp_path):
    """No site, no --out: the embedded example (package data) is rendered into
    ./.provision/ansible, never into site-packages."""
    result = _run(installed, tmp_path, "render")
    assert result.returncode == 0, result.stderr[-800:]
    assert (tmp_path / ".provision" / "ansible" / "project" / "site.yml").is_file()
    assert _written_into_package(installed) == []


def test_commands_on_the_embedded_example_write_into_the_current_directory(installed,
                                                                           tmp_path):
    """No site, no --out: report, pxe render, fabric render and status on the embedded
    example (package data) keep their files and the state store in ./.provision, never in
    site-packages."""
    for args in (("report",), ("pxe", "render", "--interface", "eth0"), ("fabric", "render"),
                 ("status",)):
        result = _run(installed, tmp_path, *args)
        assert result.returncode == 0, (args, result.stdout[-800:], result.stderr[-800:])
    state = tmp_path / ".provision"
    assert (state / "report" / "index.html").is_file()
    assert "dhcp-range" in (state / "pxe" / "dnsmasq.conf").read_text()
    assert (state / "known_hosts").is_file()  # the nodes' host keys, for `up`
    assert sorted((state / "fabric").glob("*/*"))
    assert _written_into_package(installed) == []


def test_lab_up_of_the_embedded_example_keeps_its_overlay_in_the_current_directory(
        installed, tmp_path):
    """`lab up` on the embedded example from the wheel: its overlay (the emulators' loopback
    endpoints) is in ./.provision/lab/, the package is untouched, and the commands that
    follow act on the lab's endpoints; `lab down` removes the overlay."""
    up = _run(installed, tmp_path, "lab", "up", "--no-ssh-hosts")
    try:
        assert up.returncode == 0, (up.stdout[-800:], up.stderr[-800:])
        overlay = tmp_path / ".provision" / "lab" / "overlay.yaml"
        assert "127.0.0.1" in overlay.read_text()
        assert _written_into_package(installed) == []
        power = _run(installed, tmp_path, "bmc", "status", "--json")
        assert power.returncode == 0, (power.stdout[-800:], power.stderr[-800:])
        doc = json.loads(power.stdout)  # every BMC answered: the emulators, not the site's
        assert doc["ok"] and doc["nodes"] and all(n["ok"] for n in doc["nodes"])
    finally:
        down = _run(installed, tmp_path, "lab", "down")
    assert down.returncode == 0, down.stderr[-800:]
    assert not overlay.exists() and _written_into_package(installed) == []
