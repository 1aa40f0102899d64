"""Trace files that attack the reader or the user: formula injection, deep or huge JSON, bad encodings, and a
fuzz of the reader on mutated real traces where every failure must be a TraceError."""

from __future__ import annotations

import csv
import random
import shutil
from pathlib import Path

import pytest

from specscope.core.commands import bench_report, bench_runs
from specscope.core.records import TokenStatus
from specscope.core.trace.cells import FORMULA_TRIGGERS, spreadsheet_restore, spreadsheet_safe
from specscope.core.trace.errors import TraceError, TraceFormatError
from specscope.core.trace.files import read_trace, write_trace
from specscope.core.trace.legacy_csv import legacy_stream

from .trace_samples import make_record, sample_baselines, sample_records

DATA = Path(__file__).parent / "data"

# Real tokens of the demo's tokenizer (SmolLM2-135M-Instruct): id -> decoded text. These reached the start of
# cells in the demo's traces; "=" followed by "cmd" is how a spreadsheet payload would be spelled.
DEMO_TOKENS = {45: "=", 48: "@", 27: "+", 29: "-", 12257: "cmd", 197: "\t"}


def _demo_record(i: int):
    r = make_record(i, texts=["=", "@", "+", "-"])
    for t, token_id in zip(r.tokens, (45, 48, 27, 29), strict=True):
        t.token_id = token_id
    r.drafter = "=cmd|' /C calc'!A0"
    r.flags = ["+1 paging", "@SUM(A1)"]
    return r


def test_demo_tokens_are_what_the_demo_tokenizer_gives(demo_target: tuple[Path, list[tuple[str, float]]]) -> None:
    """The session's converted demo (tests/conftest.py): this checked only when an earlier test had converted
    it, which on two xdist workers depended on which worker ran what first."""
    from transformers import AutoTokenizer

    target_dir, _ = demo_target
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    assert {i: tok.decode([i]) for i in DEMO_TOKENS} == DEMO_TOKENS


def test_no_cell_starts_a_formula_and_the_trace_round_trips(tmp_path: Path) -> None:
    records = [_demo_record(0), _demo_record(1)]
    paths = write_trace(tmp_path / "run.csv", records)
    for path in (paths.iterations, paths.tokens):
        with path.open(newline="", encoding="utf-8") as f:
            for row in list(csv.reader(f))[1:]:
                for cell in row:
                    # Negative numbers in number columns are not formulas; every text cell is neutralised.
                    is_number = cell.lstrip("-").replace(".", "", 1).replace("e", "", 1).isdigit()
                    assert is_number or not cell.startswith(FORMULA_TRIGGERS), (path.name, cell)
    with paths.tokens.open(newline="", encoding="utf-8") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    assert texts[:4] == ["'=", "'@", "'+", "'-"]
    loaded = read_trace(paths.iterations)
    assert loaded.records == records
    assert [t.text for t in loaded.records[0].tokens] == ["=", "@", "+", "-"]
    assert loaded.records[0].tokens[0].status is TokenStatus.ACCEPTED


@pytest.mark.parametrize("text", ["=", "'=", "''=x", "'", "''", "'a", "-1", "'-1", "=1+2", "\t=", "", "a=b"])
def test_neutralising_is_undone_exactly(text: str) -> None:
    cell = spreadsheet_safe(text)
    assert not cell.startswith(FORMULA_TRIGGERS)
    assert spreadsheet_restore(cell) == text


def test_bench_csv_neutralises_text_cells(tmp_path: Path) -> None:

    row = bench_runs.RunRow(round=0, method="@evil", prompt_id="=HYPERLINK(\"x\")", prompt_kind="+1", tokens=3,
                       seconds=0.5)
    bench_report.write_csv([row], tmp_path / "b.csv")
    with (tmp_path / "b.csv").open(newline="", encoding="utf-8") as f:
        cells = next(iter(csv.DictReader(f)))
    assert cells["prompt_id"] == "'=HYPERLINK(\"x\")" and cells["method"] == "'@evil" and cells["prompt_kind"] == "'+1"


# --- JSON bounds ---------------------------------------------------------------------------------------


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    """A trace in the CSV layout alone (as written before the event log): the cell-level reader."""
    paths = write_trace(tmp_path / "run.csv", legacy_stream(sample_records(), sample_baselines(), {}), {"k": 4})
    paths.events.unlink()
    return tmp_path


