"""`pxe render` writes its files beside the target and renames them onto it at the end
(outdir.replace, as `render` does): a render refused half-way leaves the former one as it
was and no partial directory; a directory that is not a former render is refused; what a
former render holds that is not rendered again (the nodes' host keys, the TFTP loaders)
goes on into the new one."""

from __future__ import annotations

import stat
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from provisioner import outdir
from provisioner.errors import RenderError
from provisioner.inventory import load
from provisioner.render import pxe
from tests.conftest import EXAMPLE

SERVER = IPv4Address("10.250.0.1")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_render_refused_half_way_leaves_the_former_one_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "pxe"
    pxe.render_pxe(load(EXAMPLE), out, server=SERVER, http_port=8080)
    key = out / "hostkeys" / "dgx02" / "ssh_host_ed25519_key"
    # the second node's key is not ed25519: refused after the first node's files are made
    key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption()))
    before = _tree(out)
    with pytest.raises(RenderError, match="ed25519"):
        pxe.render_pxe(load(EXAMPLE), out, server=SERVER, http_port=9090)
    assert _tree(out) == before  # dnsmasq.conf, dgx01's script: still the 8080 ones
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pxe"]  # no hidden leftovers


def test_a_directory_that_is_not_a_former_render_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(RenderError, match="not empty and not a former render"):
        pxe.render_pxe(load(EXAMPLE), out, server=SERVER)
    assert _tree(out) == {"notes.txt": b"mine\n"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_re_render_replaces_the_files_and_keeps_keys_and_loaders(tmp_path: Path) -> None:
    out = tmp_path / "pxe"
    pxe.render_pxe(load(EXAMPLE), out, server=SERVER, http_port=8080)
    assert outdir.is_output(out)
    key = (out / "hostkeys/dgx01/ssh_host_ed25519_key").read_bytes()
    (out / "tftp").mkdir()
    (out / "tftp" / "ipxe.efi").write_bytes(b"loader")  # copied in as `pxe serve` says
    (out / "ipxe" / "gone.ipxe").write_text("a node the site no longer has\n")
    written, _ = pxe.render_pxe(load(EXAMPLE), out, server=SERVER, http_port=9090)
    assert "9090" in (out / "ipxe" / "dgx01.ipxe").read_text()
    assert not (out / "ipxe" / "gone.ipxe").exists()
    assert (out / "hostkeys/dgx01/ssh_host_ed25519_key").read_bytes() == key
    assert stat.S_IMODE((out / "hostkeys/dgx01/ssh_host_ed25519_key").stat().st_mode) == 0o600
    assert (out / "tftp" / "ipxe.efi").read_bytes() == b"loader"
    assert written and all(p.is_relative_to(out) and p.is_file() for p in written)
    # dnsmasq's paths name the target, not the directory the files were written in first
    assert f"tftp-root={out.resolve()}/tftp" in (out / "dnsmasq.conf").read_text()


def test_a_pxe_directory_rendered_before_the_marker_is_a_former_render(tmp_path) -> None:
    out = tmp_path / "pxe"
    pxe.render_pxe(load(EXAMPLE), out, server=SERVER)
    (out / outdir.MARKER).unlink()  # as an earlier provisioner left it
    pxe.render_pxe(load(EXAMPLE), out, server=SERVER)
    assert outdir.is_output(out)


def test_stage_fills_the_render_before_it_takes_the_target_s_place(tmp_path) -> None:
    out = tmp_path / "pxe"
    seen: list[Path] = []

    def stage(work: Path) -> None:
        assert work.parent == out.parent and work.name.startswith(".") and not out.exists()
        seen.append(work)
        (work / "ubuntu").mkdir()
        (work / "ubuntu" / "vmlinuz").write_bytes(b"kernel")

    pxe.render_pxe(load(EXAMPLE), out, server=SERVER, stage=stage)
    assert seen and (out / "ubuntu" / "vmlinuz").read_bytes() == b"kernel"

    def failing(work: Path) -> None:
        raise RenderError("not the ISO of the release")

    with pytest.raises(RenderError, match="not the ISO"):
        pxe.render_pxe(load(EXAMPLE), out, server=SERVER, stage=failing)
    assert (out / "ubuntu" / "vmlinuz").is_file()  # the former render, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pxe"]
