"""BMC steps: the rack budget gate, inspect (facts against the building block) and boot
(one-time PXE or virtual media, then power on). Protocol details stay in provisioner.bmc."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provisioner import bmc as bmc_mod
from provisioner import install, power
from provisioner.bmc import BmcDriver, BmcTarget, BootDevice, PowerAction, PowerState
from provisioner.bmc.base import HardwareFacts
from provisioner.bmc.firmware import versions as firmware_versions
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import HostPlan, ansible_host
from provisioner.lifecycle import BEFORE_POWER_ON, STEP_FROM, Phase
from provisioner.state import StateStore
from provisioner.upgrade import firmware
from provisioner.workflows.engine import Session, StepFailed
from provisioner.workflows.steps import Context, guard, intent


def compare_facts(server: HostPlan, facts: HardwareFacts) -> tuple[list[str], list[str]]:
    """(problems, notes) from what the BMC reports against the declared building block.
    Facts a BMC does not report are notes, not problems (many report no GPUs)."""
    problems: list[str] = []
    notes: list[str] = []
    want_gpus = server.block.gpu.count if server.block.gpu else 0
    if facts.gpus:
        if facts.gpu_count != want_gpus:
            problems.append(f"the BMC reports {facts.gpu_count} GPU(s); block "
                            f"{server.block.name} has {want_gpus}")
    elif want_gpus:
        notes.append("the BMC reports no GPU inventory; GPUs are counted at verify")
    declared = {m.lower(): net for net, m in server.node.macs.items()}
    reported = {m.lower() for m in facts.macs}
    if declared and reported:
        for mac, net in sorted(declared.items()):
            if mac not in reported:
                problems.append(f"MAC {mac} ({net}) is not among the BMC's NICs "
                                f"({', '.join(sorted(reported))})")
    elif declared:
        notes.append("the BMC reports no NIC MACs; the declared MACs are not checked")
    return problems, notes


def blocked_racks(loaded: LoadedSite) -> dict[str, str]:
    """Racks whose feeds, upstream circuit or cooling cannot carry what is placed in them
    -> why (every rack on an over-budget circuit: powering them on may trip it)."""
    report = power.budget(loaded.site, loaded.catalog)
    blocked = {r.name: "; ".join(f.message for f in r.failures)
               for r in report.racks if any(f.check in ("power", "cooling") for f in r.failures)}
    for c in report.circuits:
        for f in c.failures:
            for rack in c.racks:
                blocked[rack] = "; ".join(filter(None, (blocked.get(rack), f.message)))
    return blocked


def budget_gate(ctx: Context, hosts: Sequence[str]) -> None:
    """Refuse to power on nodes in a rack whose feeds or cooling cannot carry it."""
    blocked = blocked_racks(ctx.loaded)
    for host in hosts:
        phase = ctx.journal.phase(host)
        why = blocked.get(ctx.plans[host].placement.rack)
        if why and phase in BEFORE_POWER_ON:
            ctx.journal.fail(host, STEP_FROM[phase], f"not powered on: rack "
                             f"{ctx.plans[host].placement.rack} is over budget ({why})")


class _Driver:
    """A node's BMC connection, opened on first use (only the BMC steps need one)."""

    def __init__(self, target: BmcTarget | None,
                 make_driver: Callable[[BmcTarget], BmcDriver]) -> None:
        self.target = target
        self.make_driver = make_driver
        self._driver: BmcDriver | None = None

    def get(self) -> BmcDriver | None:
        if self._driver is None and self.target is not None:
            self._driver = self.make_driver(self.target)
            self._driver.validate()
        return self._driver

    def close(self) -> None:
        if self._driver is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                self._driver.close()


def driver_session(ctx: Context, hosts: Sequence[str], request_timeout_s: float,
                   make_driver: Callable[[BmcTarget], BmcDriver]) -> Session:
    """Per node: its BMC driver (None for a node without a BMC), closed after its steps.
    Credentials are resolved once for all nodes, before any thread starts."""
    need = [h for h in hosts if ctx.journal.phase(h) in BEFORE_POWER_ON
            and ctx.plans[h].node.bmc is not None]
    targets = {t.node: t for t in bmc_mod.targets(
        ctx.loaded, ctx.env, ",".join(need), request_timeout_s=request_timeout_s)
        } if need else {}

    @contextlib.contextmanager
    def session(host: str) -> Iterator[_Driver]:
        drv = _Driver(targets.get(host), make_driver)
        try:
            yield drv
        finally:
            drv.close()

    return session


@dataclass
class Inspect:
    """enrolled -> inspected: the BMC's hardware facts must match the building block."""

    ctx: Context
    name: str = "inspect"
    source: Phase = Phase.ENROLLED

    def __call__(self, host: str, session: _Driver) -> dict[str, Any]:
        driver = session.get()
        if driver is None:
            self.ctx.journal.note(host, self.name, "no_bmc", "no BMC: inspect and boot "
                                  "skipped; the OS must already be installed")
            return {"bmc": False}
        facts = driver.hardware_facts()
        problems, notes = compare_facts(self.ctx.plans[host], facts)
        if problems:
            raise StepFailed("hardware does not match the inventory: " + "; ".join(problems))
        return {"vendor": facts.vendor, "model": facts.model, "serial": facts.serial,
                "gpus": facts.gpu_count, "macs": list(facts.macs),
                "power": facts.power_state.value, "notes": notes,
                "firmware": firmware_versions(facts.firmware)}


