"""Safe on a live site: `pxe render|serve` need --interface (no guessed eth0 for an
authoritative DHCP server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from tests.conftest import EXAMPLE

runner = CliRunner()


@pytest.mark.parametrize("command", ["render", "serve"])
def test_pxe_without_interface_is_a_usage_error_and_touches_nothing(command, tmp_path: Path):
    out = tmp_path / "pxe"
    result = runner.invoke(app, ["pxe", command, str(EXAMPLE), "--out", str(out),
                                 "--server", "10.250.0.1"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "--interface is required" in text and "authoritative DHCP" in text
    assert not out.exists()  # refused before rendering (and before any dnsmasq started)


def test_pxe_render_writes_the_named_interface(tmp_path: Path):
    out = tmp_path / "pxe"
    result = runner.invoke(app, ["pxe", "render", str(EXAMPLE), "--out", str(out),
                                 "--server", "10.250.0.1", "--interface", "enp9s0"])
    assert result.exit_code == 0, result.output
    conf = (out / "dnsmasq.conf").read_text().splitlines()
    assert "interface=enp9s0" in conf and "interface=eth0" not in conf
