"""Every bench in bench/ runs in CI at its tiny size (`--smoke`): it must complete and print
its table, so that a bench cannot rot unseen. Its figures mean nothing at that size and
are not judged here.

A bench added to bench/ without a line in TABLES fails here until it has one (and a
--smoke). The benches that start the lab (BMC emulators, SSH test hosts) need its peers.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, requires_ssh_hosts
from tests.integration.conftest import requires_ipmi_sim

BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
# bench -> words its table's header prints, and the peers it starts (none: pure Python)
TABLES: dict[str, tuple[tuple[str, ...], list[pytest.MarkDecorator]]] = {
    "add_scale.py": (("nodes", "process s", "core s", "T(20)/T(10)"), []),
    "bmc_fanout.py": (("median s", "T(N)/T(1)", "speed-up"), [requires_ipmi_sim]),
    "execution_scale.py": (("playbook CPU s", "process CPU s"), [requires_ssh_hosts]),
    "inventory_scale.py": (("nodes", "parse s", "check s", "peak MB"), []),
    "up_scale.py": (("T(N) s", "ansible s", "tool s"), [requires_ipmi_sim]),
    "upgrade_sim.py": (("scenario", "plan_h", "bound_h", "ratio"), []),
}


def test_every_bench_has_a_smoke_check():
    assert set(BENCHES) == set(TABLES), "a bench without a --smoke check here, or gone"
    for name in BENCHES:
        assert "--smoke" in (ROOT / "bench" / name).read_text(), name


@pytest.mark.integration
@pytest.mark.parametrize("bench", [pytest.param(name, marks=TABLES.get(name, ((), []))[1])
                                   for name in BENCHES])
def test_bench_completes_and_prints_its_table(bench):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / bench), "--smoke"],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    header, _ = TABLES[bench]
    missing = [word for word in header if word not in proc.stdout]
    assert missing == [], proc.stdout[-3000:]
    # at least one row under the header: a line with a number after the header's line
    lines = proc.stdout.splitlines()
    first = next(i for i, ln in enumerate(lines) if header[0] in ln)
    assert any(any(c.isdigit() for c in ln) for ln in lines[first + 1:]), proc.stdout[-3000:]
