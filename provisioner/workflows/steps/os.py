"""OS step: wait until the installed OS answers on its management address."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from provisioner.bmc.retry import poll_until
from provisioner.inventory.topology import ansible_host
from provisioner.lifecycle import Phase
from provisioner.workflows.engine import StepFailed, StepInterrupted
from provisioner.workflows.steps import Context

LAB_OS_NOTE = ("OS install skipped: the lab provides the OS (an SSH test host in a network "
               "namespace); the BMC boot and power steps ran for real")


def ssh_banner(address: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when an SSH server answers there (its banner starts with SSH-)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


@dataclass
class WaitOs:
    """booting -> os_ready: an SSH server answers on the node's management address."""

    ctx: Context
    timeout_s: float
    name: str = "wait_os"
    source: Phase = Phase.BOOTING

    def __call__(self, host: str, session: object) -> dict[str, Any]:
        if self.ctx.profile.lab:
            self.ctx.journal.note(host, self.name, "os_install_skipped", LAB_OS_NOTE)
        address = ansible_host(self.ctx.plans[host].node)
        if address is None:
            raise StepFailed("no management address to reach the OS on")
        port = self.ctx.loaded.site.site.ssh.port

        def pause(seconds: float) -> None:
            if self.ctx.stop.wait(seconds):
                raise StepInterrupted

        start = time.monotonic()
        answered = poll_until(lambda: ssh_banner(address, port), bool,
                              start + self.timeout_s, interval_s=1.0, max_interval_s=10.0,
                              sleep=pause)
        if not answered:
            raise StepFailed(f"no SSH answer from {address}:{port} after "
                             f"{self.timeout_s:g} s (OS install did not finish, or the "
                             "node is not on the management network)")
        return {"ssh": f"{address}:{port}", "waited_s": round(time.monotonic() - start, 1),
                "os_install": self.ctx.profile.os_install}
