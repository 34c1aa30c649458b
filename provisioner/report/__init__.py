"""The site report (a static HTML page with rack elevations, budgets, node states and
findings) and the inventory's JSON Schema for editors."""

from provisioner.report.html import (
    Report,
    build,
    build_unloadable,
    render_html,
    write,
)
from provisioner.report.nodes import StateView, read_state

__all__ = ["Report", "StateView", "build", "build_unloadable", "read_state", "render_html",
           "write"]
