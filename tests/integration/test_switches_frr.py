"""netmiko (cisco_ios) against FRRouting's vtysh: a real router CLI whose config reaches a
real kernel routing table, in a network namespace the test creates (pvf-frr<pid>, 10.251.1.0/24).

Push only the difference, read back, save (`write memory` lands in frr.conf); a refused line
mid-way is undone and the kernel proves it. Needs root and Debian's `frr` (bootstrap.sh);
on CI (CI=true) a missing peer fails, locally it skips.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from provisioner.secrets import Secret, write_private
from provisioner.switches.base import Endpoint
from provisioner.switches.ops import _switch
from tests.conftest import ROOT

pytestmark = pytest.mark.integration
FRR = Path("/usr/lib/frr")


@dataclass
class Frr:
    port: int
    netns: str
    config: Path


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=10).stdout


@pytest.fixture(scope="module")
def frr() -> Iterator[Frr]:
    if not (FRR / "zebra").exists() or not shutil.which("vtysh"):
        _missing("FRRouting is not installed (apt-get install frr; scripts/bootstrap.sh)")
    if os.geteuid() != 0:
        _missing("FRR in a network namespace needs root")
    try:
        import twisted.conch  # noqa: F401
    except ImportError:
        _missing("twisted[conch] is not installed (the test extra)")
    ns = f"pvf-frr{os.getpid()}"
    conf_dir = Path(tempfile.mkdtemp(prefix=f"{ns}-"))
    vty_dir = Path("/var/run/frr") / ns
    pids: list[int] = []
    server = None
    _sh("ip", "netns", "add", ns)
    try:
        _sh("ip", "-n", ns, "link", "set", "lo", "up")
        for i, dev in enumerate(("swp1", "swp2"), start=1):
            # veth pairs, both ends in the namespace (no `dummy` module on every host)
            _sh("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", f"{dev}p")
            _sh("ip", "-n", ns, "addr", "add", f"10.251.{i}.1/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", f"{dev}p", "up")
            _sh("ip", "-n", ns, "link", "set", dev, "up")
        (conf_dir / "frr.conf").write_text("hostname frrsim\n")
        (conf_dir / "vtysh.conf").write_text("")
        vty_dir.mkdir(parents=True, exist_ok=True)
        conf_dir.chmod(0o755)
        for p in (conf_dir, conf_dir / "frr.conf", conf_dir / "vtysh.conf", vty_dir):
            shutil.chown(p, "frr", "frr")
        for daemon in ("zebra", "staticd"):
            pid_file = conf_dir / f"{daemon}.pid"
            _sh("ip", "netns", "exec", ns, str(FRR / daemon), "-d", "-N", ns, "-P", "0",
                "-i", str(pid_file), "-f", str(conf_dir / "frr.conf"),
                "--vty_socket", str(vty_dir))
            for _ in range(50):
                if pid_file.exists() and pid_file.read_text().strip():
                    break
                time.sleep(0.1)
            pids.append(int(pid_file.read_text()))
        pw_file = conf_dir / "ssh-password"
        write_private(pw_file, "admin\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        server = subprocess.Popen(
            [sys.executable, "-m", "provisioner.lab.vtysh_ssh", str(port),
             str(vty_dir), str(conf_dir), str(pw_file)], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("ready"), line
        yield Frr(port, ns, conf_dir / "frr.conf")
    finally:
        if server is not None:
            server.terminate()  # exactly the processes this fixture started
            server.wait(timeout=10)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        time.sleep(0.3)
        subprocess.run(["ip", "netns", "del", ns], check=False, timeout=10)
        shutil.rmtree(conf_dir, ignore_errors=True)
        shutil.rmtree(vty_dir, ignore_errors=True)


def _routes(ns: str) -> str:
    return _sh("ip", "-n", ns, "route")


def _static(ns: str, prefix: str) -> bool:
    """True when zebra installed `prefix` via 10.251.1.2 in the namespace's kernel table."""
    return any(ln.startswith(prefix) and "via 10.251.1.2" in ln and "proto static" in ln
               for ln in _routes(ns).splitlines())


def test_push_reaches_the_kernel_and_refused_line_is_undone(frr: Frr) -> None:
    from provisioner.switches.netmiko_driver import NetmikoDriver

    drv = NetmikoDriver(Endpoint("frrsim", "cisco_ios", "127.0.0.1", frr.port, "admin",
                                 Secret("admin"), timeout_s=10))
    try:
        assert "hostname" in drv.running_config()
        desired = ("interface swp1\n description dgx01 roce\n"
                   "ip route 10.251.9.0/24 10.251.1.2\n")
        out = _switch(drv, "frrsim", "cisco_ios", desired, push=True)
        assert out.status == "pushed", out.error
        assert out.commands == ("interface swp1", "description dgx01 roce",
                                "ip route 10.251.9.0/24 10.251.1.2")
        assert _static(frr.netns, "10.251.9.0/24")
        assert "ip route 10.251.9.0/24 10.251.1.2" in frr.config.read_text()  # saved
        assert _switch(drv, "frrsim", "cisco_ios", desired, push=True).status == "unchanged"

        broken = desired + ("ip route 10.251.10.0/24 10.251.1.2\nip route not-a-prefix\n"
                            "ip route 10.251.11.0/24 10.251.1.2\n")
        out = _switch(drv, "frrsim", "cisco_ios", broken, push=True)
        assert out.status == "rolled_back", out.error
        assert out.applied == ("ip route 10.251.10.0/24 10.251.1.2",)
        assert out.undone == ("no ip route 10.251.10.0/24 10.251.1.2",)
        routes = _routes(frr.netns)
        assert "10.251.10.0/24" not in routes and "10.251.11.0/24" not in routes
        assert _static(frr.netns, "10.251.9.0/24")  # earlier, saved state untouched

        # A push killed after vtysh took its line and before `write memory`: the running
        # config agrees with the rendering, frr.conf does not. The note (ops.unsaved, from
        # the store) makes the push save it with nothing to send.
        cut = desired + "ip route 10.251.12.0/24 10.251.1.2\n"
        assert drv.apply(["ip route 10.251.12.0/24 10.251.1.2"]).failed is None
        assert "10.251.12.0/24" not in frr.config.read_text()
        diff = _switch(drv, "frrsim", "cisco_ios", cut, push=False, unsaved="cut off")
        assert (diff.status, diff.note) == ("unchanged", "cut off")
        out = _switch(drv, "frrsim", "cisco_ios", cut, push=True, unsaved="cut off")
        assert (out.status, out.saved, out.commands) == ("unchanged", True, ())
        assert "ip route 10.251.12.0/24 10.251.1.2" in frr.config.read_text()  # saved
    finally:
        drv.close()