def refuse_installed(ctx: Context, host: str, reinstall: frozenset[str]) -> dict[str, Any]:
    """The guard before any boot override or power change: a node that answers as installed
    (guard.check_installed) or that the cluster has as a member (guard.ask_cluster, asked
    only when SSH did not already say installed) is refused unless named by --reinstall.
    Returns what was found (recorded with the boot step)."""
    address = ansible_host(ctx.plans[host].node)
    if address is None:
        return {"installed_check": "no management address"}
    login = guard.login_for(ctx.loaded, ctx.profile)
    answer = guard.check_installed(address, login)
    cluster = None
    if answer.state not in (guard.State.INSTALLED, guard.State.UNVERIFIED):
        planes = [(p.hostname, a) for p in ctx.plans.values() if p.control_plane
                  and (a := ansible_host(p.node)) is not None]
        planes.sort(key=lambda p: p[0] == host)  # the node itself last
        cluster = guard.ask_cluster(host, planes, login)
        answer = guard.decide(answer, cluster)
    if answer.state in (guard.State.INSTALLED, guard.State.UNVERIFIED) and host not in reinstall:
        raise StepFailed(f"{answer.detail}; refusing to reinstall: name it with "
                         f"--reinstall {host}")
    return {"installed_check": answer.state.value,
            **({"cluster": cluster.membership.value} if cluster else {}),
            **({"reinstall": True} if host in reinstall else {})}


@dataclass
class Boot:
    """inspected -> booting: one-time PXE (or virtual media), then power on from off. A node
    that is on is asked first whether it answers as installed (refuse_installed): then it is
    left alone, unless --reinstall names it. A node that is off cannot answer: its installer
    refuses disks that hold something (install.py) unless this run's intent names it. A node
    on whose boot a killed run asked for is not booted again (intent.under_way)."""

    ctx: Context
    power_timeout_s: float
    reinstall: frozenset[str] = frozenset()
    adopt: frozenset[str] = frozenset()  # installed already (--adopt): no boot override
    name: str = "boot"
    source: Phase = Phase.INSPECTED

    def __call__(self, host: str, session: _Driver) -> dict[str, Any]:
        driver = session.get()
        if driver is None:
            return {"bmc": False}
        os_name = self.ctx.loaded.site.software.os
        if os_name.startswith("dgx-os") and host not in self.adopt:
            # the installer it would boot is Ubuntu's: DGX OS would not be what came up
            raise StepFailed(f"software.os {os_name}: the tool does not network-install DGX "
                             f"OS (the node would come up as plain Ubuntu without NVIDIA's "
                             f"stack); install DGX OS, then: up --adopt {host}")
        if host in self.adopt:  # its own disk boots: powered on if off, nothing else
            was = driver.get_power_state()
            if was is PowerState.OFF:
                driver.set_power(PowerAction.ON, self.power_timeout_s)
            return {"boot": "adopted: no boot override", "was": was.value, "power": "on"}
        # Nothing changes before the guard: a node that is on may be an installed, running
        # one (its OS answers); a node that is off cannot answer and is not running.
        was = driver.get_power_state()
        store, run_id = self.ctx.journal.store, self.ctx.journal.run_id
        prior = intent.under_way(store, host, run_id)
        if prior is not None and was is not PowerState.OFF:
            # a killed run's boot, accepted by the BMC: no second override (that would
            # start its install again); this run waits for it (a grant only if named now)
            intent.record(store, host, run_id=run_id, token=prior.token,
                          reinstall=host in self.reinstall, resumed_from=prior.run_id)
            return {"boot": "under way", "resumed_from_run": prior.run_id,
                    "was": was.value, "intent_id": prior.token}
        found: dict[str, Any] = {"installed_check": "skipped: power off"}
        if was is not PowerState.OFF:
            found = refuse_installed(self.ctx, host, self.reinstall)
        # written ahead: the boot this step is about to cause, before the BMC is asked;
        # the boot server serves its token (and the grant, if named) to the installer
        token = install.new_token()
        intent.record(store, host, run_id=run_id, token=token,
                      reinstall=host in self.reinstall)
        node = self.ctx.plans[host].node
        prov = self.ctx.loaded.site.provisioning
        method = node.boot or prov.boot
        device = BootDevice.PXE
        if method == "virtual_media":
            if not prov.iso_url:
                raise StepFailed("boot: virtual_media but provisioning.iso_url is not set")
            driver.insert_virtual_media(prov.iso_url)
            device = BootDevice.CD
        if was is not PowerState.OFF:  # a running node boots its installer only from off
            driver.set_power(PowerAction.OFF, self.power_timeout_s)
        # Set from off, right before the power-on: an IPMI BMC clears the boot flags when no
        # chassis control follows within 60 s (IPMI 2.0 §28.12, Boot Options parameter 5),
        # which a slow power-off would otherwise outlast.
        setting = driver.set_boot_device(device, persistent=False)
        driver.set_power(PowerAction.ON, self.power_timeout_s)
        return {"boot": method, "device": setting.device.value, "verified": setting.verified,
                "was": was.value, "power": "on", "intent_id": token, **found}


def record_firmware(store: StateStore, facts: Mapping[str, HardwareFacts]) -> list[str]:
    """`bmc inventory`'s firmware versions into the state store, for the nodes it has
    enrolled: what `upgrade plan` moves a bundle's firmware from, after an update done by
    other means (`up` reads them again only when it inspects). The nodes recorded."""
    known = {n.hostname for n in store.nodes()}
    done = []
    for host, f in sorted(facts.items()):
        if host in known and f.firmware:
            store.record(host, firmware.SEEN, {"firmware": firmware_versions(f.firmware)})
            done.append(host)
    return done
