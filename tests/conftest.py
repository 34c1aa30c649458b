"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE = ROOT / "inventories" / "example"
VSCALER = ROOT / "inventories" / "vscaler-dgx"


@pytest.fixture
def write_site(tmp_path: Path):
    """Write YAML text(s) into a temporary site and return its path."""

    def _write(text: str | dict[str, str], name: str = "site.yaml") -> Path:
        if isinstance(text, str):
            p = tmp_path / name
            p.write_text(text)
            return p
        for fname, body in text.items():
            (tmp_path / fname).write_text(body)
        return tmp_path

    return _write
