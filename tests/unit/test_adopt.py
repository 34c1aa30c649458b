"""`up --adopt`: a node that already runs the site's OS is taken as installed: powered on
from its own disk if off, never sent a boot override, its OS release checked over SSH
(steps/guard.check_adoptable, faked here; the lab test logs in for real)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from provisioner.errors import ConfigError
from provisioner.inventory import load
from provisioner.state import Phase
from provisioner.workflows.steps import guard
from tests.conftest import EXAMPLE
from tests.unit.test_up_logic import (
    FakeDriver,
    no_ssh_answers,  # noqa: F401 - an autouse fixture: no node's OS answers unless told
    run_up,
)


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    return dest


def _adoptable(monkeypatch, answers: dict[str, guard.Answer]) -> list[tuple[str, str | None]]:
    """check_adoptable answers per host; returns (host, the release it was asked for)."""
    asked: list[tuple[str, str | None]] = []

    def check(address, login, hostname, version, timeout_s=5.0):
        asked.append((hostname, version))
        return answers[hostname]

    monkeypatch.setattr(guard, "check_adoptable", check)
    return asked


def test_an_adopted_node_gets_no_boot_override_and_its_release_is_checked(site_copy,
                                                                          monkeypatch):
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    FakeDriver.on = {"dgx02"}  # dgx01 off, dgx02 on: both run a factory DGX OS
    asked = _adoptable(monkeypatch, {
        "dgx01": guard.Answer(guard.State.INSTALLED, "adopted: runs ubuntu 22.04"),
        "dgx02": guard.Answer(guard.State.INSTALLED, "adopted: runs ubuntu 22.04")})
    result, _ = run_up(site_copy, limit="dgx*", adopt="dgx*")
    assert FakeDriver.calls["dgx01"] == ["facts", "power on"]  # from its own disk
    assert FakeDriver.calls["dgx02"] == ["facts"]  # on already: nothing asked of the BMC
    assert sorted(asked) == [("dgx01", "22.04"), ("dgx02", "22.04")]  # software.os's release
    for n in result.nodes:
        assert "wait_os" in n.steps and n.failed_phase in (None, Phase.OS_READY,
                                                            Phase.CONFIGURED), n


def test_an_os_the_site_cannot_take_fails_at_once_with_the_way_on(site_copy, monkeypatch):
    FakeDriver.gpus = {"dgx01": 8}
    _adoptable(monkeypatch, {"dgx01": guard.Answer(
        guard.State.UNSUPPORTED, "runs ubuntu 20.04; the site's software.os installs Ubuntu "
        "22.04: not adopted")})
    result, _ = run_up(site_copy, limit="dgx01", adopt="dgx01", os_timeout_s=3600)
    (dgx01,) = result.nodes
    assert dgx01.failed_phase is Phase.BOOTING
    assert dgx01.reason is not None and "runs ubuntu 20.04" in dgx01.reason
    assert "up --reinstall dgx01" in dgx01.reason


def test_a_node_is_adopted_or_reinstalled_not_both(site_copy):
    with pytest.raises(ConfigError, match="both --adopt and --reinstall"):
        run_up(site_copy, adopt="dgx01", reinstall="dgx*")
    with pytest.raises(ConfigError, match="--adopt 'gb\\*' matches none"):
        run_up(site_copy, adopt="gb*")
    assert load(site_copy)  # nothing written to the inventory


def test_a_dgx_os_site_boots_no_node_and_adopts_the_named(site_copy, monkeypatch):
    """DGX OS is never network-installed (the installer booted would be Ubuntu's, and the
    driver role leaves the driver to DGX OS): a node not adopted is refused before any BMC
    change; validate says so first (a warning: adopting every node is a valid site)."""
    from provisioner.inventory.checks import check

    text = (site_copy / "site.yaml").read_text()
    (site_copy / "site.yaml").write_text(text.replace("os: ubuntu-22.04", "os: dgx-os-6"))
    (finding,) = [f for f in check(load(site_copy)) if f.code == "dgx-os-adopt-only"]
    assert finding.severity.value == "warning" and "--adopt" in (finding.hint or "")
    FakeDriver.gpus = {"dgx01": 8, "dgx02": 8}
    _adoptable(monkeypatch, {"dgx02": guard.Answer(guard.State.INSTALLED, "adopted")})
    result, _ = run_up(site_copy, limit="dgx*", adopt="dgx02")
    by = {n.hostname: n for n in result.nodes}
    assert by["dgx01"].failed_phase is Phase.INSPECTED
    assert "does not network-install DGX OS" in (by["dgx01"].reason or "")
    assert "up --adopt dgx01" in (by["dgx01"].reason or "")
    assert FakeDriver.calls["dgx01"] == ["facts"]  # no override, no power
    assert "wait_os" in by["dgx02"].steps
