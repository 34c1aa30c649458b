"""The NVUE/SONiC shell driver (netmiko_driver.NetmikoShell) against a real bash over a real
SSH server (the lab's Twisted conch server, tests/integration/peers/bash_ssh.py): exit
statuses come back, and a file sent as base64 lines arrives byte for byte.

This tests the transport only. The NVUE and SONiC commands themselves (`nv config ...`,
`config apply-patch`...) have no simulator here and are unit-tested against documented
transcripts (tests/unit/test_switch_staged.py); no fake `nv` or `config` binary is used.
Listens on 127.0.0.1 with a free port: no lab address, no lab lock needed.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.secrets import Secret, write_private
from provisioner.switches.base import Endpoint
from tests.conftest import ROOT, requires_peer

try:
    import twisted.conch  # noqa: F401
    HAVE_CONCH = True
except ImportError:
    HAVE_CONCH = False

pytestmark = [pytest.mark.integration,
              requires_peer(HAVE_CONCH, "twisted[conch] is not installed (pyproject)")]


@pytest.fixture(scope="module")
def shell_ep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Endpoint, Path]]:
    work = tmp_path_factory.mktemp("bash-ssh")
    pw = work / "password"
    write_private(pw, "s3cret-shell\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = subprocess.Popen([sys.executable, "-m", "tests.integration.peers.bash_ssh",
                               str(port), str(pw), str(work)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("ready"), line
        yield Endpoint("leaf01", "sonic", "127.0.0.1", port, "admin",
                       Secret("s3cret-shell"), 20.0), work
    finally:
        server.terminate()  # exactly the process this fixture started
        server.wait(timeout=10)


def test_exit_status_and_output_come_back(shell_ep: tuple[Endpoint, Path]) -> None:
    from provisioner.switches.netmiko_driver import NetmikoShell

    ep, _ = shell_ep
    sh = NetmikoShell(ep)
    try:
        assert sh.run("true")[0] == 0
        assert sh.run("false")[0] == 1
        assert sh.run("(exit 42)")[0] == 42
        rc, out = sh.run("echo checkpoint-made")
        assert rc == 0 and "checkpoint-made" in out and "__provision_rc" not in out
    finally:
        sh.close()


def test_a_file_arrives_byte_for_byte(shell_ep: tuple[Endpoint, Path]) -> None:
    from provisioner.switches.netmiko_driver import NetmikoShell

    ep, work = shell_ep
    # a SONiC-sized patch: thousands of characters, quotes, slashes, a non-ASCII description
    patch = [{"op": "add", "path": f"/PORT/Ethernet{i * 8}/description",
              "value": f"dgx{i:02d} roce 'lossless' \"ü\" $(no) `no`"} for i in range(64)]
    text = json.dumps(patch, indent=1) + "\n"
    assert len(text) > 5000
    target = work / "provision-fabric-patch.json"
    sh = NetmikoShell(ep)
    try:
        sh.put(str(target), text)
        assert target.read_text() == text
        assert not (work / "provision-fabric-patch.json.b64").exists()
    finally:
        sh.close()
