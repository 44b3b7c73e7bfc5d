"""Keys of what the plugin keeps in pytest's config stash, shared by its modules."""

from __future__ import annotations

from typing import Any

import pytest

STATE_KEY = pytest.StashKey["Any"]()
"""The run's state: its selection, RunState, folder, gate outcome."""
ERROR_KEY = pytest.StashKey[pytest.UsageError]()
"""A usage error found at configure time, raised at collection."""


def plugin_state(config: pytest.Config) -> dict[str, Any]:
    return config.stash.get(STATE_KEY, {}) if hasattr(config, "stash") else {}
