"""Fixtures that start real peers (the lab's sushy-tools and ipmi_sim) and stop them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provisioner import lab as lab_mod
from provisioner import render, runner
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.profile import for_site
from tests.conftest import EXAMPLE, ROOT, requires_ipmi_sim

__all__ = ["ConvergedPair", "converged_pair", "provision", "requires_ipmi_sim", "ssh_lab"]

# Tests that start no SSH lab, make no network namespace and bind nothing fixed (loopback
# on free ports only), marked beside_the_lab: scripts/test.sh runs them in a pytest of their
# own beside the tests of the SSH lab, which keep one process and their file order (one lab
# at a time: its hosts' addresses and bridge are fixed). Not xdist's loadgroup: with
# pytest 9.2 its groups do not take (the suffix it writes into _nodeid is not read back).
BESIDE_THE_LAB_FILES = {
    "test_ansible.py", "test_apt_other_sources.py", "test_bmc_budget.py", "test_bmc_lab.py",
    "test_bmc_protocol.py", "test_kernel_host.py", "test_kube_client.py",
    "test_kubernetes_holder.py", "test_report_browser.py", "test_runner_secrets.py",
    "test_secrets_tls.py", "test_switch_shell.py", "test_switches.py", "test_upgrade_cli.py",
    "test_wheel.py"}
# A test in another file can be marked beside_the_lab itself (test_upgrade_bmc_cycle's
# first test: the emulator and a closed port on loopback, no lab host).
# the benches that start BMC emulators at most (the others start the SSH lab)
BESIDE_THE_LAB_BENCHES = {"add_scale.py", "bmc_fanout.py", "inventory_scale.py",
                          "upgrade_sim.py"}


def beside_the_lab(item: pytest.Item) -> bool:
    name = item.path.name
    if name == "test_benches_smoke.py":
        spec = getattr(item, "callspec", None)
        return spec is not None and spec.params.get("bench") in BESIDE_THE_LAB_BENCHES
    return name in BESIDE_THE_LAB_FILES


# Files run last, in this order, after the rest in file order: the upgrade tests use the
# converged pair (converged_pair) first; the execution nodes test then takes its reference
# run and stops its lab, to start one of its own on fresh hosts.
LAST_FILES = ("test_upgrade_lab.py", "test_execution_nodes.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts and beside_the_lab(item):
            item.add_marker(pytest.mark.beside_the_lab)
    last = {name: i + 1 for i, name in enumerate(LAST_FILES)}
    items.sort(key=lambda item: last.get(item.path.name, 0))  # stable: file order kept


@dataclass
class ConvergedPair:
    """The example site in the lab with cp01 and dgx01 converged by site.yml, run locally
    on fresh hosts at the site's pins; `result` is that run."""

    site: Path
    state: Any  # lab.LabState
    result: runner.RunResult
    stop: Callable[[], None]


PAIR = ["cp01", "dgx01"]  # the first control plane and a DGX: the two richest host kinds


@pytest.fixture(scope="session")
def converged_pair(tmp_path_factory: Any) -> Iterator[ConvergedPair]:
    """One converge of the roles for two tests (CI time): the upgrade tests start from it
    (the pins installed, as `up` leaves a node), and the execution nodes test compares its
    runs across execution nodes with it, then stops the lab (`stop`) for fresh hosts."""
    with ExitStack() as stack:
        site, state = stack.enter_context(ssh_lab(tmp_path_factory, EXAMPLE, "pair"))
        loaded = load(site)
        out = render.render(loaded, loaded.base_dir / ".provision" / "ansible", lab=True).out
        result = runner.run_playbook(out, "site.yml", limit=",".join(PAIR))
        assert result.ok, [f"{e.host} | {e.task}: {e.message}" for e in result.failures]
        yield ConvergedPair(site, state, result, stack.close)


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    """A private copy of the example site, so lab state lands in the test's tmp dir."""
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    return dest


@pytest.fixture
def lab(site_copy: Path):
    """The example site with its lab running; yields the reloaded site (overlay applied)."""
    loaded = load(site_copy)
    lab_mod.up(loaded)
    try:
        yield load(site_copy)
    finally:
        lab_mod.down(loaded)


@contextmanager
def ssh_lab(tmp_path_factory: Any, source: Path, name: str) -> Iterator[tuple[Path, Any]]:
    """A private copy of a site with its lab running, SSH test hosts included; stopped
    (exactly the processes it started) on the way out."""
    site = tmp_path_factory.mktemp(name) / "site"
    shutil.copytree(source, site, ignore=shutil.ignore_patterns(".provision"))
    loaded = load(site)
    state = lab_mod.up(loaded, ssh_hosts=True)
    try:
        yield site, state
    finally:
        lab_mod.down(loaded)


def provision(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
              check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "provisioner", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout, env=env or os.environ.copy(),
                          check=False)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def control_planes_upgraded(site: Path, bundle: str) -> list[str]:
    """The site's servers recorded ready (the nodes were brought up earlier: test_up shows
    that run) and its control planes recorded on `bundle`, as an upgrade run that stopped
    after them leaves them; the servers' names."""
    from provisioner.inventory.bundle_models import load_bundle
    from provisioner.inventory.models import Role
    from provisioner.inventory.topology import servers
    from provisioner.lab.overlay import load  # the site with the running lab's endpoints
    from provisioner.lifecycle import Phase
    from provisioner.profile import for_site
    from provisioner.state import StateStore
    from tests.conftest import moved_to

    loaded = load(site)
    plans = servers(loaded)
    hosts = [p.hostname for p in plans]
    store = StateStore(for_site(loaded).state_path)
    moved_to(store, hosts, Phase.READY)
    versions = load_bundle(site, bundle).bundle.components()
    for p in plans:
        if Role.CONTROL_PLANE in p.roles:
            store.record(p.hostname, "upgraded", {"bundle": bundle, "versions": versions})
    return hosts


def forget_state(site: Path) -> Path:
    """Forget every node (a fresh store), keeping the lab running; the store's path. Its
    backups are moved aside, as `up` asks before it starts a new store over a deleted one
    (kept under the site: the search for secrets reads them too)."""
    db = for_site(load(site)).state_path
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    backups = Path(str(db) + ".backups")
    if backups.exists():
        n = len(list(db.parent.glob(f"{db.name}.aside*.backups")))
        backups.rename(db.parent / f"{db.name}.aside{n}.backups")
    return db

