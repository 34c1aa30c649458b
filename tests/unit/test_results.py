"""Every command's JSON is a typed result: the docs are the code's schemas, and a result
refuses fields the schema does not have."""

from __future__ import annotations

import json
import re

import pytest

from provisioner import results
from provisioner.runner import HostStats, RunResult, TaskEvent
from tests.conftest import ROOT


def test_the_documented_result_schemas_are_the_code_s():
    text = (ROOT / "docs" / "json.md").read_text()
    blocks = re.findall(r"<!-- schema: (\S+) -->\n```json\n(.*?)\n```", text, re.S)
    documented = {name: json.loads(body) for name, body in blocks}
    assert documented == results.json_schemas()
    assert set(documented) >= {"provisioner.up/v1", "provisioner.up-event/v1",
                               "provisioner.run/v1", "provisioner.bmc/v1"}


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
