"""provision run: render the site and run a playbook through ansible-runner."""

from __future__ import annotations

from typing import Annotated

import typer

from provisioner import render as render_mod
from provisioner import results
from provisioner import runner as runner_mod
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    handle_errors,
    load_checked,
)
from provisioner.errors import ExitCode
from provisioner.profile import for_site
from provisioner.state import open_read_only
from provisioner.state.dir import state_dir
from provisioner.upgrade import drift


@handle_errors
def run(site: SiteArg = None,
        playbook: Annotated[str, typer.Argument(help="Entry playbook in playbooks/.")]
        = "site.yml",
        limit: Annotated[str | None, typer.Option("--limit", "-l",
                                                  help="Ansible host pattern.")] = None,
        tags: Annotated[str | None, typer.Option("--tags", "-t",
                                                 help="Only roles/tasks with these tags.")]
        = None,
        check: Annotated[bool, typer.Option("--check", help="Ansible check mode: change "
                                            "nothing, report what would change.")] = False,
        lab: Annotated[bool, typer.Option(help="Render for the local lab (see `render`).")]
        = False,
        forks: Annotated[int, typer.Option(min=1, max=1000)] = 20,
        json_out: JsonOpt = False) -> None:
    """Render the site, run PLAYBOOK, and report per host. Exit 7 when any host failed."""
    loaded = load_checked(site)
    target = state_dir(loaded.base_dir) / "ansible"
    render_mod.render(loaded, target, lab=lab)
    out = console(json_out)
    state_path = for_site(loaded, lab=True if lab else None).state_path
    if (store := open_read_only(state_path)) and (behind := drift.note(loaded, store)):
        out.warn(behind)  # a playbook that configures nodes (site.yml) uses software:'s pins
    with out.playbook_progress(playbook) as on_event:
        result = runner_mod.run_playbook(target, playbook, limit=limit, tags=tags,
                                         check=check, forks=forks, on_event=on_event)
    if json_out:
        out.emit_json(results.dump(results.run_report(result)))
    else:
        out.run_result(result)
    raise typer.Exit(int(ExitCode.OK if result.ok else ExitCode.PLAYBOOK))
