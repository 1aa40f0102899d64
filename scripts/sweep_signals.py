"""The signal part of scripts/bad_input_sweep.py (issue 31 items 8 and 12, and Ctrl-C in attach, bench and
verify): real SIGINT and SIGTERM sent to ``specscope`` processes at a moment each one announces (a progress line
on stderr, iterations on disk, a fake server's stream stalling), never after a sleep.

A case passes when the process ends with exactly one ``specscope: error:`` sentence, no traceback, exit code
130 (SIGINT) or 143 (SIGTERM), and what it must keep is there (the trace, the report, the JSON). The seconds
from the first signal to the exit are printed (item 12: a SIGINT used to take 11.1 s to end a run).
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specscope.core.trace.files import read_trace
from tests.fake_engine import FakeEngine, Script, good_stream

LONG = "--target {d}/long --drafter lookup --no-chat-template"
LONG_BENCH = "--target {d}/long --drafter lookup"  # bench and verify feed prompts as they are


@dataclass
class SignalCase:
    label: str
    argv: str  # formatted with d (the sweep's folder) and url (a fake server that stalls mid-stream)
    # the signal goes once stderr holds this; "ITERATIONS": once the autosave holds 3; "STALLED": once the fake
    # server's stream stalls; "IMPORTING": once torch's libraries are mapped (the command is importing it)
    marker: str
    signals: list[int]
    code: int
    kept: Callable[[Path], str | None] = field(default=lambda d: None)  # None, or what is missing


def _trace_kept(name: str, reason: str) -> Callable[[Path], str | None]:
    def check(d: Path) -> str | None:
        loaded = read_trace(d / name)
        if not loaded.records:
            return f"{name} holds no iteration"
        # a run's stream ends with RunFinished; an attached request's last pass says how it ended
        said = loaded.finished.reason if loaded.finished is not None else loaded.records[-1].finish_reason
        return None if said == reason else f"{name} says the run ended {said!r}, not {reason!r}"
    return check


def _file_kept(name: str) -> Callable[[Path], str | None]:
    return lambda d: None if (d / name).is_file() and (d / name).stat().st_size else f"{name} was not written"


CASES = [
    SignalCase("Ctrl-C while starting (torch imports)", f"run {LONG} --prompt w5 --max-new-tokens 8", "IMPORTING",
               [signal.SIGINT], 130),
    SignalCase("SIGTERM while starting (torch imports)", f"bench {LONG_BENCH} --out {{d}}/never", "IMPORTING",
               [signal.SIGTERM], 143),
    SignalCase("Ctrl-C while the model loads", f"run {LONG} --prompt w5 --max-new-tokens 8", "Loading",
               [signal.SIGINT], 130),
    SignalCase("SIGTERM while the model loads (issue 41)", f"run {LONG} --prompt w5 --max-new-tokens 8", "Loading",
               [signal.SIGTERM], 143),
    SignalCase("Ctrl-C during a run", f"run {LONG} --prompt 'w5 w6 w7' --max-new-tokens 100000 --trace {{d}}/sig.csv",
               "ITERATIONS", [signal.SIGINT], 130, _trace_kept("sig.csv", "interrupted")),
    SignalCase("SIGTERM during a run", f"run {LONG} --prompt 'w5 w6 w7' --max-new-tokens 100000 --trace "
               "{d}/term.csv", "ITERATIONS", [signal.SIGTERM], 143, _trace_kept("term.csv", "terminated")),
    SignalCase("Ctrl-C twice during a run", f"run {LONG} --prompt 'w5 w6 w7' --max-new-tokens 100000 --trace "
               "{d}/twice.csv", "ITERATIONS", [signal.SIGINT, signal.SIGINT], 130,
               _trace_kept("twice.csv", "interrupted")),
    SignalCase("Ctrl-C during bench", f"bench {LONG_BENCH} --prompts prose --limit 1 --rounds 1000 --max-new-tokens 16 "
               "--no-transformers --k 2 --no-adaptive --out {d}/sig-bench", "round 1/1000", [signal.SIGINT], 130,
               _file_kept("sig-bench.csv")),
    SignalCase("SIGTERM during bench", f"bench {LONG_BENCH} --prompts prose --limit 1 --rounds 1000 "
               "--max-new-tokens 16 --no-transformers --k 2 --no-adaptive --out {d}/term-bench", "round 1/1000",
               [signal.SIGTERM], 143,
               _file_kept("term-bench.csv")),
    SignalCase("Ctrl-C during verify", f"verify {LONG_BENCH} --prompts prose --k 1,2,3,4,5,6,7,8 --max-new-tokens 200 "
               "--draws 0 --json {d}/sig-verify.json", "speculative k=1", [signal.SIGINT], 130,
               _file_kept("sig-verify.json")),
    SignalCase("Ctrl-C during attach (stream stalled)", "attach {url} --prompt hi --trace {d}/sig-att.csv",
               "STALLED", [signal.SIGINT, signal.SIGINT], 130, _trace_kept("sig-att.csv", "interrupted")),
]


def _maps_torch(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return False


def _wait_for(proc: subprocess.Popen, marker: str, d: Path, stalled: Script, timeout: float = 300,
              before: frozenset[Path] = frozenset()) -> bytes:
    """Stderr up to the moment to signal; raises TimeoutError (the process is killed) if it never comes.
    ``before``: the session folders there were before the process started (theirs do not count)."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker == "IMPORTING" and _maps_torch(proc.pid):  # torch's libraries are being loaded
            return seen
        if marker == "ITERATIONS":
            logs = [log for log in (d / "data" / "sessions").glob("*/trace.events.jsonl") if log.parent not in before]
            if any(log.read_bytes().count(b'"type":"iteration"') >= 3 for log in logs):
                return seen
        elif marker == "STALLED":
            if stalled.paused.is_set():
                return seen
        elif marker.encode() in seen:
            return seen
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            seen += chunk
    proc.kill()
    raise TimeoutError(f"never reached {marker!r}: {seen.decode(errors='replace')[-300:]}")


