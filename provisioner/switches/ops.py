"""`fabric diff` and `fabric push`: per switch, read the running config, diff it against the
rendered one, send only the difference, read back, verify, save; undo on failure.

Switches run on the step engine's fan-out (bounded, a deadline per switch); one switch's
failure never stops the others. With a state store, the push holds the site's lock and
each switch's outcome lands in its event log. The driver factory is injected: the core
never imports netmiko.

A push is saved or it is not done: before the first line goes to a switch, an event
(`fabric_push_sending`) is written ahead; its outcome follows it. A run killed between the
two (the switch took the lines, `write memory` never came) leaves the running config
changed and the saved one not, and a later diff compares the running config only, so says
"unchanged": `unsaved` finds those switches in the store, `fabric diff` says so, and the
next push saves them although it has nothing to send.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from provisioner import fabric, lazy
from provisioner.credentials import CredentialResolver
from provisioner.errors import FabricError, InventoryError, ProvisionerError
from provisioner.fabric.onyx import expand_ranges
from provisioner.fanout import fan_out
from provisioner.inventory.cabling import endpoints
from provisioner.inventory.checks import check as check_inventory
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import NetworkKind
from provisioner.inventory.topology import select
from provisioner.inventory.valid import refusing
from provisioner.state import StateStore
from provisioner.switches import cli_diff, staged
from provisioner.switches.base import Endpoint, SentLines, SwitchDriver, SwitchOutcome

# CLI dialects get a SwitchDriver, NVUE and SONiC a login shell (switches/staged.py)
DriverFactory = Callable[[Endpoint], SwitchDriver | staged.Shell]

SENDING = "fabric_push_sending"  # written ahead of a switch's first line
OUTCOME = "fabric_push"  # the switch's outcome, after the save (or the undo)
UNSAVED_NOTE = ("a push to it (run {run}) was cut off after it sent lines and before it "
                "recorded the save: the running config may hold lines the saved one lacks")


def unsaved(store: StateStore) -> dict[str, int | None]:
    """Switch -> the run whose push was cut off between sending lines and its outcome."""
    last: dict[str, tuple[int, str, int | None]] = {}
    for e in [*store.events(kind=SENDING), *store.events(kind=OUTCOME)]:
        if e.hostname is not None and e.id > last.get(e.hostname, (-1, "", None))[0]:
            last[e.hostname] = (e.id, e.kind, e.run_id)
    return {name: run for name, (_, kind, run) in last.items() if kind == SENDING}


def write_ahead(store: StateStore, run_id: int | None) -> Callable[[str], None]:
    def sending(name: str) -> None:
        store.record(name, SENDING, {"run": run_id}, run_id=run_id)
    return sending


def netmiko_factory(ep: Endpoint) -> SwitchDriver | staged.Shell:
    netmiko_driver = lazy.module("provisioner.switches.netmiko_driver")  # loaded late
    made: SwitchDriver | staged.Shell = (netmiko_driver.NetmikoShell(ep)
                                         if ep.nos in staged.FLAVORS
                                         else netmiko_driver.NetmikoDriver(ep))
    return made


@dataclass(frozen=True, slots=True)
class Target:
    """What one switch gets: the dialect it is driven in and the text rendered for it. In
    the lab a stand-in (lab/switch.py) gets the rendering of its own dialect for the same
    ports; `stands_in_for` then names the switch's real OS, whose config is not pushed."""

    nos: str
    text: str
    stands_in_for: str | None = None


def targets(loaded: LoadedSite, nodes: Collection[str] | None = None,
            stand_ins: Mapping[str, str] | None = None) -> dict[str, Target]:
    """Each switch's target; with `nodes`, the config of their ports alone (plus the
    switch-wide QoS the OS renders with any port), so a push touches no other port.
    `stand_ins` (profile.Profile): the lab's switches answered in another dialect."""
    out = {}
    for r in fabric.render_all(loaded, nodes):
        stand_in = (stand_ins or {}).get(r.spec.hostname)
        if stand_in and stand_in != r.spec.nos and stand_in in fabric.RENDERERS:
            spec = replace(r.spec, nos=stand_in)
            out[r.spec.hostname] = Target(stand_in, fabric.RENDERERS[stand_in].render(spec),
                                          r.spec.nos)
        else:
            out[r.spec.hostname] = Target(r.spec.nos, r.text)
    return out


