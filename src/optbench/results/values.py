"""Reading a table cell as a number: result files hold empty cells, NaN and strings side by side."""

from __future__ import annotations

import math
from typing import Any


def number(value: Any) -> float | None:
    """The cell as a float, or None when it is empty, NaN or not a number."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(result) else result
