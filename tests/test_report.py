"""``specscope report TRACE [--json]`` through the real CLI: the summary ``run`` prints, from a trace, with the
snapshot the window's replay ends on; bad input is one sentence and exit code 2; no torch is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specscope.core.commands.cli import main
from specscope.core.events import RunFinished, RunStarted
from specscope.core.measure.run import feed_all
from specscope.core.records import ControlValues, IterationRecord, TokenRecord, TokenStatus
from specscope.core.trace.files import write_trace

K = 3


def stream() -> list:
    """A recorded speculative run: plain steps between blocks of iterations, tokens with their text."""
    events: list = [RunStarted("local", "tiny-target", "tiny-draft", "model", "tiny pair", "p", 3,
                               ControlValues(k=K), 64)]
    i, position, t = 0, 0, 0.0
    for block in range(5):
        for j in range(9):
            plain = j == 0
            drafted = 0 if plain else K
            accepted = 0 if plain else (i * 5) % (K + 1)
            tokens = [TokenRecord(100 + position + n, f"w{position + n} ", TokenStatus.ACCEPTED, position + n)
                      for n in range(accepted)]
            tokens.append(TokenRecord(7, "x ", TokenStatus.PLAIN if plain else TokenStatus.CORRECTION,
                                      position + accepted))
            if not plain and accepted < drafted:
                tokens.append(TokenRecord(9, "no", TokenStatus.REJECTED, position + accepted))
            verify = (20.0 if plain else 24.0) * (1 + 0.03 * ((i * 7) % 3)) * (1 + 0.1 * block)
            ms = verify + drafted * 2.0 + 0.3
            events.append(IterationRecord(
                i, "plain" if plain else "speculative", "none" if plain else "model", ControlValues(k=K), tokens,
                drafted, accepted, accepted + 1, 2.0 * drafted, verify, 0.3 if drafted else 0.0, ms, 3 + position,
                position, t, t + ms / 1000.0))
            position += accepted + 1
            t += ms / 1000.0 + 0.001
            i += 1
    events.append(RunFinished("max_new_tokens", i, position, t, 5.0, t_s=t))
    return events


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, list]:
    events = stream()
    paths = write_trace(tmp_path / "run.csv", events, {"prompt": "p"})
    return paths.iterations, events


def final_snapshot(events: list):
    return [s for _, s in feed_all(events) if s is not None][-1]


def test_report_prints_the_run_summary_of_the_snapshot_replay_ends_on(trace, capsys) -> None:
    path, events = trace
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    final = final_snapshot(events)
    assert final.measured is not None
    records = [e for e in events if isinstance(e, IterationRecord)]
    text = "".join(t.text for r in records for t in r.committed_tokens)
    assert "no" not in text and out.startswith(text + "\n\n")  # the committed text first, as `run` prints it
    assert "── specscope run" in out and "finish: max_new_tokens" in out
    assert f"measured {final.speedup_text()}" in out
    assert f"predicted ×{final.predicted_speedup:.2f} at k={K}" in out
    assert final.best_k_text() in out and final.alpha_text() in out
    # a fixed-k draft model proposed k at every iteration: the prediction over them is the one at k, said once
    assert final.predicted_span is not None and f"{final.predicted_span:.2f}" == f"{final.predicted_speedup:.2f}"
    assert "over the iterations measured" not in out


def test_report_json_is_run_jsons_shape_with_the_same_numbers(trace, capsys) -> None:
    path, events = trace
    assert main(["report", str(path.with_name("run.events.jsonl")), "--json"]) == 0  # a sibling file works too
    out = json.loads(capsys.readouterr().out)
    final = final_snapshot(events)
    metrics = out["metrics"]
    assert metrics["measured_speedup"] == final.measured.value and metrics["alpha"] == final.alpha
    assert metrics["best_k"] == final.best_k and metrics["predicted_speedup"] == final.predicted_speedup
    assert metrics["predicted_speedup_over_measured"] == final.predicted_span
    assert out["finish_reason"] == "max_new_tokens" and out["error"] is None
    records = [e for e in events if isinstance(e, IterationRecord)]
    assert out["token_ids"] == [t.token_id for r in records for t in r.committed_tokens]
    assert metrics["per_position_acceptance"] == [p.rate_per_draft for p in final.positions]


@pytest.mark.parametrize("what", ["missing", "not a trace", "folder without a trace"])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, capsys, what) -> None:
    if what == "missing":
        path = tmp_path / "nothing.csv"
    elif what == "not a trace":
        path = tmp_path / "notes.csv"
        path.write_text("name,age\nEmma,25\n", encoding="utf-8")
    else:
        path = tmp_path / "empty"
        path.mkdir()
    assert main(["report", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specscope: error: cannot report") and "Traceback" not in lines[0]


def test_report_imports_no_torch(trace) -> None:
    path, _ = trace
    code = ("import sys\nfrom specscope.launcher import main\nrc = main(['report', sys.argv[1], '--json'])\n"
            "sys.stdout.flush()\nassert 'torch' not in sys.modules, 'torch imported'\nsys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["metrics"]["iterations"] == 45