def endpoint(loaded: LoadedSite, hostname: str, logins: CredentialResolver,
             timeout_s: float = 20.0, stand_ins: Mapping[str, str] | None = None) -> Endpoint:
    site = loaded.site
    ep = endpoints(site, loaded.catalog)[hostname]
    mgmt = ep.node.management
    if mgmt is None:
        raise FabricError(f"{hostname}: no management access in the inventory")
    nets = {n.name for n in site.networks if n.kind is NetworkKind.MANAGEMENT}
    address = mgmt.address or next(
        (str(a) for name, a in ep.node.addresses.items() if name in nets), None)
    if address is None:
        raise FabricError(f"{hostname}: no management address",
                          hint="set management.address or an address on the management network")
    login = logins.login(mgmt.credentials, user_of=hostname)
    nos = (stand_ins or {}).get(hostname) or mgmt.os
    return Endpoint(hostname, nos, address, mgmt.port, login.username, login.password,
                    timeout_s)


def refuse_inventory_errors(loaded: LoadedSite) -> None:
    bad = refusing(check_inventory(loaded))
    if bad:  # a miscabled site renders wrong ports: never send that to a switch
        raise InventoryError(f"the inventory has {len(bad)} error(s); run `provision validate`",
                             findings=bad)


def outcomes(loaded: LoadedSite, env: Mapping[str, str], names: Sequence[str], *,
             push: bool, connect: DriverFactory = netmiko_factory, max_parallel: int = 8,
             timeout_s: float = 20.0,
             nodes: Collection[str] | None = None, prune: bool = False,
             stand_ins: Mapping[str, str] | None = None,
             cut_off: Mapping[str, int | None] | None = None,
             on_send: Callable[[str], None] | None = None) -> list[SwitchOutcome]:
    """Diff (push=False) or push these switches, in parallel on the engine's fan-out; one
    switch's failure never stops the others. Takes no lock and records nothing but through
    `on_send` (write_ahead, called before a switch's first line): the caller records
    (`run` below, or the fabric step of `up`). With `nodes`, only their ports; with
    `prune`, a CLI switch's stale lines (cli_diff.stale) go too. `cut_off` (unsaved): the
    switches a killed push left unsaved; a push saves them, a diff says so."""
    todo = targets(loaded, nodes, stand_ins)
    logins = CredentialResolver(loaded, env)

    def one(name: str) -> SwitchOutcome:
        t = todo[name]
        try:
            ep = endpoint(loaded, name, logins, timeout_s, stand_ins)
            drv = connect(ep)
        except ProvisionerError as exc:
            return SwitchOutcome(name, t.nos, "failed", error=str(exc))
        note = (UNSAVED_NOTE.format(run=cut_off[name]) if cut_off and name in cut_off
                else "")
        try:
            if isinstance(drv, staged.Shell):
                return staged.run(drv, name, t.nos, t.text, push, unsaved=note,
                                  on_send=on_send)
            return _switch(drv, name, t.nos, t.text, push, prune, unsaved=note,
                           on_send=on_send)
        except ProvisionerError as exc:
            return SwitchOutcome(name, t.nos, "failed", error=str(exc))
        except Exception as exc:  # a driver bug or a dropped session: this switch only
            return SwitchOutcome(name, t.nos, "failed",
                                 error=f"{type(exc).__name__} talking to {name}")
        finally:
            drv.close()

    # A switch that hangs past its deadline (every step of it times out on its own, so
    # this is the backstop) is failed; the others go on.
    deadline_s = timeout_s * 6 + 60
    done = fan_out(list(names), one, concurrency=max_parallel, deadline_s=deadline_s)
    return [d.value if d.value is not None else SwitchOutcome(
        d.key, todo[d.key].nos, "failed",
        error=f"no result after {deadline_s:g} s; abandoned" if d.timed_out
        else f"{type(d.error).__name__} talking to {d.key}") for d in done]


