"""provision doctor: are the site's execution nodes fit to run its playbooks."""

from __future__ import annotations

import typer

from provisioner import results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    handle_errors,
    load_checked,
)
from provisioner.errors import ExitCode
from provisioner.execution import doctor as doctor_mod


@handle_errors
def doctor(site: SiteArg = None, json_out: JsonOpt = False) -> None:
    """Check every execution node (provisioning.execution): SSH, ansible-runner and
    ansible-core at the controller's major.minor, free disk in its work directory.

    Exit 0 when all are fit (or the site has none), 14 when any is not, one line each.
    """
    loaded = load_checked(site)
    ex = loaded.site.provisioning.execution
    controller = doctor_mod.controller_versions()
    nodes = doctor_mod.check(ex) if ex.nodes else []
    report = results.doctor_report(loaded.site.site.name, controller, nodes)
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(report))
    elif not nodes:
        out.info("no execution nodes (provisioning.execution): playbooks run on this "
                 f"controller (ansible-runner {controller.ansible_runner}, "
                 f"ansible-core {controller.ansible_core})")
    else:
        for n in nodes:
            found = (f"ansible-runner {n.ansible_runner or '-'}, ansible-core "
                     f"{n.ansible_core or '-'}, {n.free_mb if n.free_mb is not None else '-'}"
                     " MB free")
            if n.ok:
                out.info(f"ok    {n.node} ({n.address}): {found}")
            else:
                out.info(f"FAIL  {n.node} ({n.address}): " + "; ".join(n.problems))
        out.info(f"controller: ansible-runner {controller.ansible_runner}, "
                 f"ansible-core {controller.ansible_core}")
    raise typer.Exit(int(ExitCode.OK if report.ok else ExitCode.EXECUTION))
