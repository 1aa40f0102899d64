"""A start message's ``options``: the plain-data fields of ``SessionOptions``, each type- and range-checked.

Only fields that are numbers or switches travel; nothing that names a place on the worker (the drill folder)
or says what the run is (its source, its prompt) can be set by a client.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from specscope.core.bounds import MAX_NEW_TOKENS
from specscope.core.events import MAX_ALPHA_WINDOW
from specscope.core.remote.protocol import drill_to_data

# name -> (kind, lowest, highest); kind "int", "float", "bool" or "seed" (a whole number or null)
OPTION_FIELDS: dict[str, tuple[str, float, float]] = {
    "max_new_tokens": ("int", 1, MAX_NEW_TOKENS),
    "seed": ("seed", -(2**63), 2**64),
    "plain": ("bool", 0, 1),
    "record_tokens": ("bool", 0, 1),
    "baseline_every": ("int", 0, 10_000),
    "baseline_steps": ("int", 1, 64),
    "measurement_budget": ("float", 0.001, 0.5),  # the schedule needs 0 < budget < its early budget < 1
    "explore_every": ("int", 0, 10_000),
    "alpha_window": ("int", 1, MAX_ALPHA_WINDOW),
    "memory_period_s": ("float", 0.0, 3600.0),
    "paging_factor": ("float", 1.0, 1000.0),
    "measure_bandwidth": ("bool", 0, 1),
}


def session_options_to_data(options: Any) -> dict[str, Any]:
    """The fields of a ``SessionOptions`` a start message may carry (its drill as data)."""
    data = {name: value for name, value in asdict(options).items() if name in OPTION_FIELDS}
    if getattr(options, "drill", None) is not None:
        data["drill"] = drill_to_data(options.drill)
    return data


def checked_option(name: str, value: Any) -> Any:
    kind, lo, hi = OPTION_FIELDS[name]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"the option {name} is not true or false")
        return value
    if kind == "seed" and value is None:
        return None
    if kind in ("int", "seed"):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"the option {name} is not a whole number from {lo:,} to {hi:,}")
        return value
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not lo <= value <= hi):
        raise ValueError(f"the option {name} is not a number from {lo:g} to {hi:g}")
    return float(value)