def run_cases(d: Path, python: str, env: dict[str, str], filter_text: str = "") -> tuple[list[str], int, int]:
    """Print one line per case; the lines, the failures and the tracebacks."""
    lines: list[str] = []
    failures = tracebacks = 0
    stalled = Script(chunks=good_stream(40), pause_after=5)
    with FakeEngine(script=stalled) as engine:
        for case in (c for c in CASES if filter_text in f"signal {c.label} {c.argv}"):
            argv = case.argv.format(d=d, url=engine.url)
            sessions = d / "data" / "sessions"
            before = frozenset(sessions.iterdir()) if sessions.exists() else frozenset()
            proc = subprocess.Popen(["bash", "-c", f"exec {shlex.quote(python)} -m specscope.launcher {argv}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env=env)
            problem = ""
            try:
                said = _wait_for(proc, case.marker, d, stalled, before=before)
                t_signal = time.monotonic()
                for i, sig in enumerate(case.signals):
                    if i:  # a second signal once the first is acknowledged
                        said += _wait_for(proc, "received", d, stalled, timeout=60)
                    proc.send_signal(sig)
                _, err_rest = proc.communicate(timeout=300)
                seconds = time.monotonic() - t_signal
                err = (said + err_rest).decode(errors="replace")
            except (TimeoutError, subprocess.TimeoutExpired) as e:
                proc.kill()
                _, err_b = proc.communicate()
                err, seconds, problem = err_b.decode(errors="replace"), float("nan"), str(e)
            finally:
                if case.marker == "STALLED":
                    stalled.resume.set()  # the server's thread may end
            errors = [ln for ln in err.splitlines() if ln.startswith("specscope: error: ")]
            traceback = "Traceback" in err or "Exception ignored" in err or "KeyboardInterrupt" in err
            tracebacks += traceback
            if not problem:
                try:
                    problem = case.kept(d) or ""
                except Exception as e:  # what was to be kept does not read
                    problem = f"{type(e).__name__}: {e}"
            ok = not traceback and len(errors) == 1 and proc.returncode == case.code and not problem
            failures += not ok
            shown = errors[-1] if errors else (err.strip().splitlines() or ["(no error line)"])[-1]
            if problem:
                shown = f"{problem} | {shown}"
            shown = shown.replace(str(d), "{d}")
            names = "+".join(signal.Signals(s).name for s in case.signals)
            line = (f"{'ok  ' if ok else 'FAIL'} exit {proc.returncode} after {seconds:5.1f} s | signal {names}: "
                    f"{case.label} | {shown[:170]}")
            print(line, flush=True)
            lines.append(line)
    return lines, failures, tracebacks


def make_long_target(d: Path) -> None:
    """A tiny target with no end of text and a far context window: a run lasts until it is stopped."""
    from tests.models import save_model_dir, tiny_model, word_tokenizer

    model = tiny_model(7, vocab_size=64, logit_scale=3.0)
    model.config.max_position_embeddings = 1 << 20
    tokenizer = word_tokenizer()
    tokenizer.eos_token = None
    save_model_dir(d / "long", model, tokenizer)


if __name__ == "__main__":
    sys.exit("run scripts/bad_input_sweep.py")
