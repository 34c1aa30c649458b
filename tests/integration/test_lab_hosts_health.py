"""The lab's SSH hosts, alive and dead: a host whose systemd is killed by PID makes `lab
status` exit 5 naming it; a host whose init dies while `lab up` waits fails the start at
once, naming it and how it ended, and leaves nothing running; a `lab up` killed half way
leaves a record `lab prune` and `lab down` end everything from; the inotify instances a
lab host holds stay within what lab/limits.py reserves per host.

Real lab hosts (systemd in namespaces, lab/hosts.py) for a generated site of three IPMI
nodes. One lab at a time on this machine: run under `flock /tmp/h/lab.lock`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from provisioner import lab as lab_mod
from provisioner import pids
from provisioner.errors import ConfigError
from provisioner.lab import hostwatch, limits, orphans
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from tests.conftest import ROOT, requires_ssh_hosts
from tests.integration.conftest import provision, requires_ipmi_sim

pytestmark = [pytest.mark.integration, requires_ipmi_sim, requires_ssh_hosts]

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc t@lab"
HOSTS = ("n001", "n002", "n003")


def write_site(base: Path) -> Path:
    """(`base` short: gpg's agent socket lives under the lab's directory, at most 108
    bytes.) Three IPMI nodes (ipmi_sim starts at once) on a management network no lab uses."""
    third = secrets.randbelow(200) + 20
    lines = ["site: {name: health,",
             f"       ssh: {{authorized_keys: ['{KEY}']}}}}",
             "credentials:",
             "  bmc: {username: admin, password: {env: HEALTH_UNUSED_PASSWORD}}",
             "networks:",
             f"  - {{name: mgmt, kind: management, cidr: 10.246.{third}.0/24, "
             f"gateway: 10.246.{third}.1}}",
             f"  - {{name: oob, kind: oob, cidr: 10.247.{third}.0/24}}",
             "racks:",
             "  - name: r01",
             "    height_u: 42",
             "    feeds: [{name: A, phase: three, voltage_v: 415, breaker_a: 63}]",
             "    cooling_kw: 40",
             "placements:",
             "  - {rack: r01, u: 1, block: hci-2u4n, nodes: ["]
    for i, name in enumerate(HOSTS):
        lines.append(f"      {{hostname: {name}, bmc: {{protocol: ipmi, address: "
                     f"10.247.{third}.{i + 10}, credentials: bmc}}, addresses: {{mgmt: "
                     f"10.246.{third}.{i + 10}}}}},")
    lines.append("    ]}")
    site = base / "site"
    site.mkdir()
    (site / "site.yaml").write_text("\n".join(lines) + "\n")
    return site


def record(site: Path) -> Path:
    return site / ".provision" / "lab" / "lab.json"


def netns_list() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                          check=True).stdout


def until(cond, what: str, bound_s: float = 120.0) -> None:
    """Poll `cond` (a bound only so that a broken lab fails instead of hanging)."""
    end = time.monotonic() + bound_s
    while not cond():
        assert time.monotonic() < end, what
        time.sleep(0.05)


def inotify_of(pid_set: set[int]) -> int:
    count = 0
    for pid in pid_set:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
    return count


def test_a_killed_host_makes_status_exit_5_naming_it(tmp_path_factory):
    site = write_site(tmp_path_factory.mktemp("hh"))
    loaded = load(site)
    state = lab_mod.up(loaded, ssh_hosts=True, start_timeout_s=120)
    try:
        assert [h.name for h in state.ssh_hosts] == list(HOSTS)
        assert state.starting == [] and json.loads(record(site).read_text())["starting"] == []
        # a finished lab is no leftover: `lab prune` leaves its running hosts alone
        left = orphans.find()
        assert {h.netns for h in state.ssh_hosts} <= set(left.busy)
        assert not {h.netns for h in state.ssh_hosts} & set(left.stranded)
        # what limits.py reserves per host covers what a booted lab host holds
        for h in state.ssh_hosts:
            held = inotify_of(orphans.host_pids(h.netns))
            assert 0 < held <= limits.INSTANCES_PER_HOST, (h.name, held)
        assert limits.inotify_use().instances >= len(HOSTS)

        ok = provision("lab", "status", str(site))
        assert ok.returncode == 0, ok.stdout + ok.stderr

        victim = state.ssh_hosts[1]
        init = hostwatch.init_pid(victim.pid)
        assert init is not None
        assert pids.send(init, signal.SIGKILL, ticks=pids.start_ticks(init))
        until(lambda: pids.start_ticks(victim.pid) != victim.start_ticks,
              "the launcher outlived its host's init")
        text = provision("lab", "status", str(site))
        assert text.returncode == 5, text.stdout + text.stderr
        assert "dead: ssh host n002" in text.stdout
        doc = json.loads(provision("lab", "status", str(site), "--json").stdout)
        assert doc["running"] is False and doc["dead"] == ["ssh host n002"]
        assert [(h["name"], h["alive"]) for h in doc["ssh_hosts"]] == [
            ("n001", True), ("n002", False), ("n003", True)]
    finally:
        lab_mod.down(loaded)


def test_a_host_dying_at_start_fails_up_at_once_and_leaves_nothing_running(
        tmp_path_factory):
    site = write_site(tmp_path_factory.mktemp("hh"))
    loaded = load(site)
    killed: list[int] = []
    done = threading.Event()

    def kill_n002() -> None:
        """n002's init, killed by PID as soon as `lab up` has recorded the host."""
        while not done.is_set():
            try:
                hosts = json.loads(record(site).read_text()).get("ssh_hosts", [])
            except (OSError, ValueError):
                hosts = []
            for h in hosts:
                init = hostwatch.init_pid(h["pid"]) if h["name"] == "n002" else None
                if init is not None and pids.send(init, signal.SIGKILL,
                                                  ticks=pids.start_ticks(init)):
                    killed.append(init)
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_n002, daemon=True)
    killer.start()
    try:
        # a deadline far beyond the test's own time: only failing fast ends it
        with pytest.raises(ConfigError) as failed:
            lab_mod.up(loaded, ssh_hosts=True, start_timeout_s=3600)
        done.set()
        killer.join()
        assert killed
        # (util-linux 2.38's unshare reports a child killed by SIGKILL as exit 1,
        # "sigprocmask unblock failed", in the host's log)
        assert failed.value.message.startswith(
            "lab host n002: its init (systemd, PID 1 of the host) ended with exit status ")
        assert "before SSH answered on " in failed.value.message
        assert failed.value.hint is not None and "host.log" in failed.value.hint
        state = lab_mod.status(loaded)
        assert state is not None and state.starting == []
        assert [h.name for h in state.ssh_hosts][:2] == ["n001", "n002"]
        assert not state.anything_runs()  # every process, host and switch of it ended
        listed = netns_list()
        assert not any(h.netns in listed for h in state.ssh_hosts)
    finally:
        done.set()
        lab_mod.down(loaded)


