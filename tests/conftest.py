"""Shared test helpers."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader
from ansible.template import Templar, trust_as_template
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

from provisioner.lifecycle import LIFECYCLE, Phase
from provisioner.state import StateStore

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE = ROOT / "inventories" / "example"
VSCALER = ROOT / "inventories" / "vscaler-dgx"
ON_CI = os.environ.get("CI") == "true"

# Hypothesis: every failing example a run finds is kept in tests/hypothesis-db/, which is
# committed with the fix, so every later run (CI's included) tries it first. CI reads it
# and writes nothing. HYPOTHESIS_PROFILE=thorough runs each property at its thorough count
# (examples() below); the default is the count that found the bugs so far.
HYPOTHESIS_DB = ROOT / "tests" / "hypothesis-db"
settings.register_profile("dev", database=DirectoryBasedExampleDatabase(HYPOTHESIS_DB))
settings.register_profile("ci", database=ReadOnlyDatabase(
    DirectoryBasedExampleDatabase(HYPOTHESIS_DB)), print_blob=True)
settings.register_profile("thorough", parent=settings.get_profile("dev"))
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci" if ON_CI else "dev")
settings.load_profile(HYPOTHESIS_PROFILE)


def examples(found: int, thorough: int) -> int:
    """A property's max_examples: `found`, the count at which it found the bugs it found
    (each test says which), or `thorough` under HYPOTHESIS_PROFILE=thorough."""
    return thorough if HYPOTHESIS_PROFILE == "thorough" else found


@pytest.fixture(autouse=True)
def _blocking_stdin() -> None:
    """Ansible refuses to start on a non-blocking stdin ("Ansible requires blocking IO on
    stdin/stdout/stderr"). The suite's children share one stdin (pytest's /dev/null while
    it captures), and a child killed mid-run, an OpenSSH client say, can leave that file
    description non-blocking for every later test: made blocking again before each test.
    CI saw molecule and ansible-playbook fail so once."""
    if not os.isatty(0):
        os.set_blocking(0, True)


def requires_peer(available: object, reason: str) -> pytest.MarkDecorator:
    """A test that needs a peer (a program, root): skipped locally when the peer is missing,
    failed on CI (CI=true), so that a green CI means the peer tests ran."""
    if available:
        return pytest.mark.peer(reason)
    if ON_CI:
        return pytest.mark.peer_missing(reason)
    return pytest.mark.skip(reason=reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "peer(reason): needs a peer that is present")
    config.addinivalue_line("markers", "peer_missing(reason): needs a peer that is missing")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("peer_missing"):
        pytest.fail(f"CI=true and a peer is missing: {mark.args[0]}", pytrace=False)


IS_ROOT = os.geteuid() == 0
requires_ssh_hosts = requires_peer(IS_ROOT and shutil.which("debootstrap"),
                                   "SSH test hosts need root and debootstrap")
requires_root = requires_peer(IS_ROOT, "network namespaces need root")
requires_ipmi_sim = requires_peer(shutil.which("ipmi_sim"), "OpenIPMI ipmi_sim not installed "
                                  "(scripts/bootstrap.sh installs it)")
requires_dnsmasq = requires_peer(shutil.which("dnsmasq"),
                                 "dnsmasq not installed (scripts/bootstrap.sh does it)")
requires_git = requires_peer(shutil.which("git"), "git not installed")


@pytest.fixture
def write_site(tmp_path: Path):
    """Write YAML text(s) into a temporary site and return its path."""

    def _write(text: str | dict[str, str], name: str = "site.yaml") -> Path:
        if isinstance(text, str):
            p = tmp_path / name
            p.write_text(text)
            return p
        for fname, body in text.items():
            (tmp_path / fname).write_text(body)
        return tmp_path

    return _write


def add_provisioning(site_yaml: Path, block: str) -> None:
    """Put BLOCK (YAML text starting with `provisioning:`) into SITE_YAML, merged into the
    `provisioning:` mapping the file already has (a second one is a duplicate key)."""
    text = site_yaml.read_text()
    head, _, body = block.lstrip("\n").partition("\n")
    assert head.strip() == "provisioning:", head
    if "\nprovisioning:\n" in "\n" + text:
        text = ("\n" + text).replace("\nprovisioning:\n", "\nprovisioning:\n" + body.rstrip("\n")
                                      + "\n", 1)[1:]
    else:
        text += "\n" + block.lstrip("\n")
    site_yaml.write_text(text)


def moved_to(store: StateStore, hosts: list[str], phase: Phase) -> None:
    """`hosts` enrolled in `store` and moved along the lifecycle up to `phase` (what a run
    that got that far leaves), for tests that start from there."""
    store.enroll(hosts)
    for h in hosts:
        for p in LIFECYCLE[1:LIFECYCLE.index(phase) + 1]:
            store.transition(h, p)


def scratch_lab_network() -> tuple[IPv4Network, IPv4Address, IPv4Address]:
    """A random 10.250.<n>.0/24 no running lab uses: (network, gateway .1, host .5)."""
    third = secrets.randbelow(200) + 20
    return (IPv4Network(f"10.250.{third}.0/24"), IPv4Address(f"10.250.{third}.1"),
            IPv4Address(f"10.250.{third}.5"))


# The roles' own filter plugins, as a play that runs the role loads them.
for _plugins in sorted(ROOT.glob("roles/*/filter_plugins")):
    filter_loader.add_directory(str(_plugins))


def apt_reads(parts: Path, lists: Path, source_list: Path | str = "/dev/null"
              ) -> subprocess.CompletedProcess[str]:
    """Real apt reading a sources directory (and a sources.list) as it would on a node:
    `apt-get indextargets` parses every entry and names each index file, fetching nothing."""
    return subprocess.run(
        ["apt-get", "-o", f"Dir::Etc::SourceParts={parts}", "-o",
         f"Dir::Etc::SourceList={source_list}", "-o", f"Dir::State::Lists={lists}",
         "indextargets", "--no-release-info"], capture_output=True, text=True, check=False)


def _templar(ctx: dict[str, object]) -> Templar:
    return Templar(loader=DataLoader(), variables=ctx)


def ansible_eval(text: str, **ctx: object) -> Any:
    """A role's template (a variable, an argv, a message) rendered by Ansible's own templar,
    as the play renders it: its filters and tests, native types, and string literals read
    as Ansible reads them (plain Jinja unescapes backslashes that Ansible keeps)."""
    return _templar(ctx).template(trust_as_template(text))


def holds(expr: str, **ctx: object) -> bool:
    """Whether a role's bare expression (a `when`, `that` or `failed_when`) is true in ctx,
    evaluated as Ansible evaluates a conditional."""
    return bool(_templar(ctx).evaluate_conditional(trust_as_template(expr)))


def fabric_state(nvidia_smi_q: str) -> dict[str, Any]:
    """fabric_manager's parse of an `nvidia-smi -q` output, as its fabric_state.yml reads it:
    the read's register and the Fabric sections, pending and failed, in play order."""
    role_vars = yaml.safe_load((ROOT / "roles/fabric_manager/vars/main.yml").read_text())
    ctx: dict[str, Any] = {"fabric_manager_gpu_fabric": {"stdout": nvidia_smi_q}}
    for name in ("fabric_manager_fabric", "fabric_manager_fabric_pending",
                 "fabric_manager_fabric_failed"):
        ctx[name] = ansible_eval(role_vars[name], **ctx)
    return ctx


