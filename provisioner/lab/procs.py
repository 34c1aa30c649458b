"""Processes of the lab: free loopback ports, waiting for a started peer to answer (TCP or
an IPMI ping), spawning with a log. The lab's own start-up logic is in lab/__init__.py."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from provisioner.errors import ConfigError

LOOPBACK = "127.0.0.1"
# The well-known IPMI 1.5 "Get Channel Authentication Capabilities" request (RMCP, no
# session), as sent by ipmitool: any answer means the BMC is up.
IPMI_PING = bytes.fromhex("0600ff07000000000000000000092018c88100388e04b5")


def free_ports(kind: int, count: int) -> list[int]:
    """`count` distinct free loopback ports: all held open until all are chosen, so the
    kernel cannot hand out the same one twice."""
    socks = [socket.socket(socket.AF_INET, kind) for _ in range(count)]
    try:
        for s in socks:
            s.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(ready: Callable[[], bool], timeout_s: float, proc: subprocess.Popen[bytes],
                what: str, where: str, hint: str) -> None:
    """Wait for a started peer to answer; fail at once if its process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"lab: {what} exited at start (code {proc.returncode})",
                              hint=hint)
        if ready():
            return
        time.sleep(0.05)
    raise ConfigError(f"lab: {what} did not answer on {where} in {timeout_s:g} s")


def tcp_open(port: int, host: str = LOOPBACK) -> bool:
    try:
        socket.create_connection((host, port), 0.2).close()
        return True
    except OSError:
        return False


def wait_tcp(port: int, timeout_s: float, proc: subprocess.Popen[bytes], what: str) -> None:
    wait_until(lambda: tcp_open(port), timeout_s, proc, what, f"{LOOPBACK}:{port}",
                "see its log in .provision/lab/")


def ipmi_ping(port: int, timeout_s: float = 0.3, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout_s)
        try:
            s.sendto(IPMI_PING, (host, port))
            s.recvfrom(512)
            return True
        except OSError:
            return False


def wait_ipmi(port: int, timeout_s: float, proc: subprocess.Popen[bytes], what: str) -> None:
    wait_until(lambda: ipmi_ping(port, 0.2), timeout_s, proc, what, f"UDP {port}",
                "is OpenIPMI's ipmi_sim installed? (apt-get install openipmi)")


def spawn(argv: Sequence[str], log: Path, env: dict[str, str] | None = None
           ) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        # A new session: Ctrl-C at the CLI does not reach the lab's processes.
        return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=env)