def run(loaded: LoadedSite, env: Mapping[str, str], *, push: bool, dry_run: bool = False,
        limit: str | None = None, connect: DriverFactory = netmiko_factory,
        max_parallel: int = 8, timeout_s: float = 20.0,
        store: StateStore | None = None, prune: bool = False,
        stand_ins: Mapping[str, str] | None = None) -> list[SwitchOutcome]:
    """Diff (or push) every selected switch. With `store`, a push takes the site's lock and
    records a run with one event per switch, each switch's sending written ahead; a diff
    reads from it which switches a killed push left unsaved."""
    refuse_inventory_errors(loaded)
    rendered = [r.spec.hostname for r in fabric.render_all(loaded)]
    names = select(rendered, limit)
    if limit and not names:
        raise FabricError(f"--limit {limit} matches no switch with cabled ports",
                          hint=f"switches: {', '.join(rendered) or 'none'}")

    def fan(on_send: Callable[[str], None] | None = None) -> list[SwitchOutcome]:
        return outcomes(loaded, env, names, push=push and not dry_run, connect=connect,
                        max_parallel=max_parallel, timeout_s=timeout_s, prune=prune,
                        stand_ins=stand_ins,
                        cut_off=unsaved(store) if store is not None else None,
                        on_send=on_send)

    if store is None or not push or dry_run:
        return fan()
    with store.exclusive():
        store.close_stale_runs()
        run_id = store.start_run("fabric push" + (f" --limit {limit}" if limit else "")
                                 + (" --prune" if prune else ""))
        status = "failed"
        try:
            done = fan(write_ahead(store, run_id))
            for o in done:
                store.record(o.switch, OUTCOME, asdict(o), run_id=run_id)
            status = "ok" if all(o.ok for o in done) else "failed"
        finally:
            store.end_run(run_id, status)
    return done


def _running(drv: SwitchDriver, nos: str) -> str:
    """The running config as rendered configs are written: Onyx's port ranges expanded."""
    text = drv.running_config()
    return expand_ranges(text) if nos == "onyx" else text


def _switch(drv: SwitchDriver, name: str, nos: str, desired: str, push: bool,
            prune: bool = False, *, unsaved: str = "",
            on_send: Callable[[str], None] | None = None) -> SwitchOutcome:
    """Diff or push one CLI switch. `unsaved` (a note, from ops.unsaved): a killed push
    left it unsaved, so a push saves it even with nothing to send. `on_send` is called
    before the first line goes."""
    running = _running(drv, nos)
    cmds = tuple(cli_diff.plan(desired, running))
    diff = cli_diff.unified(desired, running, name)
    stale = cli_diff.stale(desired, running)
    if not cmds and not (push and prune and stale):
        if push and unsaved:
            drv.save()
            return SwitchOutcome(name, nos, "unchanged", stale=_labels(stale), saved=True,
                                 note=f"saved: {unsaved}")
        return SwitchOutcome(name, nos, "unchanged", stale=_labels(stale), note=unsaved)
    if not push:
        return SwitchOutcome(name, nos, "changes", diff, cmds, stale=_labels(stale),
                             note=unsaved)
    if on_send is not None:
        on_send(name)
    applied: tuple[str, ...] = ()
    after = running
    if cmds:
        took, after = _add(drv, name, nos, desired, running, cmds, diff)
        if isinstance(took, SwitchOutcome):  # refused or not read back: undone
            return took
        applied = took.applied
    left = cli_diff.stale(desired, after)  # what the adds did not replace
    if not (prune and left):
        drv.save()
        return SwitchOutcome(name, nos, "pushed", diff, cmds, applied, stale=_labels(left),
                             saved=True)
    return _prune(drv, name, nos, desired, (diff, cmds, applied), after, left)


def _labels(todo: Sequence[cli_diff.Path]) -> tuple[str, ...]:
    return tuple(cli_diff.label(p) for p in todo)


