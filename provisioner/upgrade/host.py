"""The host side of a rolling upgrade: the rendered roles at the bundle's versions, the
reboot (through the OS, or the BMC when the OS does not come back), and the gate's host
checks (driver and fabric manager versions, GPU count, DCGM diagnostic).

`Installer` is the seam: `AnsibleInstaller` runs the rendered project through ansible-runner
(steps.ansible, runner.py); the simulation in the tests implements the same three methods.
Each returns, per host, None when it passed or the reason it did not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from provisioner import bmc as bmc_mod
from provisioner import render as render_mod
from provisioner import runner as runner_mod
from provisioner.bmc import BmcDriver, BmcTarget, PowerAction
from provisioner.bmc.retry import poll_until
from provisioner.errors import ProvisionerError
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import ansible_host, servers
from provisioner.profile import Profile
from provisioner.workflows.steps import guard

Outcome = dict[str, str | None]  # host -> None (passed) or the reason it failed

UPGRADE_PLAYBOOK = "site.yml"  # the roles, rendered at the bundle's versions
# The kubernetes role's tasks a control plane runs in place, before any drain, when the
# bundle moves Kubernetes: the new kubeadm and its `kubeadm upgrade apply|node`.
CONTROL_PLANE_FIRST_TAG = "kubernetes_control_plane_first"
REBOOT_PLAYBOOK = "upgrade_reboot.yml"
GATE_PLAYBOOKS = ("verify.yml", "upgrade_gate.yml")
# The roles reboot a node for its new driver mid-play (roles/nvidia_driver/handlers), as
# their own checks after it (nvidia-smi at the pinned version, fabric manager, DCGM) need
# the new module loaded; the reboot step then skips that node (the lab's real reboots
# showed it rebooting twice), and power cycles it through the BMC if that reboot failed.
ROLE_REBOOT_TASK = "Reboot for the new driver"
BMC_CYCLE_TIMEOUT_S = 180.0  # the BMC reports the node on again within this
OS_POLL_S = 5.0  # how often to try SSH while waiting for the OS after a power cycle


class Installer(Protocol):
    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome: ...

    def control_plane_first(self, host: str) -> str | None: ...

    def gate(self, batch: Sequence[str]) -> Outcome: ...


def _per_host(result: runner_mod.RunResult, batch: Sequence[str]) -> Outcome:
    out: Outcome = {}
    for h in batch:
        failure = result.failure_of(h)
        if failure is not None:
            out[h] = f"{result.playbook}: {failure.describe()} (log: {result.artifact_dir})"
        elif not result.ok and not result.any_host_failed:
            out[h] = f"{result.playbook} ended {result.status} (rc {result.rc})"
        elif not result.ok and result.aborted:  # any_errors_fatal: its roles did not finish
            out[h] = (f"{result.playbook}: stopped after another node of the batch failed; "
                      f"its roles did not finish (log: {result.artifact_dir})")
        else:
            out[h] = None
    return out


@dataclass
class AnsibleInstaller:
    """The real host side: one rendered project per bundle, beside the state store."""

    loaded: LoadedSite  # the site as the bundle leaves it (plan.site_at)
    profile: Profile
    env: Mapping[str, str] = field(repr=False)  # the process's: PROVISION_* passwords
    bundle: str
    forks: int = 20
    os_timeout_s: float = 900.0
    on_note: Callable[[str, str], None] = lambda _h, _t: None
    make_driver: Callable[[BmcTarget], BmcDriver] = bmc_mod.make_driver
    skipped: dict[str, int] = field(default_factory=dict)
    _project: Path | None = None

    def project(self) -> Path:
        if self._project is None:
            out = self.profile.state_path.parent / f"ansible-upgrade-{self.bundle}"
            self._project = render_mod.render(self.loaded, out, lab=self.profile.lab).out
        return self._project

    def _run(self, playbook: str, batch: Sequence[str], tags: str | None = None
             ) -> runner_mod.RunResult:
        # the command's graceful stop (cli/common.py) keeps its signal handlers
        return runner_mod.run_playbook(self.project(), playbook, limit=",".join(batch),
                                       tags=tags, forks=self.forks,
                                       cancel=runner_mod.keep_signal_handlers)

    def control_plane_first(self, host: str) -> str | None:
        """One control plane's kubeadm upgrade, in place (None when it passed)."""
        return _per_host(self._run(UPGRADE_PLAYBOOK, [host], CONTROL_PLANE_FIRST_TAG),
                         [host])[host]

    def install(self, batch: Sequence[str], reboot: Sequence[str]) -> Outcome:
        """The roles at the bundle's versions, then a reboot for the nodes that need one
        and did not get it from the roles."""
        result = self._run(UPGRADE_PLAYBOOK, batch)
        out = _per_host(result, batch)
        done = {e.host for e in result.real_changes if e.task == ROLE_REBOOT_TASK}
        stuck = [h for h in batch if any(e.host == h and e.task == ROLE_REBOOT_TASK
                                         for e in result.failures)]
        cycled = {h: self._cycle(h, out[h]) for h in stuck}
        out.update({h: why for h, why in cycled.items() if why is not None})
        back = [h for h, why in cycled.items() if why is None]
        if back:  # the roles again, now on the new module (no reboot is due this time)
            out.update(_per_host(self._run(UPGRADE_PLAYBOOK, back), back))
        rebooted = done | set(stuck)
        again = [h for h in reboot if out.get(h) is None and h not in rebooted]
        if again:
            out.update(self.reboot(again))
        return out

    def reboot(self, hosts: Sequence[str]) -> Outcome:
        """Reboot through the OS (the playbook waits for it to come back); a node whose OS
        did not reboot or come back is power cycled through its BMC."""
        out: Outcome = {}
        for h, why in _per_host(self._run(REBOOT_PLAYBOOK, hosts), hosts).items():
            out[h] = why if why is None else self._cycle(h, why)
        return out

    def _cycle(self, host: str, why: str | None) -> str | None:
        """A reboot through the OS failed: power cycle through the BMC and wait for the OS
        (None when it answers, else the reason)."""
        self.on_note(host, f"reboot through the OS failed ({why}); power cycle through the "
                     "BMC")
        return self._bmc_cycle(host)

    def _bmc_cycle(self, host: str) -> str | None:
        try:  # a missing BMC secret fails this node, not the run
            targets = bmc_mod.targets(self.loaded, self.env, host)
        except ProvisionerError as exc:
            return f"the OS did not come back after the reboot; no BMC to power cycle: {exc}"
        if not targets:
            return "the OS did not come back after the reboot and the node has no BMC"
        drv = self.make_driver(targets[0])
        try:
            state = drv.set_power(PowerAction.CYCLE, timeout_s=BMC_CYCLE_TIMEOUT_S)
        except ProvisionerError as exc:  # BmcError: the node fails, the run goes on
            return f"the OS did not come back after the reboot; BMC power cycle failed: {exc}"
        finally:
            drv.close()
        self.on_note(host, f"power cycled through the BMC ({targets[0].protocol}); power is "
                     f"{state.value}; waiting up to {self.os_timeout_s:g} s for the OS")
        plan = next((p for p in servers(self.loaded) if p.hostname == host), None)
        address = ansible_host(plan.node) if plan is not None else None
        if address is None:
            return None
        login = guard.login_for(self.loaded, self.profile)
        if poll_until(lambda: guard.check_installed(address, login).installed, bool,
                      time.monotonic() + self.os_timeout_s, interval_s=OS_POLL_S,
                      max_interval_s=OS_POLL_S):
            return None
        return f"no OS answered on {address} {self.os_timeout_s:g} s after the BMC power cycle"

    def gate(self, batch: Sequence[str]) -> Outcome:
        out: Outcome = {h: None for h in batch}
        for playbook in GATE_PLAYBOOKS:
            todo = [h for h in batch if out[h] is None]
            if not todo:
                break
            result = self._run(playbook, todo)
            for h, why in _per_host(result, todo).items():
                out[h] = why
            for e in result.events:
                if e.message.startswith("not verified:"):
                    self.on_note(e.host, e.message)
        return out
