"""The trace's CSV columns, declared once: ``ITERATION_SCHEMA``, ``TOKEN_SCHEMA`` and ``BASELINE_SCHEMA``.

Each column has a name, a unit, a cell type (``core.trace.cells``: how a value is written and parsed back),
where the value lives on the record, and a doc line. The CSV headers and rows, the writer, the legacy reader,
the units in the session file, the app's columns and the table in docs/trace-format.md
(``python -m specscope.core.trace.schema --doc-table``) all derive from them. Adding a column is one line here
(plus the record field it reads).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from specscope.core.controls import K_MAX
from specscope.core.records import IterationRecord, TokenRecord
from specscope.core.trace.cells import (
    BOOL,
    ESCAPED_TEXT,
    FLAGS,
    FLOAT,
    INT,
    MEMORY_JSON,
    OPT_FLOAT,
    OPT_INT,
    STATUS,
    STEPS,
    TEXT,
    TEXTS,
    TOP5,
    CellType,
)
from specscope.core.trace.errors import (
    TraceReadError as TraceReadError,  # re-exported: callers catch it from here
)


@dataclass(frozen=True)
class Column:
    """One CSV column. ``field`` is where the value lives on the row's subject (a dotted path such as
    ``controls.k``); the getter reads it there and the reader puts the parsed value back there."""

    name: str
    unit: str
    type: CellType
    doc: str
    field: str = ""  # defaults to ``name``
    required: bool = False  # a file without it is not a trace
    derived: bool = False  # computed from other fields: written for readers, never read back
    plotted: bool = False  # a per-iteration number the app keeps a column array of
    getter: Callable[[Any], Any] | None = None  # when the value is not at ``field`` as it is
    group: str = ""  # columns shown as one row of the docs' table
    old_names: tuple[str, ...] = ()  # what older traces call it: read under these too, written only as ``name``

    @property
    def path(self) -> str:
        return self.field or self.name

    def get(self, subject: Any) -> Any:
        return self.getter(subject) if self.getter is not None else operator.attrgetter(self.path)(subject)

    def cell(self, subject: Any) -> str:
        return str(self.type.format(self.get(subject)))

    def spec(self) -> dict[str, str]:
        return {"name": self.name, "unit": self.unit, "description": self.doc}


def _col(name: str, unit: str, type_: CellType, doc: str, **kw: Any) -> Column:
    return Column(name, unit, type_, doc, **kw)


class IterationRow:
    """The subject of one iteration-CSV row: the record, and the measurement's snapshot after it (None when
    the row is written without one). Attributes not here are the record's."""

    __slots__ = ("record", "snapshot")

    def __init__(self, record: IterationRecord, snapshot: Any = None):
        self.record = record
        self.snapshot = snapshot

    def __getattr__(self, name: str) -> Any:
        return getattr(self.record, name)


def _snap(row: Any, path: str) -> Any:
    """A snapshot value for a row (None without a snapshot, or where a step of the path is None)."""
    value = getattr(row, "snapshot", None)
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part)
    return value


