"""The lab's Python wheelhouse (lab/wheelhouse.py): what `pip download` is asked for, a
failed download as a clear error (real pip against an index that refuses connections), and
the node's install script. The install itself runs in the lab test
(tests/integration/test_execution_nodes.py)."""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from provisioner.errors import ConfigError
from provisioner.lab import wheelhouse


def rootfs_with_python(tmp_path: Path, target: str) -> Path:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/python3").symlink_to(target)
    return tmp_path


def test_pins_are_the_controllers_own_versions():
    assert wheelhouse.pins() == {n: version(n) for n in ("ansible-core", "ansible-runner",
                                                           "pip")}
    cons = wheelhouse.constraints()
    assert f"ansible-core=={version('ansible-core')}" in {c.lower() for c in cons}
    assert any(c.lower().startswith("jinja2==") for c in cons)


def test_the_lab_hosts_python_is_read_from_the_rootfs(tmp_path):
    assert wheelhouse.python_of(rootfs_with_python(tmp_path / "a", "python3.11")) == "3.11"
    assert wheelhouse.python_of(rootfs_with_python(tmp_path / "b", "/usr/bin/python3.13")) \
        == "3.13"
    with pytest.raises(ConfigError, match="cannot tell the lab hosts' Python"):
        wheelhouse.python_of(tmp_path / "missing")


def test_download_asks_for_wheels_for_the_hosts_python_at_the_pinned_versions(tmp_path):
    argv = wheelhouse.download_argv(tmp_path, "3.11", {"ansible-core": "2.19.14", "pip": "26.3"},
                                    tmp_path / "c.txt")
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert "cp311" in argv and "abi3" in argv
    assert argv[argv.index("--constraint") + 1] == str(tmp_path / "c.txt")
    assert argv[-2:] == ["ansible-core==2.19.14", "pip==26.3"]


def test_a_failed_download_is_a_clear_error_and_leaves_no_cache(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on: pip's index refuses at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no site index or find-links
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    rootfs = rootfs_with_python(tmp_path / "rootfs", "python3.11")
    with pytest.raises(ConfigError) as err:
        wheelhouse.ensure(rootfs, tmp_path / "cache")
    text = str(err.value)
    assert "`pip download` of " in text
    assert f"ansible-core=={version('ansible-core')}" in text
    assert "for the lab hosts' Python 3.11 failed" in text
    assert "PIP_INDEX_URL" in (err.value.hint or "")
    assert not list((tmp_path / "cache" / "wheelhouse").iterdir())


def test_install_script_installs_only_hash_checked_wheels_from_the_mirror(tmp_path):
    (tmp_path / "pip-26.3-py3-none-any.whl").write_bytes(b"pip wheel")
    (tmp_path / "ansible_core-2.19.14-py3-none-any.whl").write_bytes(b"core wheel")
    house = wheelhouse.Wheelhouse(tmp_path, {"ansible-core": "2.19.14", "pip": "26.3"})
    script = wheelhouse.install_script(house, "http://10.250.0.1:8080/")
    assert "python3 -m venv --without-pip /opt/provisioner/venv" in script
    # every wheel pinned with the sha256 the controller computed, pip's own checked too
    core, pip = (hashlib.sha256(b).hexdigest() for b in (b"core wheel", b"pip wheel"))
    assert f"ansible_core==2.19.14 --hash=sha256:{core}\n" in script
    assert f"pip==26.3 --hash=sha256:{pip}\n" in script
    fetch = next(ln for ln in script.splitlines() if "wheels/pip-26.3" in ln)
    assert fetch.endswith(f" {pip}")
    install = next(ln for ln in script.splitlines() if " install " in ln)
    assert install.startswith("/opt/provisioner/venv/bin/python /opt/provisioner/venv.pip-")
    for flag in ("--isolated", "--no-index", "--find-links http://10.250.0.1:8080/wheels/",
                 "--trusted-host 10.250.0.1:8080", "--require-hashes -r /opt/provisioner/",
                 f"--report {wheelhouse.REPORT}"):
        assert flag in install
    with pytest.raises(ConfigError, match=r"no wheel of pip 27\.0"):
        wheelhouse.Wheelhouse(tmp_path, {"pip": "27.0"}).wheel("pip")


def test_publish_links_the_wheels_into_the_mirror_root(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    (house / "a-1-py3-none-any.whl").write_bytes(b"wheel")
    (house / "constraints.txt").write_text("x==1\n")
    out = wheelhouse.publish(house, tmp_path / "repo")
    assert out == tmp_path / "repo" / "wheels"
    assert [p.name for p in out.iterdir()] == ["a-1-py3-none-any.whl"]
    assert (out / "a-1-py3-none-any.whl").stat().st_ino == \
        (house / "a-1-py3-none-any.whl").stat().st_ino
