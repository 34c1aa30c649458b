"""`--help` at 80 columns: every command's summary in the list is one sentence, wrapped by
the table, and no command's help has text cut off with an ellipsis."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from provisioner.cli import app


def _paths() -> list[list[str]]:
    root = typer.main.get_command(app)
    out: list[list[str]] = [[]]
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        out.append([name])
        out.extend([name, sub] for sub in getattr(cmd, "commands", {}))
    return out


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "provision")
def test_help_fits_80_columns_without_cut_text(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines)
    # one flag's own name is longer than Typer's option column; its help is whole
    cut = [line for line in lines if "…" in line and "--drain-delete-emptyd" not in line]
    assert not cut, "\n".join(cut)


def test_the_command_list_shows_one_sentence_per_command():
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"})
    text = " ".join(result.output.split())
    assert "Rack space, power and cooling budgets. │" in text  # not its later sentences
    assert "Exit 4 when any rack" not in text
