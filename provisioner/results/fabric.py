"""Results of `provision fabric check | diff | push`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from provisioner.results.base import Out

if TYPE_CHECKING:
    from provisioner.fabric.base import Mismatch
    from provisioner.fabric.live import Unverifiable
    from provisioner.switches.base import SwitchOutcome


class MismatchView(Out):
    """One RoCE link where host and switch disagree, both ends named."""

    host: str
    nic: str
    switch: str
    port: str
    what: str  # pfc | dscp-map | cnp | mtu | trust | gid
    host_value: str
    switch_value: str


class UnverifiableView(Out):
    """One end `--live` could not read or that cannot carry RoCE QoS: never counted as agreeing."""

    end: str  # host | switch
    name: str  # "dgx01 roce" or the switch
    why: str


class FabricCheckReport(Out):
    schema_: Literal["provisioner.fabric.check/v1"] = Field("provisioner.fabric.check/v1",
                                                            alias="schema")
    site: str
    ok: bool
    links_checked: int
    exit_code: int
    mismatches: list[MismatchView]
    live: bool = False  # --live: both ends as the devices report them
    not_verifiable: list[UnverifiableView] = Field(default_factory=list)
    # the lab: each stand-in switch, what answers for it and what it cannot compare
    notes: list[str] = Field(default_factory=list)


class SwitchView(Out):
    switch: str
    nos: str
    status: str  # unchanged | changes | pushed | rolled_back | failed
    diff: str
    commands: list[str]
    applied: list[str]  # CLI: lines the switch accepted; NVUE/SONiC: settings that changed
    undone: list[str]  # compensating lines or rollback commands sent after a failure
    error: str | None
    stale: list[str]  # CLI: "block > line" shaped like a rendered line, not rendered
    pruned: list[str]  # stale lines `fabric push --prune` removed
    saved: bool  # this run saved the switch's config (write memory, nv config save, ...)
    # a push cut off before it recorded the save (diff: says so; push: saved it)
    note: str | None


class _Switches(Out):
    site: str
    dry_run: bool
    exit_code: int
    switches: list[SwitchView]
    # the lab: each stand-in switch, what answers for it and what is not pushed to it
    notes: list[str] = Field(default_factory=list)


class FabricDiffReport(_Switches):
    schema_: Literal["provisioner.fabric.diff/v1"] = Field("provisioner.fabric.diff/v1",
                                                           alias="schema")


class FabricPushReport(_Switches):
    schema_: Literal["provisioner.fabric.push/v1"] = Field("provisioner.fabric.push/v1",
                                                           alias="schema")


def check_report(site: str, ok: bool, links_checked: int, exit_code: int,
                 mismatches: Sequence[Mismatch], live: bool = False,
                 unverifiable: Sequence[Unverifiable] = (),
                 notes: Sequence[str] = ()) -> FabricCheckReport:
    return FabricCheckReport(site=site, ok=ok, links_checked=links_checked,
                             exit_code=exit_code, live=live, notes=list(notes),
                             not_verifiable=[UnverifiableView(end=u.end, name=u.name, why=u.why)
                                             for u in unverifiable],
                             mismatches=[MismatchView(host=m.host, nic=m.nic, switch=m.switch,
                                                      port=m.port, what=m.what,
                                                      host_value=m.host_value,
                                                      switch_value=m.switch_value)
                                         for m in mismatches])


def switches_report(push: bool, site: str, dry_run: bool, exit_code: int,
                    outcomes: Sequence[SwitchOutcome], notes: Sequence[str] = ()
                    ) -> _Switches:
    model: type[_Switches] = FabricPushReport if push else FabricDiffReport
    return model(site=site, dry_run=dry_run, exit_code=exit_code, notes=list(notes),
                 switches=[SwitchView(switch=o.switch, nos=o.nos, status=o.status,
                                      diff=o.diff, commands=list(o.commands),
                                      applied=list(o.applied), undone=list(o.undone),
                                      error=o.error, stale=list(o.stale),
                                      pruned=list(o.pruned), saved=o.saved,
                                      note=o.note or None) for o in outcomes])


RESULTS: tuple[type[Out], ...] = (FabricCheckReport, FabricDiffReport, FabricPushReport)
