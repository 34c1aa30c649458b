"""The machine limits a lab needs (lab/limits.py), against a fake /proc/sys: refused with
the figure and the sysctl when it may not raise them, raised (and said) when it may."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.errors import ConfigError
from provisioner.lab import hostwatch, limits


def fake_proc_sys(tmp_path: Path, instances: int, watches: int = 100_000) -> Path:
    root = tmp_path / "sys"
    (root / "fs/inotify").mkdir(parents=True)
    (root / "fs/inotify/max_user_instances").write_text(f"{instances}\n")
    (root / "fs/inotify/max_user_watches").write_text(f"{watches}\n")
    return root


def use(instances: int, limit: int, watches: int = 0, watches_limit: int = 100_000
        ) -> limits.InotifyUse:
    return limits.InotifyUse(instances, watches, limit, watches_limit)


def test_the_needed_figure_grows_with_hosts_and_what_is_in_use():
    need = limits.needed(50, use(10, 128))[limits.INSTANCES]
    assert need == 10 + 50 * limits.INSTANCES_PER_HOST + limits.INSTANCES_HEADROOM
    assert limits.shortfall(50, use(10, 128)) == {limits.INSTANCES: (128, need)}
    assert limits.shortfall(2, use(10, 128)) == {}  # 10 + 24 + 64 fit in 128


def test_refused_without_the_right_to_raise_naming_figure_and_sysctl(tmp_path):
    proc_sys = fake_proc_sys(tmp_path, 20)
    with pytest.raises(ConfigError) as refused:
        limits.ensure(3, use=use(4, 20), proc_sys=proc_sys, may_raise=False)
    need = 4 + 3 * limits.INSTANCES_PER_HOST + limits.INSTANCES_HEADROOM
    err = refused.value
    assert f"fs.inotify.max_user_instances is 20, 3 lab host(s) need {need}" in err.message
    assert "no host was started" in err.message
    assert err.hint is not None
    assert f"sudo sysctl -w fs.inotify.max_user_instances={need}" in err.hint
    assert (proc_sys / "fs/inotify/max_user_instances").read_text() == "20\n"  # untouched


def test_raised_when_allowed_and_said_in_a_note(tmp_path):
    proc_sys = fake_proc_sys(tmp_path, 20, watches=1000)
    notes = limits.ensure(3, use=use(4, 20, watches=10, watches_limit=1000),
                          proc_sys=proc_sys, may_raise=True)
    need = 4 + 3 * limits.INSTANCES_PER_HOST + limits.INSTANCES_HEADROOM
    need_w = 10 + 3 * limits.WATCHES_PER_HOST + limits.WATCHES_HEADROOM
    assert (proc_sys / "fs/inotify/max_user_instances").read_text() == f"{need}\n"
    assert (proc_sys / "fs/inotify/max_user_watches").read_text() == f"{need_w}\n"
    assert notes[0].startswith(f"raised fs.inotify.max_user_instances from 20 to {need} "
                               "for 3 lab host(s)")
    assert "sysctl -w fs.inotify.max_user_instances=20" in notes[0]  # how to put it back
    assert len(notes) == 2


def test_enough_is_left_alone(tmp_path):
    proc_sys = fake_proc_sys(tmp_path, 8192)
    assert limits.ensure(3, use=use(4, 8192), proc_sys=proc_sys, may_raise=True) == []
    assert (proc_sys / "fs/inotify/max_user_instances").read_text() == "8192\n"


def test_a_write_the_kernel_refuses_is_a_refusal_with_its_reason(tmp_path):
    proc_sys = fake_proc_sys(tmp_path, 20)
    target = proc_sys / "fs/inotify/max_user_instances"
    target.unlink()
    target.mkdir()  # writing a directory fails as a read-only /proc/sys does
    with pytest.raises(ConfigError, match="not raised here"):
        limits.ensure(3, use=use(4, 20), proc_sys=proc_sys, may_raise=True)


def test_exit_statuses_in_words():
    assert hostwatch.describe_exit(137) == "killed by SIGKILL (exit 137)"
    assert hostwatch.describe_exit(255) == "exit status 255"
    assert hostwatch.describe_exit(1) == "exit status 1"