# Memory columns (one per memory key, or one JSON column) follow these in the iteration CSV.
ITERATION_SCHEMA: tuple[Column, ...] = (
    _col("iteration", "", INT, "iteration number in the run, from 0", required=True, plotted=True),
    _col("mode", "", TEXT, "`speculative`, `plain`, or `attached` (a serving engine's pass)", required=True),
    _col("drafter", "", TEXT, "drafter name", required=True),
    _col("k", "tokens", INT, "proposals requested this iteration", field="controls.k", required=True, plotted=True),
    _col("temperature", "", FLOAT, "sampling temperature (0 = greedy)", field="controls.temperature",
         required=True),
    _col("top_k", "tokens", INT, "top-k filter (0 = off)", field="controls.top_k", required=True),
    _col("top_p", "", FLOAT, "top-p filter (1.0 = off)", field="controls.top_p", required=True),
    _col("adaptive_k", "", BOOL, "`true` when k was chosen by the adaptive policy", field="controls.adaptive_k"),
    _col("n_drafted", "tokens", INT, "proposals drafted", required=True),
    _col("n_accepted", "tokens", INT, "proposals accepted", required=True),
    _col("n_emitted", "tokens", INT, "tokens committed (accepted + the correction or bonus token)",
         required=True),
    _col("draft_ms", "ms", FLOAT, "drafting time", required=True, plotted=True),
    _col("draft_step_ms", "ms", OPT_FLOAT, "`draft_ms / n_drafted` (derived; empty when nothing was drafted)",
         derived=True),
    _col("verify_ms", "ms", FLOAT, "the target's verification pass", required=True, plotted=True),
    _col("rollback_ms", "ms", FLOAT, "cutting both caches back to the committed prefix", required=True,
         plotted=True),
    _col("iteration_ms", "ms", FLOAT, "whole iteration", required=True, plotted=True),
    _col("context_len", "tokens", INT, "prompt + generated tokens after the iteration", required=True),
    _col("generated_len", "tokens", INT, "generated tokens after the iteration", required=True),
    _col("t_start_s", "s", FLOAT, "iteration start, `time.monotonic()` of the recording process", required=True),
    _col("t_end_s", "s", FLOAT, "iteration end, `time.monotonic()` of the recording process", required=True),
    # From here to predicted_speedup: the measurement's snapshot after this iteration (derived: written for
    # spreadsheets from the event stream, never read back; replay recomputes them through the same owner).
    _col("plain_step_ms", "ms", OPT_FLOAT, "the target's plain step, the median of the recent length-1 passes as "
         "timed (empty until measured)", plotted=True, derived=True, getter=lambda r: _snap(r, "costs.plain_step_ms")),
    _col("alpha_run", "", OPT_FLOAT, "α = accepted / judged proposals over the whole run so far (the headline α)",
         plotted=True, derived=True, getter=lambda r: _snap(r, "alpha")),
    _col("alpha_segment", "", OPT_FLOAT, "α over the current control segment (since the last control change)",
         plotted=True, derived=True, getter=lambda r: _snap(r, "segment.alpha")),
    _col("alpha_window", "", OPT_FLOAT, "α over the recent window of iterations", plotted=True, derived=True,
         getter=lambda r: _snap(r, "alpha_window")),
    _col("measured_speedup", "x", OPT_FLOAT, "measured speed-up over plain decoding: plain steps paired with the "
         "verify passes around them (empty until 2 plain steps, and while its interval is over 4-fold wide); "
         "over `measured_scope`", plotted=True,
         derived=True, getter=lambda r: _snap(r, "measured.value")),
    _col("measured_speedup_lo", "x", OPT_FLOAT, "lower end of the measured speed-up's 95% interval", plotted=True,
         derived=True, getter=lambda r: _snap(r, "measured.lo")),
    _col("measured_speedup_hi", "x", OPT_FLOAT, "upper end of the measured speed-up's 95% interval", plotted=True,
         derived=True, getter=lambda r: _snap(r, "measured.hi")),
    _col("measured_scope", "", TEXT, "what the measured speed-up is over: `run`, or the control segment's label",
         derived=True, getter=lambda r: _snap(r, "measured_scope") if _snap(r, "measured") else ""),
    _col("predicted_speedup", "x", OPT_FLOAT, "the cost model's speed-up at this k (acceptance by position, the "
         "verify fit)", plotted=True, derived=True, getter=lambda r: _snap(r, "predicted_speedup")),
    _col("explore", "", BOOL, "`true` when the iteration ran at another k to time a verify pass never measured"),
    _col("k_note", "", TEXT, "why k was what it was, when the controller or an exploration chose it"),
    _col("cpu_ms", "ms", OPT_FLOAT, "process CPU time during the iteration, all threads"),
    _col("preempted", "count", OPT_INT, "involuntary context switches of the process during the iteration"),
    _col("match_len", "tokens", OPT_INT, "prompt lookup's n-gram size or suffix decoding's match length behind "
         "the proposal (empty: no match, or another drafter)"),
    _col("expected_accepted", "tokens", OPT_FLOAT, "suffix decoding: the proposal's expected accepted tokens, the sum "
         "of its tokens' estimated probabilities (empty for other drafters)"),
    _col("flags", "", FLAGS, "paging-detector and machine-busy sentences joined with ` | ` (`|` and `\\` inside "
         "one are `\\`-escaped)"),
    _col("finished", "", BOOL, "`true` on the run's last iteration when it ended by itself"),
    _col("finish_reason", "", TEXT, "on the last iteration: `eos`, `max_new_tokens`, `context_window`, `stop`, "
         "`error`, `interrupted` (SIGINT) or `terminated` (SIGTERM)"),
)

MEMORY_JSON_COLUMN = "memory_json"
# The memory sample as one JSON cell: how an appended file (autosave) holds it, since memory keys are only
# known as samples arrive and a header cannot grow. Exports write one column per key instead.
MEMORY_JSON_SPEC = _col(MEMORY_JSON_COLUMN, "", MEMORY_JSON, "the memory sample as one JSON object (autosaved "
                        "sessions, whose memory keys are not known when the header is written)", field="memory")


class TokenRow(NamedTuple):
    """The subject of one tokens-CSV row: a token and the iteration it belongs to."""

    iteration: int
    token: TokenRecord


TOKEN_SCHEMA: tuple[Column, ...] = (
    _col("iteration", "", INT, "the iteration row the token belongs to", required=True),
    _col("position", "tokens", INT, "index in the generated continuation (0 = first new token); a rejected "
         "proposal has the position it would have taken", field="token.position", required=True),
    _col("token_id", "", INT, "vocabulary id", field="token.token_id", required=True),
    _col("text", "", ESCAPED_TEXT, "decoded text, escaped (see below)", field="token.text", required=True),
    _col("status", "", STATUS,
         "`accepted`, `rejected`, `correction`, `bonus`, `target` (no proposals) or `plain`",
         field="token.status", required=True),
    _col("p", "", OPT_FLOAT, "target's probability of the token after temperature/top-k/top-p",
         field="token.p"),
    _col("q", "", OPT_FLOAT, "drafter's probability (empty for tokens the target supplied)", field="token.q"),
    _col("accept_prob", "", OPT_FLOAT, "min(1, p/q) (derived; empty for target-supplied tokens)",
         field="token.accept_prob", derived=True),
    _col("top5", "", TOP5, "the target's top 5 at this position, compact JSON `[[token_id, prob], ...]` "
         "(empty if not recorded)", field="token.top5"),
    _col("top5_text", "", TEXTS, "the top 5's decoded texts in the same order, compact JSON `[text, ...]` (empty "
         "if not recorded; older traces have no such column)", field="token.top5_text"),
)

