"""The loader's own constructor (yamlsafe.construct) builds exactly what PyYAML's safe
constructor builds: on every YAML file of this repository and on the YAML features an
inventory rarely uses (merge keys, tags, anchors, non-string keys), errors included."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from provisioner.inventory.yamlsafe import Loader, construct
from tests.conftest import ROOT


def both(text: str | bytes) -> tuple[Any, Any]:
    """(PyYAML's result, ours): the data, or the error's type and text."""
    out = []
    for build in (lambda ld, n: ld.construct_document(n), construct):
        loader = Loader(text)
        try:
            node = loader.get_single_node()
            out.append(build(loader, node) if node is not None else None)
        except yaml.YAMLError as exc:
            out.append((type(exc).__name__, str(exc)))
        finally:
            loader.dispose()
    return out[0], out[1]


def test_every_yaml_file_of_the_repository_builds_alike():
    files = subprocess.run(["git", "ls-files", "*.yaml", "*.yml"], cwd=ROOT, text=True,
                           capture_output=True, check=True).stdout.split()
    assert len(files) > 50
    for name in files:
        theirs, ours = both((ROOT / name).read_bytes())
        assert ours == theirs, name


@pytest.mark.parametrize("text", [
    "a: 1\nb: [true, null, 1.5, 0x1f, 2024-01-02]\nc: {d: '012', e: !!str 12}\n",
    "base: &b {x: 1, y: [1, 2]}\nthis:\n  <<: *b\n  y: 3\nthat: {<<: [*b, {z: 4}]}\n",
    "a: &s shared\nb: *s\nc: &l [1, *s]\nd: [*l, *l]\n",
    "? [a, b]\n: unhashable\n",
    "{1: one, true: yes, null: none, 2001-12-14: date, 1.5: f}\n",
    "= : value key\nx: y\n",
    "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\nbin: !!binary aGVsbG8=\n",
    "x: !unknown tag\n",
    "dup: 1\ndup: 2\n",
    "[a, [b, [c, {d: [e]}]], !!str 5]\n",
    "just a scalar\n",
    "",
])
def test_yaml_features_build_alike(text):
    theirs, ours = both(text)
    assert ours == theirs


def test_errors_are_pyyamls_own():
    theirs, ours = both("? [a, b]\n: unhashable\n")
    assert ours == theirs and ours[0] == "ConstructorError" and "unhashable key" in ours[1]
    theirs, ours = both("x: !unknown tag\n")
    assert ours == theirs and "could not determine a constructor" in ours[1]
    theirs, ours = both("base: &b {x: 1}\nthis: {<<: *b, y: 2}\n")
    assert ours == theirs == {"base": {"x": 1}, "this": {"x": 1, "y": 2}}
