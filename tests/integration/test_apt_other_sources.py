"""Another entry for a repository the roles add (cuda-keyring's list, the vendor's install
page followed by hand) stops apt: "Conflicting values set for option Signed-By". The roles
set such entries aside before adding their own (roles/base_os/tasks/other_sources.yml),
here run by ansible-playbook over a local connection on a sources directory of the test's,
and apt itself reads the directory before and after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, apt_reads

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
PLAY = """
- name: Set aside other entries for the CUDA repository
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run base_os's task file as the driver role does
      ansible.builtin.include_role:
        name: base_os
        tasks_from: other_sources.yml
      vars:
        base_os_repo_name: "{{ name }}"
        base_os_repo_uri: "{{ uri }}"
"""
SOURCES = {
    # what cuda-keyring writes, and an http entry for the same repository
    "cuda-ubuntu2204-x86_64.list": f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring."
                                   f"gpg] {CUDA} /\n",
    "old-cuda.list": f"deb {CUDA.replace('https:', 'http:').rstrip('/')} /\n",
    # the role's own (deb822_repository), and an unrelated source: both stay
    "nvidia-cuda.sources": f"Types: deb\nURIs: {CUDA}\nSuites: /\n"
                           "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc\n",
    "ubuntu.sources": "Types: deb\nURIs: http://archive.ubuntu.com/ubuntu/\nSuites: jammy\n"
                      "Components: main\n",
}


def play(tmp_path: Path, sources: Path, uri: str = CUDA, name: str = "nvidia-cuda"
         ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(PLAY)
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "play.yml",
         "-e", f"uri={uri}", "-e", f"name={name}", "-e", f"base_os_apt_sources_dir={sources}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
             "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)})


def test_other_entries_for_the_repository_are_set_aside_and_apt_reads_its_sources(
        tmp_path: Path) -> None:
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    for name, text in SOURCES.items():
        (sources / name).write_text(text)
    before = apt_reads(sources, tmp_path)
    assert before.returncode != 0 and "Conflicting values set for option Signed-By" in (
        before.stderr), before.stderr

    first = play(tmp_path, sources)
    assert first.returncode == 0, first.stdout[-3000:]
    assert sorted(p.name for p in sources.iterdir()) == [
        "cuda-ubuntu2204-x86_64.list.provisioner.disabled", "nvidia-cuda.sources",
        "old-cuda.list.provisioner.disabled", "ubuntu.sources"]
    after = apt_reads(sources, tmp_path)
    assert after.returncode == 0 and CUDA in after.stdout, after.stderr

    again = play(tmp_path, sources)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


TOOLKIT = "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"


def test_the_toolkits_own_arch_entry_is_the_same_source_and_is_set_aside(tmp_path: Path) -> None:
    """NVIDIA's install guide writes the toolkit's list with $(ARCH), which apt substitutes:
    the same source as the role's .../deb/amd64/ under another Signed-By. A match on the
    role's literal URI missed it, and apt refused every source."""
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "nvidia-container-toolkit.list").write_text(
        "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n")
    (sources / "nvidia-container-toolkit.sources").write_text(
        f"Types: deb\nURIs: {TOOLKIT}\nSuites: /\n"
        "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc\n")
    # another architecture's directory is another source: left alone
    (sources / "arm64-toolkit.list").write_text(
        "deb [signed-by=/usr/share/keyrings/other.gpg] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/arm64 /\n")
    before = apt_reads(sources, tmp_path)
    assert before.returncode != 0 and "Conflicting values set for option Signed-By" in (
        before.stderr), before.stderr
    ran = play(tmp_path, sources, uri=TOOLKIT, name="nvidia-container-toolkit")
    assert ran.returncode == 0, ran.stdout[-3000:]
    assert sorted(p.name for p in sources.iterdir()) == [
        "arm64-toolkit.list", "nvidia-container-toolkit.list.provisioner.disabled",
        "nvidia-container-toolkit.sources"]
    after = apt_reads(sources, tmp_path)
    assert after.returncode == 0 and TOOLKIT.rstrip("/") in after.stdout, after.stderr


def test_an_entry_in_sources_list_itself_stops_the_run_with_the_line_to_remove(
        tmp_path: Path) -> None:
    """sources.list holds the distribution's own sources and is not edited: a CUDA line
    appended there by hand (commented lines aside) stops the run, saying which file and why,
    where apt would otherwise refuse every source."""
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "nvidia-cuda.sources").write_text(SOURCES["nvidia-cuda.sources"])
    listed = tmp_path / "sources.list"
    listed.write_text(f"deb http://archive.ubuntu.com/ubuntu/ jammy main # see {CUDA}\n"
                      f"# deb {CUDA} /\n")
    commented = play(tmp_path, sources)
    assert commented.returncode == 0, commented.stdout[-3000:]
    listed.write_text(listed.read_text() + f"deb [signed-by=/usr/share/keyrings/cuda.gpg] "
                                           f"{CUDA} /\n")
    conflict = apt_reads(sources, tmp_path, source_list=listed)
    assert "Conflicting values set for option Signed-By" in conflict.stderr, conflict.stderr
    stopped = play(tmp_path, sources)
    assert stopped.returncode != 0
    assert f"{listed} names {CUDA}" in " ".join(stopped.stdout.split()), stopped.stdout[-3000:]
    assert "Remove that line" in stopped.stdout
    assert listed.read_text().count(CUDA) == 3  # not edited
