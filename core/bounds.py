"""The bounds of every value a run carries, declared once.

A value is checked where it enters — an argument (``core.commands.cli_checks``), a control from the app or a
client (``core.controls.validate``), a worker's or a serving engine's reply — against the same bounds the
trace writer and reader use (``core.trace.event_log``): what the command line accepts, a trace can hold, and
what a trace holds, a replay can read. So a run is never refused by its own writer at the end.

Plain numbers only: a leaf that everything may import.
"""

from __future__ import annotations

import math
import re

# ---- controls -------------------------------------------------------------------------------------------
K_MIN, K_MAX = 1, 16
# A positive temperature is a divisor of the logits (float32): below 1e-3 a logit of a few hundred would be
# scaled past what softmax keeps finite once masked entries (-inf) meet it, and above 100 every distribution is
# already uniform to float32's precision, while 1e300 turns into an infinity and sampling gets NaNs. 0 = greedy.
TEMPERATURE_MIN = 1e-3
TEMPERATURE_MAX = 100.0
# A top-k above the vocabulary is top-k off; the largest vocabularies are ~10^6, the bound leaves room.
TOP_K_MAX = 10_000_000
TOP_P_MIN = 1e-9  # top-p is in (0, 1]: the smallest positive value a trace or a control may hold
SEED_MAX = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit value
# The longest context windows of common models; the model's own window bounds a run further.
MAX_NEW_TOKENS = 131_072

# ---- what an iteration holds ----------------------------------------------------------------------------
# An attached engine may draft more than our K_MAX in one pass (its own k); beyond this a "pass" is not one.
MAX_DRAFTED = K_MAX + 64
MAX_ITERATION = 10**9
MAX_POSITION = 2**31  # a token's position, a context's length
MAX_TOKEN_ID = 2**31
# A memory reading is bytes, a count, a rate or an age: never negative, and nothing measures 2^62 of anything.
MEMORY_VALUE_MAX = float(2**62)
MAX_MEMORY_KEYS = 512
# A memory key becomes a CSV column name: letters, digits and ``_ . : -``, starting with a letter, a digit or
# ``_``, so no name can start a spreadsheet formula (``=``, ``+``, ``-``, ``@``) or break a header.
MEMORY_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,127}")


def memory_key_problem(key: object) -> str | None:
    """Why ``key`` cannot name a memory reading (one clause), or None when it can."""
    if not isinstance(key, str) or MEMORY_KEY_RE.fullmatch(key) is None:
        shown = repr(key)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return (f"memory key {shown} is not a name of letters, digits and _ . : - (at most 128, not starting "
                "with - )")
    return None


def temperature_problem(value: float) -> str | None:
    """Why ``value`` is no temperature sampling can use (one clause), or None."""
    if not math.isfinite(value) or value < 0:
        return f"must be 0 (greedy) or from {TEMPERATURE_MIN:g} to {TEMPERATURE_MAX:g}, got {value!r}"
    if value != 0 and not TEMPERATURE_MIN <= value <= TEMPERATURE_MAX:
        return f"must be 0 (greedy) or from {TEMPERATURE_MIN:g} to {TEMPERATURE_MAX:g}, got {value:g}"
    return None