VERIFY_PREFIX = "verify_ms_len_"
VERIFY_LENGTHS = range(1, K_MAX + 2)  # a verify pass holds the committed token plus up to K_MAX proposals


def _verify_column(n: int) -> Column:
    return _col(f"{VERIFY_PREFIX}{n}", "ms", OPT_FLOAT, "a target pass over N tokens (the verify sweep; empty "
                "where not measured)", getter=lambda b: b.verify_ms_by_len.get(n), group="verify_ms_len_N")


BASELINE_SCHEMA: tuple[Column, ...] = (
    _col("iterations_done", "", INT, "iterations the run had done when the plain steps ran", required=True,
         old_names=("after_iteration",)),
    _col("context_len", "tokens", INT, "context they ran on", required=True),
    _col("step_ms", "ms", STEPS, "each plain step, joined with `;`", required=True),
    _col("median_step_ms", "ms", OPT_FLOAT, "median of `step_ms` (derived)", derived=True,
         getter=lambda b: b.median_step_ms if b.step_ms else None),
    _col("t_s", "s", FLOAT, "`time.monotonic()` when the baseline finished"),
    *(_verify_column(n) for n in VERIFY_LENGTHS),
)
LEGACY_VERIFY_JSON_COLUMN = "verify_ms_by_len_json"  # how 0.1.0's autosave held the sweep; read, never written

ITERATION_COLUMNS = tuple(c.name for c in ITERATION_SCHEMA)
TOKEN_COLUMNS = tuple(c.name for c in TOKEN_SCHEMA)
BASELINE_COLUMNS = tuple(c.name for c in BASELINE_SCHEMA)
_ITERATION_FIXED = frozenset((*ITERATION_COLUMNS, MEMORY_JSON_COLUMN))

_UNIT_SUFFIXES = (
    ("_bytes_per_s", "bytes/s"), ("_per_s", "1/s"), ("_bytes", "bytes"), ("_ms", "ms"), ("_s", "s"),
    ("_pct", "%"), ("_percent", "%"), ("_mib", "MiB"), ("_gib", "GiB"), ("_count", "count"), ("_w", "W"),
)


def unit_of(column: str) -> str:
    """The unit a memory (or other unit-named) column carries, from its name's suffix; '' if unknown."""
    for suffix, unit in _UNIT_SUFFIXES:
        if column.endswith(suffix):
            return unit
    return ""


def _memory_columns(memory_keys: Sequence[str] | None) -> list[Column]:
    if memory_keys is None:
        return [MEMORY_JSON_SPEC]
    return [_col(k, unit_of(k), OPT_FLOAT, "memory sample joined to the iteration",
                 getter=lambda r, k=k: r.memory.get(k)) for k in memory_keys]


def column_specs(memory_keys: Sequence[str] | None) -> dict[str, Any]:
    """Column lists with units and descriptions, as stored in the session sidecar."""
    return {
        "iterations": [c.spec() for c in (*ITERATION_SCHEMA, *_memory_columns(memory_keys))],
        "tokens": [c.spec() for c in TOKEN_SCHEMA],
        "baselines": [c.spec() for c in BASELINE_SCHEMA],
    }


def doc_table(schema: Sequence[Column]) -> str:
    """The markdown table docs/trace-format.md shows for ``schema`` (a test checks the doc holds it)."""
    lines = ["| column | unit | type | meaning |", "|---|---|---|---|"]
    done: set[str] = set()
    for c in schema:
        if c.group:
            if c.group in done:
                continue
            done.add(c.group)
            members = [m.name for m in schema if m.group == c.group]
            name = f"`{members[0]}` … `{members[-1]}`"
        else:
            name = f"`{c.name}`"
        doc = c.doc + "".join(f" (older traces: `{old}`)" for old in c.old_names)
        cells = (name, c.unit, c.type.name.replace("|", "\\|"), doc.replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def doc_tables() -> dict[str, str]:
    return {"iterations": doc_table(ITERATION_SCHEMA), "tokens": doc_table(TOKEN_SCHEMA),
            "baselines": doc_table(BASELINE_SCHEMA)}


def _main(argv: Sequence[str]) -> int:
    if list(argv) == ["--doc-table"]:
        for name, table in doc_tables().items():
            print(f"<!-- {name} columns: generated by python -m specscope.core.trace.schema --doc-table -->")
            print(table)
            print()
        return 0
    print("usage: python -m specscope.core.trace.schema --doc-table", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
