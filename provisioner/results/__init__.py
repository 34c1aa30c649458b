"""Every command's JSON output as one typed result (pydantic), with its schema version.

The CLI builds a result from what the core returned and the console prints it: as JSON
(`dump`) or as tables that read the same fields. Nothing else shapes JSON, so a CI job
that reads `--json` reads these models; `json_schemas()` documents them (docs/json.md;
plan and status in docs/up.md), and tests keep the docs equal to the code.
"""

from __future__ import annotations

from typing import Any

from provisioner.results import discover, execution, fabric, site, upgrade, workflow
from provisioner.results.base import Out, dump, schema_id
from provisioner.results.discover import (
    AddReport,
    DiscoverReport,
    LabUnknownReport,
    add_report,
    discover_report,
    lab_unknown_report,
)
from provisioner.results.execution import DoctorReport, doctor_report
from provisioner.results.fabric import check_report, switches_report
from provisioner.results.site import (
    CatalogReport,
    PowerReport,
    ValidateReport,
    power_report,
    site_report,
    validate_report,
)
from provisioner.results.workflow import (
    Artifact,
    ArtifactsReport,
    BmcReport,
    LabReport,
    RenderReport,
    RunReport,
    UpEvent,
    UpReport,
    bmc_report,
    lab_report,
    run_report,
    up_event,
    up_report,
)

__all__ = [
    "AddReport",
    "Artifact",
    "ArtifactsReport",
    "BmcReport",
    "CatalogReport",
    "DiscoverReport",
    "DoctorReport",
    "LabReport",
    "LabUnknownReport",
    "Out",
    "PowerReport",
    "RenderReport",
    "RunReport",
    "UpEvent",
    "UpReport",
    "ValidateReport",
    "add_report",
    "bmc_report",
    "check_report",
    "discover_report",
    "doctor_report",
    "dump",
    "json_schemas",
    "lab_report",
    "lab_unknown_report",
    "power_report",
    "run_report",
    "site_report",
    "switches_report",
    "up_event",
    "up_report",
    "validate_report",
]

RESULTS: tuple[type[Out], ...] = (workflow.RESULTS + site.RESULTS + fabric.RESULTS
                                  + upgrade.RESULTS + execution.RESULTS + discover.RESULTS)


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema of every result, by its schema id (docs/json.md)."""
    return {schema_id(m): m.model_json_schema(by_alias=True) for m in RESULTS}