def test_a_killed_up_leaves_what_prune_and_down_end(tmp_path_factory):
    site = write_site(tmp_path_factory.mktemp("hh"))
    up = subprocess.Popen([sys.executable, "-m", "provisioner", "lab", "up", str(site)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: list[dict[str, object]] = []

    def hosts_recorded() -> bool:
        if up.poll() is not None:
            return True
        try:
            seen[:] = json.loads(record(site).read_text()).get("ssh_hosts", [])
        except (OSError, ValueError):
            return False
        return len(seen) >= 2

    try:
        until(hosts_recorded, "lab up recorded no host", 600)
        up.kill()  # SIGKILL: no cleanup of its own
        output = up.communicate()[0].decode()
        assert len(seen) >= 2, output  # the old `up` wrote lab.json only at its end
        spaces = {str(h["netns"]) for h in seen}
        left = orphans.find()
        assert spaces <= set(left.stranded), (left, spaces)
        assert all("ended before it finished" in left.stranded[n] for n in spaces)
        pruned = provision("lab", "prune")
        assert pruned.returncode == 0, pruned.stdout + pruned.stderr
        for netns in spaces:
            assert f"ended lab host {netns}" in pruned.stdout
            assert netns not in netns_list()
            assert not orphans.host_pids(netns)
        state = lab_mod.status(load(site))
        assert state is not None and state.processes  # the BMC emulators it had started
        down = provision("lab", "down", str(site))
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(p.alive() for p in state.processes)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        provision("lab", "down", str(site))
