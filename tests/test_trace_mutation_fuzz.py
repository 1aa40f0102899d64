"""Mutated event logs (issue 41, item 9), full tier: 2,000 seeded random mutants of a real run's log — a field
set to a hostile number, a line deleted, repeated or moved, a token list emptied, a run start repeated — each
read as the app's Open trace reads it. Every mutant is refused with one sentence naming its line, or read with
a warning, or read as a log whose values are all possible: nothing impossible gets in unsaid, nothing crashes.

The possibility checks below are written here, apart from the reader's, from the issue's list: probabilities
(top-5 included) from 0 to 1, times never negative, no iteration ending before it starts, one run start and
first, iteration numbers without a gap, memory readings from 0 to 2^62, proposals with their tokens."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from specscope.core.events import RunStarted
from specscope.core.records import IterationRecord
from specscope.core.trace.errors import TraceError
from specscope.core.trace.files import read_trace, write_trace
from tests.trace_samples import sample_baselines, sample_records, sample_run_started

pytestmark = pytest.mark.slow

MUTANTS = 2_000
HOSTILE_NUMBERS = (-1, -1e-9, -1e30, 1e30, 1e308, -1e308, 2, 1.5, 0, 2**31, 2**63, -(2**63), 10**12, 0.5)


def _base_lines(tmp_path: Path) -> list[str]:
    records, baselines = sample_records(), sample_baselines()
    events: list[Any] = [sample_run_started()]
    for i, record in enumerate(records):
        events.append(record)
        if i < len(baselines):
            events.append(baselines[i])
    write_trace(tmp_path / "base.csv", events)
    text = (tmp_path / "base.events.jsonl").read_text(encoding="utf-8")
    return text.split("\n")[:-1]


def _numeric_paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [path]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _numeric_paths(v, (*path, k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _numeric_paths(v, (*path, i))]
    return []


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


def _mutant(lines: list[str], rng: random.Random) -> tuple[str, list[str]]:
    """One mutation of the log's lines (the header, line 1, left alone), and what it was."""
    body = [json.loads(line) for line in lines[1:]]
    kind = rng.choice(["number", "number", "number", "delete", "repeat", "move", "empty_tokens", "top5",
                       "times", "memory", "second_start"])
    i = rng.randrange(len(body))
    if kind == "number":
        paths = _numeric_paths(body[i])
        if paths:
            path, value = rng.choice(paths), rng.choice(HOSTILE_NUMBERS)
            _set(body[i], path, value)
            kind = f"{body[i]['type']} {'.'.join(map(str, path))} = {value!r}"
    elif kind == "delete":
        kind = f"line {i + 2} deleted"
        del body[i]
    elif kind == "repeat":
        body.insert(i, json.loads(json.dumps(body[i])))
    elif kind == "move":
        j = rng.randrange(len(body))
        body.insert(j, body.pop(i))
        kind = f"line {i + 2} moved to {j + 2}"
    else:
        iterations = [obj for obj in body if obj["type"] == "iteration"]
        it = rng.choice(iterations)
        if kind == "empty_tokens":
            it["tokens"] = []
        elif kind == "top5":
            with_top5 = [t for t in it["tokens"] if t.get("top5")]
            if with_top5:
                rng.choice(with_top5)["top5"][0][1] = rng.choice((1e308, -1.0, 2.0, -1e-12))
        elif kind == "times":
            it["t_end_s"], it["t_start_s"] = it["t_start_s"], it["t_end_s"] + rng.choice((0.0, 1.0, 1e6))
        elif kind == "memory":
            it["memory"] = {rng.choice(("gpu_used_bytes", "host_rss_bytes")): rng.choice((-1.0, 1e30, -1e-3))}
        else:
            body.insert(rng.randrange(1, len(body) + 1), json.loads(json.dumps(body[0])))
    return kind, [lines[0], *(json.dumps(obj) for obj in body)]


def _impossible(events: list[Any]) -> str | None:
    """The first impossible thing in a read log, in words; None when everything in it could have happened."""
    starts = [k for k, e in enumerate(events) if isinstance(e, RunStarted)]
    if starts != [0]:
        return f"run starts at {starts}"
    iterations = [e for e in events if isinstance(e, IterationRecord)]
    if [r.iteration for r in iterations] != list(range(len(iterations))):
        return f"iteration numbers {[r.iteration for r in iterations]}"
    for e in events:
        for name in ("t_s", "t_start_s", "t_end_s"):
            value = getattr(e, name, 0.0)
            if not value >= 0:
                return f"{type(e).__name__}.{name} = {value}"
    for r in iterations:
        if r.t_end_s < r.t_start_s:
            return f"iteration {r.iteration} ends before it starts"
        for name in ("draft_ms", "verify_ms", "rollback_ms", "iteration_ms"):
            value = getattr(r, name)
            if not (math.isnan(value) or value >= 0):
                return f"iteration {r.iteration} {name} = {value}"
        for key, value in r.memory.items():
            if not 0 <= value <= 2**62:
                return f"iteration {r.iteration} memory {key} = {value}"
        for t in r.tokens:
            probabilities = [p for p in (t.p, t.q) if p is not None] + [p for _, p in t.top5]
            if any(not 0 <= p <= 1 + 1e-6 for p in probabilities):
                return f"iteration {r.iteration} a probability in {probabilities}"
        if any(other.tokens for other in iterations) and r.n_drafted > 0 and not r.tokens:
            return f"iteration {r.iteration} drafted {r.n_drafted} with no tokens"
    return None


def test_no_mutant_changes_the_data_unsaid(tmp_path) -> None:
    lines = _base_lines(tmp_path)
    rng = random.Random(41)
    path = tmp_path / "base.events.jsonl"  # beside its session file, which the reader would miss
    outcomes = {"refused": 0, "warned": 0, "clean": 0}
    silent: list[str] = []
    for n in range(MUTANTS):
        kind, mutant = _mutant(lines, rng)
        path.write_text("\n".join(mutant) + "\n", encoding="utf-8")
        try:
            loaded = read_trace(path)
        except TraceError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith("base.events.jsonl: line "), (kind, message)
            outcomes["refused"] += 1
            continue
        except Exception as exc:
            pytest.fail(f"mutant {n} ({kind}) crashed the reader: {type(exc).__name__}: {exc}")
        if loaded.warnings:
            outcomes["warned"] += 1
            continue
        outcomes["clean"] += 1
        problem = _impossible(loaded.events)
        if problem is not None:
            silent.append(f"mutant {n} ({kind}): {problem}")
    assert silent == [], f"{len(silent)} mutants read with no warning: " + "; ".join(silent[:10])
    assert outcomes["refused"] > 100 and outcomes["warned"] > 100 and outcomes["clean"] > 100, outcomes
