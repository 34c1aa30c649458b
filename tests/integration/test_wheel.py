"""The built wheel (not editable), installed into a fresh virtual environment, gives a
working `provision` outside the checkout: playbooks, roles, templates and the example
inventories come from package data. Dependencies are reused from the running environment
(a .pth file), so the test installs only the wheel itself."""

from __future__ import annotations

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