def _replace_cell(path: Path, column: str, row_index: int, value: str) -> int:
    """Set one cell; returns the file line it is on."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[row_index + 1][rows[0].index(column)] = value
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    return row_index + 2


@pytest.mark.parametrize(("cell", "says"), [
    ("[" * 1500 + "]" * 1500, "nested deeper than 2 levels"),  # RecursionError in 0.1.0
    ("[[1, 0.5]," + " " * 60_000 + "[2, 0.25]]", "more than the 4,096 allowed"),
    ("[" * 100_000 + "]" * 100_000, "field larger than field limit"),  # csv's own bound
])
def test_deep_or_huge_json_in_a_top5_cell_is_a_trace_error_naming_file_and_line(
        trace_dir: Path, cell: str, says: str) -> None:
    line = _replace_cell(trace_dir / "run.tokens.csv", "top5", 1, cell)
    with pytest.raises(TraceFormatError) as exc:
        read_trace(trace_dir / "run.csv")
    assert str(exc.value).startswith(f"run.tokens.csv: line {line}: ")
    assert says in str(exc.value) and len(str(exc.value)) < 300


def test_deep_json_in_a_memory_json_cell_is_a_trace_error_naming_file_and_line(tmp_path: Path) -> None:
    shutil.copytree(DATA / "trace-0.1.0" / "autosave", tmp_path / "s")
    line = _replace_cell(tmp_path / "s" / "trace.csv", "memory_json", 1, '{"a":' * 5000 + "1" + "}" * 5000)
    with pytest.raises(TraceFormatError) as exc:
        read_trace(tmp_path / "s")
    assert str(exc.value).startswith(f"trace.csv: line {line}: column memory_json:")
    assert "nested deeper" in str(exc.value)


def test_deep_or_huge_session_file_is_a_warning_naming_the_line(trace_dir: Path) -> None:
    (trace_dir / "run.session.json").write_text('{"a":\n' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    loaded = read_trace(trace_dir / "run.csv")
    assert loaded.records == sample_records() and loaded.session == {}
    assert loaded.warnings == ["run.session.json: line 2: JSON nested deeper than 64 levels; no session settings"]


def test_non_utf8_session_file_is_treated_like_a_missing_one(trace_dir: Path) -> None:
    (trace_dir / "run.session.json").write_bytes(b'{"format": "specscope-trace", "x": "\xff\xfe"}')
    loaded = read_trace(trace_dir / "run.csv")
    assert loaded.records == sample_records() and loaded.session == {}
    assert len(loaded.warnings) == 1 and "run.session.json" in loaded.warnings[0]
    assert "not UTF-8" in loaded.warnings[0] and "no session settings" in loaded.warnings[0]


# --- fuzz ----------------------------------------------------------------------------------------------

_NASTY = [b"\x00", b"\xff", b'"', b",", b"\n", b"\r", b"\\", b"'", b"=", b"nan", b"-1e999", b"[" * 2000,
          b'{"a":' * 300, b"9" * 5000, b"\xed\xa0\x80", b"\\u12", b";", b" | "]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    op = rng.randrange(7)
    if not data:
        return rng.choice(_NASTY)
    i = rng.randrange(len(data))
    if op == 0:  # flip a byte
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    if op == 1:  # insert something nasty
        return data[:i] + rng.choice(_NASTY) + data[i:]
    if op == 2:  # delete a range
        return data[:i] + data[i + rng.randrange(1, 64):]
    if op == 3:  # truncate (a crash mid-write)
        return data[:i]
    if op == 4:  # duplicate or drop a line
        lines = data.split(b"\n")
        j = rng.randrange(len(lines))
        return b"\n".join(lines[:j] + ([lines[j]] * 2 if rng.random() < 0.5 else []) + lines[j + 1:])
    if op == 5:  # replace a cell's content
        cells = data.split(b",")
        j = rng.randrange(len(cells))
        cells[j] = rng.choice(_NASTY)
        return b",".join(cells)
    return data[:i] + data[i:][::-1][: rng.randrange(1, 32)] + data[i:]  # garble a run of bytes


def test_reader_fuzz_every_failure_is_a_trace_error(tmp_path: Path) -> None:
    sources = {
        "export": sorted((DATA / "trace-0.1.0" / "export").iterdir()),
        "autosave": sorted((DATA / "trace-0.1.0" / "autosave").iterdir()),
    }
    (tmp_path / "now").mkdir()
    write_trace(tmp_path / "now" / "run.csv",
                legacy_stream([*sample_records(), _demo_record(5)], sample_baselines(), {}), {"k": 4})
    sources["now"] = sorted((tmp_path / "now").iterdir())
    originals = {name: {p.name: p.read_bytes() for p in files} for name, files in sources.items()}
    rng = random.Random(20261201)
    outcomes = {"read": 0, "trace_error": 0}
    work = tmp_path / "work"
    for case in range(1000):
        name = rng.choice(sorted(originals))
        files = dict(originals[name])
        for _ in range(rng.randint(1, 3)):
            victim = rng.choice(sorted(files))
            files[victim] = _mutate(files[victim], rng)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for fname, data in files.items():
            (work / fname).write_bytes(data)
        main = "trace.csv" if name == "autosave" else "run.csv"
        try:
            read_trace(work / main)
            outcomes["read"] += 1
        except TraceError as e:
            assert "\n" not in str(e) and len(str(e)) < 400, (case, str(e))
            outcomes["trace_error"] += 1
        except Exception as e:  # the point of the test: anything else fails it
            pytest.fail(f"case {case} ({name}): {type(e).__name__}: {e}")
    assert sum(outcomes.values()) == 1000
    assert outcomes["read"] > 100 and outcomes["trace_error"] > 100  # both paths exercised
