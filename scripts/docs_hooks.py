"""MkDocs hooks (mkdocs.yml `hooks:`): the reference tables are generated from the code's single
declarations, never kept by hand. A page's marker line `<!-- generated: NAME -->` becomes the table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[1] / "src")


def generated(name: str) -> str:
    """The Markdown that replaces `<!-- generated: NAME -->`."""
    if SRC not in sys.path:  # this checkout's source, installed or not (tox -e docs installs no optbench)
        sys.path.insert(0, SRC)
    if name == "columns":
        from optbench.results.schema import columns_markdown

        return columns_markdown()
    if name == "options":
        from optbench.matrix.settings import settings_markdown

        return settings_markdown()
    if name == "gate_options":
        from optbench.gate.config import gate_settings_markdown

        return gate_settings_markdown()
    raise KeyError(f"no generated table named {name!r}")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    import re

    return re.sub(r"^<!-- generated: ([a-z_]+) -->$", lambda m: generated(m.group(1)), markdown, flags=re.M)
