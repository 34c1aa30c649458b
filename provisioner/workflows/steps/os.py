"""OS step: wait until the installed OS answers on its management address: a login with
the site's key that finds the install marker (steps.guard), not just any SSH banner (the
Ubuntu live installer runs sshd on the same address). A report from the installer's disk
guard (install.py; recorded by `pxe serve`) ends the wait at once with its reason."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from provisioner.bmc.retry import poll_until
from provisioner.inventory.topology import ansible_host
from provisioner.lifecycle import Phase
from provisioner.render import autoinstall
from provisioner.workflows.engine import StepFailed, StepInterrupted
from provisioner.workflows.steps import Context, guard, intent

LAB_OS_NOTE = ("OS install skipped: the lab provides the OS (an SSH test host in a network "
               "namespace); the BMC boot and power steps ran for real")
LAB_ADOPT_NOTE = ("adopted as installed: the lab's host runs Debian as the stand-in for "
                  "software.os, so its release is not compared; the login, the marker and "
                  "the BMC's power-on ran for real")


@dataclass
class WaitOs:
    """booting -> os_ready: the installed OS answers on the node's management address (a
    login with the site's key finds the install marker)."""

    ctx: Context
    timeout_s: float
    adopt: frozenset[str] = frozenset()  # --adopt: its OS is taken as it is, if supported
    name: str = "wait_os"
    source: Phase = Phase.BOOTING

    def __call__(self, host: str, session: object) -> dict[str, Any]:
        adopting = host in self.adopt
        version: str | None = (autoinstall.release_for(self.ctx.loaded.site.software.os).version
                               if adopting else None)
        if self.ctx.profile.lab:
            self.ctx.journal.note(host, self.name, "os_install_skipped",
                                  LAB_ADOPT_NOTE if adopting else LAB_OS_NOTE)
            version = None
        address = ansible_host(self.ctx.plans[host].node)
        if address is None:
            raise StepFailed("no management address to reach the OS on")
        login = guard.login_for(self.ctx.loaded, self.ctx.profile)
        port = login.port
        last: list[guard.Answer] = []

        def pause(seconds: float) -> None:
            if self.ctx.stop.wait(seconds):
                raise StepInterrupted

        store = self.ctx.journal.store
        booted = intent.last(store, host)

        def attempt() -> bool:
            refused = booted and intent.report_after(store, host, booted)
            if refused:  # the installer's disk guard stopped it: nothing will answer
                raise StepFailed(f"{refused} (the installer on {host} reported it; its "
                                 "disks are as they were)")
            answer = (guard.check_adoptable(address, login, host, version) if adopting
                      else guard.check_installed(address, login))
            last[:] = [answer]
            if answer.state is guard.State.UNSUPPORTED:
                raise StepFailed(f"{answer.detail}; install it instead: up --reinstall {host}")
            return answer.installed

        start = time.monotonic()
        answered = poll_until(attempt, bool, start + self.timeout_s, interval_s=1.0,
                              max_interval_s=10.0, sleep=pause)
        if not answered:
            why = last[0] if last else None
            if why is None or why.state is guard.State.SILENT:
                head = f"no SSH answer from {address}:{port}"
            else:
                head = f"no installed OS answered on {address}:{port}"
            raise StepFailed(f"{head} after {self.timeout_s:g} s (OS install did not finish, "
                             "or the node is not on the management network)"
                             + (f"; last: {why.detail}" if why else ""))
        return {"ssh": f"{address}:{port}", "waited_s": round(time.monotonic() - start, 1),
                "os_install": "adopted" if adopting else self.ctx.profile.os_install,
                "marker": guard.MARKER, **({"adopted": last[0].detail} if adopting else {})}