def _add(drv: SwitchDriver, name: str, nos: str, desired: str, running: str,
         cmds: tuple[str, ...], diff: str) -> tuple[SentLines | SwitchOutcome, str]:
    """Send the missing lines. (what the switch accepted, its config read back) when they
    all took; else (the outcome after undoing them, "")."""
    res = drv.apply(cmds)
    todo = cli_diff.missing(desired, running)
    problem = None
    if res.failed is not None:
        problem = (f"'{res.failed}' refused ({res.error}) after {len(res.applied)} accepted "
                   "line(s)")
    else:
        after = _running(drv, nos)
        left = cli_diff.plan(desired, after)
        if not left:
            return res, after
        problem = f"read-back: {len(left)} line(s) missing after the push, first '{left[0]}'"
    if res.failed is not None and not res.applied:  # a session aborted: nothing took effect
        return SwitchOutcome(name, nos, "rolled_back", diff, cmds, (), (),
                             f"{problem}; nothing applied"), ""
    undo = tuple(cli_diff.undo(res.applied, todo, running))
    undo_res = drv.apply(undo)
    now = set(cli_diff.paths(_running(drv, nos)))
    leftover = [p[-1] for p in todo if p in now]
    if undo_res.failed is None and not leftover:
        return SwitchOutcome(name, nos, "rolled_back", diff, cmds, res.applied, undo,
                             f"{problem}; undone, running config is as before"), ""
    return SwitchOutcome(name, nos, "failed", diff, cmds, res.applied, undo_res.applied,
                         f"{problem}; undo incomplete, still applied: "
                         f"{', '.join(leftover)}"), ""


def _prune(drv: SwitchDriver, name: str, nos: str, desired: str,
           pushed: tuple[str, tuple[str, ...], tuple[str, ...]], before: str,
           stale: list[cli_diff.Path]) -> SwitchOutcome:
    """Remove the stale lines the operator asked to go and read back: each gone and nothing
    else with them (an EOS `no` of a setting can clear more than its line). Else put back
    what went, stale lines first, then the rest (a rendered line among them) on its own, so
    a refused put-back cannot keep a rendered line off; save only a config that holds every
    rendered line. `pushed` is the push's (diff, commands, applied) before the prune."""
    diff, cmds, applied = pushed
    neg = tuple(cli_diff.negate(stale))
    res = drv.apply(neg)
    had = cli_diff.paths(before)
    now = set(cli_diff.paths(_running(drv, nos)))
    gone = [p for p in stale if p not in now]
    lost = [p for p in had if p not in now and p not in stale]
    if res.failed is None and len(gone) == len(stale) and not lost:
        drv.save()
        return SwitchOutcome(name, nos, "pushed", diff, cmds + neg, applied + res.applied,
                             pruned=_labels(gone), saved=True)
    why = (f"'{res.failed}' refused ({res.error})" if res.failed is not None
           else f"removing them also removed '{cli_diff.label(lost[-1])}'" if lost
           else f"'{cli_diff.label(next(p for p in stale if p in now))}' still there")
    back: tuple[str, ...] = ()
    for todo in (gone, lost):
        if todo:
            back += drv.apply(tuple(cli_diff.commands(todo))).applied
    text = _running(drv, nos)
    now = set(cli_diff.paths(text))
    missing = [p for p in (*gone, *lost) if p not in now]
    unrendered = cli_diff.missing(desired, text)
    if not unrendered:
        drv.save()
    put = ("nothing was removed" if not gone and not lost
           else "put back as it was" if not missing and not unrendered
           else "NOT put back: " + ", ".join(
               _labels([*missing, *(p for p in unrendered if p not in missing)])))
    saved = ("the rendered lines are in place and saved" if not unrendered
             else "not saved: the startup config is as before the push")
    return SwitchOutcome(name, nos, "failed", diff, cmds + neg, applied + res.applied, back,
                         f"prune: {why}; {put}; {saved}",
                         stale=_labels([p for p in stale if p in now]),
                         pruned=_labels([p for p in gone if p not in now]),
                         saved=not unrendered)
