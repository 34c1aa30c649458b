"""Every command's JSON is a typed result: the docs are the code's schemas, and a result
refuses fields the schema does not have."""

from __future__ import annotations

import importlib.util
import json

import pytest

from provisioner import results
from provisioner.runner import HostStats, RunResult, TaskEvent
from provisioner.workflows import report
from tests.conftest import ROOT


def _json_docs():
    spec = importlib.util.spec_from_file_location("json_docs", ROOT / "scripts" / "json_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_schema_files_are_the_code_s():
    """docs/schemas/ holds one file per schema id, each equal to what the code emits."""
    files = {p.name: json.loads(p.read_text()) for p in (ROOT / "docs" / "schemas").glob("*.json")}
    code = {**results.json_schemas(), **report.json_schemas()}
    json_docs = _json_docs()
    assert files == {json_docs.schema_file(sid): schema for sid, schema in code.items()}
    assert set(code) >= {"provisioner.up/v1", "provisioner.up-event/v1", "provisioner.run/v1",
                         "provisioner.bmc/v1", "provisioner.plan/v1", "provisioner.status/v1"}
    assert set(code) <= set(json_docs.COMMANDS), "a schema id no command is listed for"


def test_the_field_tables_are_the_code_s():
    """docs/json.md lists, per schema, every field the code's schema has, with its type."""
    text = (ROOT / "docs" / "json.md").read_text()
    json_docs = _json_docs()
    assert text == json_docs.render(json_docs.all_schemas()), \
        "docs/json.md is stale: run .venv/bin/python scripts/json_docs.py"
    # the table names each top-level field of each schema (not only the generator's word)
    for sid, schema in json_docs.all_schemas().items():
        section = text.split(f"## `{sid}`\n", 1)[1].split("\n## ", 1)[0]
        for name in schema["properties"]:
            assert f"| `{name}` |" in section, (sid, name)


def test_a_run_result_round_trips_and_refuses_unknown_fields():
    result = RunResult(playbook="site.yml", status="failed", rc=2,
                       hosts={"dgx01": HostStats(ok=3, failed=1)},
                       events=[TaskEvent("dgx01", "Install the driver", "nvidia_driver",
                                         "failed", "boom")], artifact_dir="/tmp/a")
    doc = results.dump(results.run_report(result))
    assert doc["schema"] == "provisioner.run/v1"
    assert doc["hosts"]["dgx01"]["failed"] == 1
    assert doc["failures"][0]["task"] == "Install the driver"
    assert results.RunReport.model_validate(doc).rc == 2
    doc["surprise"] = True
    with pytest.raises(ValueError, match="surprise"):
        results.RunReport.model_validate(doc)
