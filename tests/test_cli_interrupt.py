"""Ctrl-C (SIGINT) and SIGTERM keep what arrived in ``attach``, ``bench`` and ``verify``: real signals sent to a
process of its own (forked from the warm interpreter, tests/warm_python.py, as tests/test_cli_kill.py does).

Each ends with one ``specscope: error:`` sentence saying what was kept and where, no traceback, and exit code
128 + the signal (130 for SIGINT, 143 for SIGTERM), as ``run`` does. The moment of the signal is read from what
the process says on stderr (its progress lines), never from a sleep."""

from __future__ import annotations

import csv
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from specscope.core.trace.files import read_trace
from tests.fake_engine import FakeEngine, Script, good_stream
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.warm_python import WarmPython, WarmRun

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def long_target(tmp_path_factory) -> Path:
    """A tiny target without an end-of-text token and with a far context window: runs last as long as asked."""
    model = tiny_model(7, vocab_size=64, logit_scale=3.0)
    model.config.max_position_embeddings = 1 << 20
    tokenizer = word_tokenizer()
    tokenizer.eos_token = None
    return save_model_dir(tmp_path_factory.mktemp("interrupt") / "target", model, tokenizer)


def start(warm: WarmPython, *argv: str, data_dir: Path) -> WarmRun:
    env = dict(os.environ, OMP_NUM_THREADS="1", SPECSCOPE_DATA_DIR=str(data_dir))
    return warm.run(list(argv), env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_stderr_until(proc: WarmRun, marker: str, timeout: float = 180.0) -> bytes:
    """What the process wrote on stderr up to and including ``marker``; the process is killed if it never
    says it (or ends first), so no process outlives the test."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while marker.encode() not in seen:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        chunk = os.read(fd, 1 << 16) if ready else b""
        if not chunk:
            proc.kill()
            raise AssertionError(f"never said {marker!r}; said: {seen.decode(errors='replace')[-2000:]}")
        seen += chunk
    return seen


def finish(proc: WarmRun, said: bytes) -> tuple[str, str]:
    """Stdout and the whole of stderr once the process has ended."""
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.decode(), (said + err).decode()


def one_sentence(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("specscope: error: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Exception ignored" not in err and "KeyboardInterrupt" not in err, err
    return lines[0]


# --- bench ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_bench_and_keeps_the_runs_that_finished(long_target, warm_python, tmp_path, sig,
                                                               code) -> None:
    out_stem = tmp_path / "report"
    proc = start(warm_python, "bench", "--target", str(long_target), "--drafter", "lookup", "--prompts", "prose",
                 "--limit", "1", "--rounds", "1000", "--max-new-tokens", "16", "--no-transformers", "--k", "2",
                 "--no-adaptive", "--out", str(out_stem), data_dir=tmp_path / "data")
    said = read_stderr_until(proc, "round 1/1000")  # a first run has finished
    proc.send_signal(sig)
    out, err = finish(proc, said)
    assert proc.returncode == code, err
    line = one_sentence(err)
    name = signal.Signals(sig).name
    n = int(line.split(" after ", 1)[1].split(" of ", 1)[0])
    assert line == (f"specscope: error: stopped by {name} after {n} of 2000 runs; the runs that finished are in "
                    f"{out_stem}.md and {out_stem}.csv")
    assert 1 <= n < 2000
    with (tmp_path / "report.csv").open(newline="", encoding="utf-8") as f:
        assert len(list(csv.DictReader(f))) == n  # every finished run, none cut
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"Stopped by {name} after {n} of 2000 runs: the tables hold the runs that finished" in report
    assert report in out  # the same report on stdout


# --- verify -----------------------------------------------------------------------------------------------


def test_ctrl_c_stops_verify_and_keeps_the_checks_done(long_target, warm_python, tmp_path) -> None:
    json_path = tmp_path / "verify.json"
    ks = ",".join(str(k) for k in range(1, 17))
    proc = start(warm_python, "verify", "--target", str(long_target), "--drafter", "lookup", "--prompts", "prose",
                 "--k", ks, "--max-new-tokens", "200", "--draws", "0", "--json", str(json_path),
                 data_dir=tmp_path / "data")
    said = read_stderr_until(proc, "speculative k=1")  # a first greedy check is done
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, said)
    assert proc.returncode == 130, err
    line = one_sentence(err)
    report = json.loads(json_path.read_text(encoding="utf-8"))
    n = len(report["greedy"])
    assert n >= 1 and line == (f"specscope: error: stopped by SIGINT after {n} check{'s' * (n != 1)}; the "
                               f"checks done are above and in {json_path}")
    assert report["stopped_by"] == "SIGINT" and report["ok"] is False  # a partial check never passes
    assert report["result"].startswith(f"stopped by SIGINT after {n} check")
    assert "speculation keeps the target's output" not in out and f"Greedy: {n} of {n} speculative runs" in out


# --- attach -----------------------------------------------------------------------------------------------


def _attach(warm: WarmPython, engine: FakeEngine, tmp_path: Path) -> WarmRun:
    return start(warm, "attach", engine.url, "--prompt", "hi", "--max-new-tokens", "64", "--trace",
                 str(tmp_path / "att.csv"), "--json", data_dir=tmp_path / "data")


def _kept(tmp_path: Path, line: str, out: str) -> int:
    """The passes the sentence says were kept: the trace holds them (and the prompt pass), the last says it was
    interrupted, and the summary printed counts the same."""
    printed = json.loads(out)
    n, tokens = printed["summary"]["passes"], printed["summary"]["tokens"]
    assert line == (f"specscope: error: stopped by SIGINT after {n} verify pass{'es' * (n != 1)} ({tokens} token"
                    f"{'s' * (tokens != 1)}); what arrived is kept in {tmp_path / 'att.csv'}")
    records = read_trace(tmp_path / "att.csv").records
    assert sum(r.n_emitted for r in records) == tokens and len(records) in (n, n + 1)  # + the prompt pass
    if records:
        assert records[-1].finish_reason == "interrupted" and not records[-1].finished
    assert printed["error"] == "interrupted" and printed["session"]["stopped_by"] == "SIGINT"
    return n


def test_ctrl_c_closes_the_attached_stream_at_the_next_chunk_and_keeps_what_arrived(warm_python,
                                                                                    tmp_path) -> None:
    script = Script(chunks=good_stream(40), pause_after=5)
    with FakeEngine(script=script) as engine:
        proc = _attach(warm_python, engine, tmp_path)
        try:
            assert script.paused.wait(timeout=180), "the stream never started"
            proc.send_signal(signal.SIGINT)
            said = read_stderr_until(proc, "SIGINT received: stopping when the next chunk arrives")
        finally:
            script.resume.set()  # the next chunk: the client closes the stream there
        out, err = finish(proc, said)
    assert proc.returncode == 130, err
    n = _kept(tmp_path, one_sentence(err), out)
    assert n <= 5  # the stream was closed at the chunk after the signal, not read to its end


def test_a_second_ctrl_c_stops_a_stalled_stream_at_once(warm_python, tmp_path) -> None:
    script = Script(chunks=good_stream(40), pause_after=5)
    with FakeEngine(script=script) as engine:
        proc = _attach(warm_python, engine, tmp_path)
        try:
            assert script.paused.wait(timeout=180), "the stream never started"
            proc.send_signal(signal.SIGINT)
            said = read_stderr_until(proc, "SIGINT received")
            proc.send_signal(signal.SIGINT)  # the server sends nothing more: only a second signal ends it
            out, err = finish(proc, said)
        finally:
            script.resume.set()
    assert proc.returncode == 130, err
    _kept(tmp_path, one_sentence(err), out)


# --- while starting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_starting_is_one_line_not_an_import_traceback(sig, code) -> None:
    """Starting imports torch and transformers for seconds; a KeyboardInterrupt raised inside an import was a
    traceback (or transformers' ModuleNotFoundError). The signal is raised here where the imports would be."""
    import sys

    program = ("import signal, sys\n"
               "from specscope.core.commands.cli_checks import quiet_signals_while_starting\n"
               "quiet_signals_while_starting()\n"
               f"signal.raise_signal({int(sig)})\n"
               "print('not reached')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == code and done.stdout == ""
    assert done.stderr == f"specscope: error: {signal.Signals(sig).name} received while starting; nothing was done\n"


def test_starting_done_gives_ctrl_c_back_to_python() -> None:
    from specscope.core.commands.cli_checks import quiet_signals_while_starting, starting_done

    before = signal.getsignal(signal.SIGINT)
    if before is not signal.default_int_handler:
        pytest.skip("SIGINT is ignored here (the suite runs as a background job)")
    quiet_signals_while_starting()
    assert signal.getsignal(signal.SIGINT) is not before
    starting_done()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
