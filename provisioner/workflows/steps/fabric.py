"""Fabric step of `up`: before the host RoCE step (the configure playbook, roles/roce_host),
the switches its nodes are cabled to get their rendered config (switches/ops.py: diff, push
only the difference, read back, save; undo on failure).

First the static check (fabric.check: hosts vs every rendered switch, link by link): on a
mismatch nothing is pushed. Every switch's outcome is an event (`fabric_push`) of this run
in the state store. A node cabled to a switch that disagrees or was not pushed is failed
here, with the switch and the reason: its host RoCE config would be lossless against a port
that is not. Nodes on other switches go on. A site without managed, cabled switches skips
the step without a word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from provisioner import fabric
from provisioner.errors import ProvisionerError
from provisioner.inventory.cabling import resolve
from provisioner.lifecycle import Phase
from provisioner.switches import ops
from provisioner.switches.base import SwitchOutcome
from provisioner.workflows.engine import Progress
from provisioner.workflows.steps import Context

STEP = "fabric"


def cabled(ctx: Context, hosts: Sequence[str]) -> dict[str, set[str]]:
    """Managed switches with cabled ports -> the given hosts on them."""
    managed = {s.hostname for s in fabric.switch_specs(ctx.loaded)}
    out: dict[str, set[str]] = {}
    for link in resolve(ctx.loaded.site, ctx.loaded.catalog):
        if link.switch in managed and link.node in hosts:
            out.setdefault(link.switch, set()).add(link.node)
    return out


def run(ctx: Context, hosts: Sequence[str],
        connect: ops.DriverFactory = ops.netmiko_factory,
        timeout_s: float = 20.0, *, ports_only: bool = False) -> list[SwitchOutcome]:
    """Check, then push every switch cabled to a node about to be configured (os_ready).
    With `ports_only` (`provision add`), a switch gets the config of those nodes' ports
    alone (with the switch-wide QoS any port needs): no other port is touched, even one
    that drifted (`fabric push` is for the whole switch)."""
    if ctx.stop.is_set():
        return []
    todo = [h for h in hosts if ctx.journal.phase(h) is Phase.OS_READY]
    on = cabled(ctx, todo)
    if not on:
        return []
    journal = ctx.journal
    try:
        report = fabric.check(ctx.loaded)
    except ProvisionerError as exc:  # e.g. a policy the switch OS cannot render
        for switch in sorted(on):
            journal.note(switch, STEP, "fabric_check", f"not rendered: {exc}")
        for host in sorted(set().union(*on.values())):
            journal.fail(host, STEP, f"fabric: switch config not rendered: {exc}")
        return []
    bad_hosts: dict[str, list[str]] = {}
    for m in report.mismatches:
        if m.switch in on:
            bad_hosts.setdefault(m.host, []).append(m.format())
    if bad_hosts:
        for switch in sorted(on):
            journal.note(switch, STEP, "fabric_check", "hosts and switch disagree: nothing "
                         "pushed (`provision fabric check` lists every mismatch)")
        for host in todo:
            if host in bad_hosts:
                journal.fail(host, STEP, "fabric check: " + "; ".join(bad_hosts[host][:3]))
        return []
    if ctx.profile.lab:  # only the lab's stand-ins can be reached from the lab
        for switch in sorted(set(on) - set(ctx.profile.stand_ins)):
            journal.note(switch, STEP, "fabric_not_pushed", "lab: no stand-in for this "
                         "switch (`provision lab up --ssh-hosts` starts them); not pushed")
            on.pop(switch)
    names = sorted(on)
    for name in names:
        journal.emit(Progress(name, STEP, "start", "check passed; diff and push"))
    nodes = sorted(set().union(*on.values())) if ports_only else None
    done = ops.outcomes(ctx.loaded, ctx.env, names, push=True, connect=connect,
                        timeout_s=timeout_s, nodes=nodes, stand_ins=ctx.profile.stand_ins,
                        cut_off=ops.unsaved(journal.store),
                        on_send=ops.write_ahead(journal.store, journal.run_id))
    targets = ops.targets(ctx.loaded, stand_ins=ctx.profile.stand_ins)
    for o in done:
        journal.store.record(o.switch, ops.OUTCOME, asdict(o) | (
            {"ports_of": sorted(on[o.switch])} if ports_only else {}), run_id=journal.run_id)
        stands_in = targets[o.switch].stands_in_for
        text = _summary(o) + (f" (only the ports of {', '.join(sorted(on[o.switch]))})"
                              if ports_only else "") + (
            f" (lab: stand-in for a {stands_in} switch, driven as {o.nos}; its {stands_in} "
            "config was checked, not pushed)" if stands_in else "")
        journal.emit(Progress(o.switch, STEP, "ok" if o.ok else "failed", text))
        ctx.notes.append(f"fabric: {o.switch} {text}")
        if not o.ok:
            for host in sorted(on[o.switch]):
                journal.fail(host, STEP, f"fabric: switch {o.switch} not configured "
                             f"({o.status}: {o.error}); the host RoCE step needs its port "
                             "lossless first")
    return done


def _summary(o: SwitchOutcome) -> str:
    stale = (f"; {len(o.stale)} stale line(s) left in place, first '{o.stale[0]}' "
             "(`provision fabric push --prune` removes them)" if o.stale else "")
    if o.status == "unchanged":
        return ("unchanged: the running config already holds the rendered one"
                + (f"; {o.note}" if o.note else "") + stale)
    if o.status == "pushed":
        return f"pushed {len(o.applied)} line(s), read back and saved" + stale
    return f"{o.status}: {o.error}"
