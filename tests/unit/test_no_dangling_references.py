"""Nothing in the repository cites a document its users never have: the research notes the
project was started from are not shipped, so a comment, a role, the catalog or a test cites
the vendor's own source (title and URL, or document and section) instead."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import ROOT

# spelled in parts, so that this file does not name them itself
UNSHIPPED = tuple(s.encode() for s in ("DOMAIN" + ".md", "LANDSCAPE" + ".md",
                                       "shared/" + "reference"))
# what is not the repository's own: version control, the environment, generated output
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".provision", "build", "dist", "node_modules",
                ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}


def _files(root: Path) -> list[Path]:
    found = []
    for here, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        found += [Path(here) / n for n in names]
    return found


def test_no_file_cites_a_document_users_do_not_have() -> None:
    files = _files(ROOT)
    assert len(files) > 100 and ROOT / "provisioner" / "roce.py" in files
    cited = sorted(f"{p.relative_to(ROOT)}: {name.decode()}" for p in files if p.is_file()
                   for name in UNSHIPPED if name in p.read_bytes())
    assert cited == []
