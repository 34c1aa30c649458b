"""netmiko against a real SSH switch simulator (fake-switches' cisco_generic on 127.0.0.1):
read the running config, push only the difference, read back, save; a refused line mid-way
is undone and the result says exactly which lines were applied.

On CI (CI=true) a missing simulator fails these tests; locally they skip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.secrets import Secret
from provisioner.state import StateStore
from provisioner.switches import cli_diff
from provisioner.switches.base import Endpoint
from provisioner.switches.ops import _switch
from tests.conftest import EXAMPLE, ROOT
from tests.integration.conftest import provision

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def fake_switch() -> Iterator[int]:
    try:
        import fake_switches  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("fake-switches is not installed (scripts/bootstrap.sh installs it)")
        pytest.skip("fake-switches is not installed (scripts/bootstrap.sh installs it)")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.peers.fake_switch",
         f"cisco_generic:{port}:leafsim"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.1)
        else:
            pytest.fail("fake switch did not listen in 20 s")
        yield port
    finally:
        proc.terminate()  # exactly the process this fixture started
        proc.wait(timeout=10)


def _driver(port: int):  # type: ignore[no-untyped-def]
    from provisioner.switches.netmiko_driver import NetmikoDriver

    return NetmikoDriver(Endpoint("leafsim", "cisco_ios", "127.0.0.1", port, "admin",
                                  Secret("admin"), timeout_s=10))


def test_read_push_read_back_and_refused_line(fake_switch: int) -> None:
    drv = _driver(fake_switch)
    try:
        assert "hostname leafsim" in drv.running_config()
        res = drv.apply(["interface FastEthernet0/5", "description rack1 dgx05", "bogus x",
                         "description never-sent"])
        assert res.applied == ("interface FastEthernet0/5", "description rack1 dgx05")
        assert res.failed == "bogus x" and res.error
        running = drv.running_config()
        assert "description rack1 dgx05" in running and "never-sent" not in running
    finally:
        drv.close()


def test_refused_line_is_undone(fake_switch: int) -> None:
    drv = _driver(fake_switch)
    try:
        assert drv.apply(["interface FastEthernet0/4", "description old"]).failed is None
        desired = "interface FastEthernet0/4\n description new\n bogus-setting 1\n"
        out = _switch(drv, "leafsim", "cisco_ios", desired, push=True)
        assert out.status == "rolled_back"
        assert out.applied == ("interface FastEthernet0/4", "description new")
        assert out.undone == ("interface FastEthernet0/4", "description old")
        assert out.error and "'bogus-setting 1' refused" in out.error
        block = [p for p in cli_diff.paths(drv.running_config())
                 if p[0] == "interface FastEthernet0/4"]
        assert ("interface FastEthernet0/4", "description old") in block
        assert ("interface FastEthernet0/4", "description new") not in block
    finally:
        drv.close()


@pytest.fixture
def sim_site(tmp_path: Path, fake_switch: int) -> Path:
    """The example site with leaf01 on the simulator and mgmt01 cabled but unreachable."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    pl = site / "placements.yaml"
    dead = _free_port()  # nothing listens here
    pl.write_text(pl.read_text()
                  .replace("management: {os: cumulus, credentials: switch}",
                           "management: {os: cisco_ios, credentials: switch, "
                           f"address: 127.0.0.1, port: {fake_switch}}}")
                  .replace("management: {os: cisco_ios, credentials: switch}",
                           "management: {os: cisco_ios, credentials: switch, "
                           f"address: 127.0.0.1, port: {dead}}}"))
    st = site / "site.yaml"
    st.write_text(st.read_text().replace('port_pattern: "swp{n}s0"}', (
        'port_pattern: "FastEthernet0/{n}"}\n  links:\n'
        "    - {node: dgx02, nic: roce, switch: mgmt01, switch_port: FastEthernet0/2}")))
    return site


def test_cli_diff_push_one_failure_does_not_block(sim_site: Path) -> None:
    env = os.environ | {"PROVISION_SWITCH_PASSWORD": "admin"}
    assert provision("validate", str(sim_site), env=env).returncode == 0
    proc = provision("fabric", "diff", str(sim_site), "--json", env=env, timeout=60)
    assert proc.returncode == 10, proc.stdout + proc.stderr
    by = {s["switch"]: s for s in json.loads(proc.stdout)["switches"]}
    assert by["leaf01"]["status"] == "changes"
    assert by["leaf01"]["commands"] == ["interface FastEthernet0/1", "description dgx01 roce"]
    assert by["mgmt01"]["status"] == "failed" and "cannot reach" in by["mgmt01"]["error"]
    assert "admin" not in proc.stdout.replace('"admin"', "")  # no secret in the output

    proc = provision("fabric", "push", str(sim_site), "--dry-run", "--limit", "leaf01",
                     env=env, timeout=60)
    assert proc.returncode == 0 and "changes" in proc.stdout, proc.stdout + proc.stderr
    proc = provision("fabric", "push", str(sim_site), "--json", env=env, timeout=60)
    assert proc.returncode == 10
    by = {s["switch"]: s for s in json.loads(proc.stdout)["switches"]}
    assert by["leaf01"]["status"] == "pushed" and by["mgmt01"]["status"] == "failed"
    # each switch's outcome is in the site's event log, under one recorded run
    store = StateStore(sim_site / ".provision" / "state.db")
    pushed = {e.hostname: e for e in store.events() if e.kind == "fabric_push"}
    assert pushed["leaf01"].detail["status"] == "pushed"
    assert pushed["mgmt01"].detail["status"] == "failed"
    assert pushed["leaf01"].run_id == pushed["mgmt01"].run_id
    assert store.runs(1)[0]["command"] == "fabric push" and store.runs(1)[0]["status"] == "failed"
    assert "admin" not in (sim_site / ".provision" / "state.db").read_bytes().decode(
        "utf-8", "replace").replace('"admin"', "")
    proc = provision("fabric", "diff", str(sim_site), "--limit", "leaf01", "--json",
                     env=env, timeout=60)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["switches"][0]["status"] == "unchanged"
