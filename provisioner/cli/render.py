"""provision render: the site as a self-contained Ansible project (ansible-runner layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from provisioner import render as render_mod
from provisioner import results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    handle_errors,
    load_checked,
)
from provisioner.errors import ConfigError
from provisioner.state.dir import state_dir


@handle_errors
def render(site: SiteArg = None,
           out: Annotated[Path | None, typer.Option(
               "--out", "-o", help="Directory to write (replaced if it is a former render). "
               "Default: .provision/ansible next to the site; for the embedded example of "
               "an installed provisioner, .provision/ansible in the current directory.")
           ] = None,
           lab: Annotated[bool, typer.Option(
               help="Render for the local lab: steps that need a GPU, the internet or an "
               "init system run in check mode or are listed.")] = False,
           artifacts: Annotated[bool, typer.Option(
               "--artifacts", help="List every package, image and file the roles will "
               "fetch (to fill an air-gapped mirror) instead of rendering.")] = False,
           bundle: Annotated[str | None, typer.Option(
               "--bundle", help="With --artifacts: at this bundle's versions (what an "
               "air-gapped mirror must hold before `upgrade apply --to BUNDLE`).")] = None,
           json_out: JsonOpt = False) -> None:
    """Render inventory, group_vars, host_vars, playbooks and roles for the site."""
    loaded = load_checked(site)
    out_con = console(json_out)
    if bundle is not None:
        if not artifacts:
            raise ConfigError("--bundle goes with --artifacts (`upgrade apply` renders "
                              "the project at a bundle's versions itself)")
        from provisioner.inventory.bundle_models import load_bundle
        from provisioner.upgrade.plan import effective, site_at
        loaded = site_at(loaded, effective(loaded, load_bundle(loaded.base_dir,
                                                               bundle).bundle))
    if artifacts:
        items = render_mod.artifacts(loaded)
        if json_out:
            out_con.emit_json(results.dump(results.ArtifactsReport(
                site=loaded.site.site.name,
                artifacts=[results.Artifact.model_validate(i) for i in items])))
        else:
            out_con.artifacts(items)
        return
    target = out or state_dir(loaded.base_dir) / "ansible"
    result = render_mod.render(loaded, target, lab=lab)
    if json_out:
        out_con.emit_json(results.dump(results.RenderReport(
            out=str(result.out), files=len(result.files), groups=result.groups)))
    else:
        out_con.info(f"rendered {len(result.files)} files to {result.out}")
        for group, hosts in result.groups.items():
            out_con.info(f"  {group}: {', '.join(hosts)}")