def run_assert(task: dict[str, Any], **ctx: object) -> tuple[bool, str]:
    """An assert task as the play runs it: its vars in order, then whether every `that`
    holds, and its fail_msg (rendered whatever the outcome)."""
    ctx = dict(ctx)
    for name, expr in (task.get("vars") or {}).items():
        ctx[name] = ansible_eval(expr, **ctx)
    check = task["ansible.builtin.assert"]
    that = check["that"] if isinstance(check["that"], list) else [check["that"]]
    return all(holds(c, **ctx) for c in that), ansible_eval(check["fail_msg"], **ctx)


def edited_example(tmp_path: Path, old: str, new: str, name: str = "site") -> Path:
    """A copy of the example site (without its lab state) whose site.yaml has `old`, which
    must be there, replaced once by `new`."""
    site = tmp_path / name
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    text = (site / "site.yaml").read_text()
    assert old in text, old
    (site / "site.yaml").write_text(text.replace(old, new, 1))
    return site


def ios_leaf_example(tmp_path: Path, name: str = "site") -> Path:
    """A copy of the example whose RoCE leaf is driven as an IOS-style switch (cabled on
    Ethernet0/n), so a test's own SwitchDriver stands in for it."""
    site = tmp_path / name
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    placements = site / "placements.yaml"
    placements.write_text(placements.read_text().replace(
        "management: {os: cumulus, credentials: switch}",
        "management: {os: cisco_ios, credentials: switch}"))
    site_yaml = site / "site.yaml"
    site_yaml.write_text(site_yaml.read_text().replace('"swp{n}s0"', '"Ethernet0/{n}"'))
    return site


def role_task(role: str, name: str, file: str = "tasks/main.yml") -> dict[str, object]:
    """The task (or handler) called `name` in a role's file."""
    tasks = yaml.safe_load((ROOT / "roles" / role / file).read_text())
    return next(t for t in tasks if t.get("name") == name)


def role_template(role: str, name: str, **context: Any) -> str:
    """A role's template rendered with plain Jinja2 as Ansible's template module searches
    (the role, and its templates/ for includes), undefined names failing."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(
                                 [str(ROOT / "roles" / role),
                                  str(ROOT / "roles" / role / "templates")]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters["to_json"] = lambda v: __import__("json").dumps(v)
    env.filters["bool"] = bool
    return env.get_template(f"templates/{name}").render(**context)
