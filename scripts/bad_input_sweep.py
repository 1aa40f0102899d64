"""Drive the command line with the bad input a tired (or hostile) user types, and count tracebacks.

    .venv/bin/python scripts/bad_input_sweep.py            # every case; about 20 minutes on 2 busy shared cores
    .venv/bin/python scripts/bad_input_sweep.py -k attach  # the cases whose command line holds "attach"
    .venv/bin/python scripts/bad_input_sweep.py -k signal  # the signal cases; -k read_trace: the trace reader's

Three parts, one line per case: bad input on the command line (below), hostile traces opened with the reader
the app's Open trace uses (scripts/sweep_traces.py), and signals sent to running commands
(scripts/sweep_signals.py).

Each case runs ``specscope`` (``specscope.launcher``, the console script's module) in a process of its own,
forked from an interpreter that has imported specscope once (tests/warm_python.py: ten seconds of imports paid
once, not per case; the signal cases start fresh interpreters, since starting is one of their moments), against
a tiny target and files made here
(character devices when this process may make them, a named pipe, a JSON file nested 100,000 deep, ...), and
``attach`` against a scripted fake server (tests/fake_engine.py). A case passes when it ends with exactly one
``specscope: error:`` line, no traceback, exit code 2 (bad input) or 1 (a server fault), and every device and
pipe it was given is still one afterwards. Prints one line per case and the totals (the README's figures).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sweep_signals
import sweep_traces

from tests.fake_engine import FakeEngine, Script, good_stream, llama_chunk
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.warm_python import WarmPython

T = "--target {d}/target --drafter lookup --no-chat-template --quiet --max-new-tokens 8"
CASES = [  # (command line, expected exit code)
    (f"run {T} --prompt w5 --trace {{d}}/null", 2),
    (f"run {T} --prompt w5 --trace {{d}}/full", 2),
    (f"run {T} --prompt w5 --trace {{d}}/sib.csv", 2),  # sib.tokens.csv is a device
    (f"run {T} --prompt w5 --chrome-trace {{d}}/null", 2),
    (f"run {T} --prompt w5 --chrome-trace {{d}}/fifo", 2),
    (f"run {T} --prompt w5 --trace {{d}}", 2),
    (f"run {T} --prompt w5 --trace ''", 2),
    (f"run {T} --prompt w5 --chrome-trace ''", 2),
    (f"run {T} --prompt w5 --trace /proc/x/y.csv", 2),
    (f"run {T} --prompt-file /dev/zero", 2),
    (f"run {T} --prompt-file {{d}}/zero-link", 2),
    (f"run {T} --prompt-file {{d}}/fifo", 2),
    (f"run {T} --prompt-file {{d}}/big.json", 2),
    (f"run {T} --prompt-file {{d}}", 2),
    (f"run {T} --prompt-file ''", 2),
    (f"run {T} --prompt-file {{d}}/bad.txt", 2),
    (f"run {T} --prompt ''", 2),
    (f"run {T} --prompt w5 --lookup-max-ngram 99999999999999999999", 2),
    (f"run {T} --prompt w5 --lookup-num-tokens 99999999999999999999", 2),
    (f"run {T} --prompt w5 --early-exit-layers 99999999999999999999", 2),
    (f"run {T} --prompt w5 --max-memory cpu=infGB --device-map auto", 2),
    (f"run {T} --prompt w5 --max-memory cpu=nanGB --device-map auto", 2),
    (f"run {T} --prompt w5 --max-memory cpu=99999999999GiB --device-map auto", 2),
    (f"run {T} --prompt w5 --max-tokens 99999999999999999999", 2),
    (f"run {T} --prompt w5 --max-tokens 0", 2),
    ("run --target {d}/target --drafter eagle --draft {d}/head-null --prompt w5 --quiet", 2),
    ("run --target {d}/target --drafter eagle --draft {d}/head-neg --prompt w5 --quiet", 2),
    ("run --target {d}/target --drafter eagle --draft /nonexistent --prompt w5 --quiet", 2),
    ("run --demo --drafter eagle --draft /nonexistent --prompt hi", 2),
    ("run --demo --drafter model --draft /nonexistent --prompt hi", 2),
    ("bench --target {d}/target --drafter lookup --out ''", 2),
    ("bench --target {d}/target --drafter lookup --out /", 2),
    ("bench --target {d}/target --drafter lookup --out .", 2),
    ("bench --target {d}/target --drafter lookup --out {d}/", 2),
    ("bench --target {d}/target --drafter lookup --out {d}/rep", 2),  # rep.md is a device
    ("bench --target {d}/target --drafter lookup --prompts {d}/empty.json", 2),
    ("bench --target {d}/target --drafter lookup --prompts {d}/deep.json", 2),
    ("bench --target {d}/target --drafter lookup --prompts {d}/big.json", 2),
    ("bench --target {d}/target --drafter lookup --prompts {d}/fifo.json", 2),
    ("bench --target {d}/target --drafter lookup --threads 99999999999999999999", 2),
    ("bench --target {d}/target --drafter lookup --rounds 99999999999999999999", 2),
    ("bench --target {d}/target --drafter lookup --lookup-tokens 99999999999999999999", 2),
    ("verify --target {d}/target --drafter lookup --offsets ''", 2),
    ("verify --target {d}/target --drafter lookup --offsets 99999999999999999999", 2),
    ("verify --target {d}/target --drafter lookup --draws 99999999999999999999", 2),
    ("verify --target {d}/target --drafter lookup --top-n 99999999999999999999", 2),
    ("verify --target {d}/target --drafter lookup --json {d}/null", 2),
    ("verify --target {d}/target --drafter lookup --json ''", 2),
    ("verify --target {d}/target --drafter lookup --prompts {d}/deep.json", 2),
    ("verify --target {d}/target --drafter lookup --prompts {d}/fifo.json", 2),
    ("verify --target {d}/target --drafter lookup --prompts {d}/empty.json", 2),
    ("verify --target {d}/target --drafter lookup --no-greedy --draws 0", 2),
    ("attach http://127.0.0.1:99999", 2),
    ("attach http://127.0.0.1:abc/", 2),
    ("attach http://[::1", 2),
    ("attach 'http://127.0.0.1:80/a b'", 2),
    ("attach $'http://127.0.0.1\\x01:80'", 2),
    ("attach 'ftp://user:PASSWORD@127.0.0.1/'", 2),
    ("attach 'http://user:PASSWORD@[::1:80'", 2),
    ("attach ''", 2),
    ("attach {url} --temperature nan", 2),
    ("attach {url} --temperature inf", 2),
    ("attach {url} --timeout inf", 2),
    ("attach {url} --timeout 0", 2),
    ("attach {url} --scrape-interval inf", 2),
    ("attach {url} --scrape-interval 0", 2),
    ("attach {url} --prompt ''", 2),
    ("attach {url} --prompt-file /dev/zero", 2),
    ("attach {url} --prompt-file {d}/fifo", 2),
    ("attach {url} --prompt-file {d}/bad.txt", 2),
    ("attach {url} --max-tokens 99999999999999999999", 2),
    ("attach {url} --max-new-tokens 0", 2),
    ("attach {url} --rounds 99999999999999999999", 2),
    ("attach {url} --trace /proc/x/y.csv", 2),
    ("attach {url} --trace {d}/null", 2),
    ("attach {url} --plain-url http://[::1", 2),
    ("attach http://127.0.0.1:9 --prompt hi", 1),  # nothing listens there
    ("attach 'http://user:PASSWORD@127.0.0.1:9' --prompt hi", 1),
    ("attach {cut} --prompt hi --trace {d}/cut.csv", 1),
    ("attach {delta} --prompt hi", 1),
    ("attach {nan} --prompt hi", 1),
    ("attach {textnum} --prompt hi", 1),
    ("attach {deep} --prompt hi", 1),
    ("attach {url} --prompt hi --plain-url {refuses}", 1),
    # issue 41: every value bounded where it enters, the worker's port before loading, /metrics missing, the
    # app's arguments, a bad flag as one line
    (f"run {T} --prompt w5 --top-k 99999999999999999999 --temperature 0.8", 2),
    (f"run {T} --prompt w5 --temperature 1e300", 2),
    (f"run {T} --prompt w5 --temperature 1e-300", 2),
    (f"run {T} --prompt w5 --top-p 1e-300", 2),
    (f"run {T} --prompt w5 --bogus", 2),
    ("run --target {d}/target --drafter lookup --prompt w5 --k", 2),
    ("serve --target {d}/target --drafter lookup --port {busy}", 2),
    ("serve --target {d}/target --drafter lookup --host 192.0.2.1 --port 0", 2),
    ("attach {nometrics} --prompt hi --trace {d}/nometrics.csv", 1),
    ("--max-new-tokens 2147483648", 2),
    ("--max-new-tokens 0", 2),
    ("--screenshot-after -1 --screenshot {d}/shot.png", 2),
    ("--screenshot {d} --no-load", 2),
    ("--screenshot {d}/null --no-load", 2),
    ("--open-trace {d}/bad.txt --screenshot {d}/shot.png", 2),
    ("--open-trace {d}/deep.json --screenshot {d}/shot.png", 2),
    ("--bogus", 2),
]

SERVERS = {  # name in a case → what that fake server streams
    "url": Script(),
    "cut": Script(chunks=good_stream()[:3], done=False),
    "delta": Script(chunks=[json.dumps({"choices": [{"delta": "oops"}]})]),
    "nan": Script(chunks=[*good_stream()[:2], '{"choices": [{"text": "x"}], "timings": {"predicted_n": NaN}}']),
    "textnum": Script(chunks=[*good_stream()[:2], llama_chunk(5, 3)]),
    "deep": Script(chunks=[*good_stream()[:2], "[" * 100_000 + "]" * 100_000]),
    "refuses": Script(completion_status=500),
    "nometrics": Script(metrics_status=404),  # llama.cpp's server without --metrics
}


def make_files(d: Path) -> list[Path]:
    """The hostile files; returns the devices and pipes that must still be devices and pipes afterwards."""
    save_model_dir(d / "target", tiny_model(5, vocab_size=64, logit_scale=3.0), word_tokenizer())
    specials: list[Path] = []
    for name, minor in (("null", 3), ("full", 7), ("sib.tokens.csv", 3), ("rep.md", 3)):
        try:
            os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(1, minor))
            specials.append(d / name)
        except PermissionError:  # not root: those cases then see a missing file instead of a device
            pass
    for name in ("fifo", "fifo.json"):
        os.mkfifo(d / name)
        specials.append(d / name)
    (d / "zero-link").symlink_to("/dev/zero")
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "empty.json").write_text(json.dumps({"kind": "prose", "prompts": []}))
    (d / "big.json").write_text(json.dumps({"kind": "prose", "prompts": [
        {"id": "x", "title": "x", "text": "w5 " * 2_000_000}]}))
    (d / "bad.txt").write_bytes(b"w5 \xff\xfe")
    for name, value in (("head-null", None), ("head-neg", -5)):
        (d / name).mkdir()
        key = "hidden_size" if value is None else "draft_vocab_size"
        config = {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48, "vocab_size": 64, key: value}
        (d / name / "config.json").write_text(json.dumps(config))
    return specials


def kind(path: Path) -> int:
    return stat.S_IFMT(os.lstat(path).st_mode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-k", default="", help="only the cases whose command line holds this text")
    args = parser.parse_args()
    cases = [(c, rc) for c, rc in CASES if args.k in c]
    with tempfile.TemporaryDirectory(prefix="specscope-sweep-") as tmp:
        d = Path(tmp)
        specials = make_files(d)
        kinds = {p: kind(p) for p in specials}
        servers = {name: FakeEngine(script=script) for name, script in SERVERS.items()}
        for server in servers.values():
            server.__enter__()
        env = dict(os.environ, SPECSCOPE_DATA_DIR=str(d / "data"), OMP_NUM_THREADS="1", QT_QPA_PLATFORM="offscreen")
        busy = socket.create_server(("127.0.0.1", 0))  # a port something else listens on
        failures = tracebacks = 0
        warm = WarmPython()  # each case a process forked from one interpreter that imported specscope once
        try:
            for case, want in cases:
                line = case.format(d=d, busy=busy.getsockname()[1], **{name: s.url for name, s in servers.items()})
                # the shell's words ($'...' quoting included), then the command in a process of its own
                argv = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True,
                                      check=True).stdout.decode().split("\0")[:-1]
                proc = warm.run(argv, module="specscope.launcher", env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
                _, err = proc.communicate(timeout=300)
                errors = [ln for ln in err.splitlines() if ln.startswith("specscope: error: ")]
                traceback = "Traceback" in err or "Exception ignored" in err
                tracebacks += traceback
                ok = not traceback and len(errors) == 1 and proc.returncode == want and "PASSWORD" not in err
                failures += not ok
                shown = errors[-1] if errors else (err.strip().splitlines() or ["(no error line)"])[-1]
                shown = shown.replace(str(d), "{d}")
                print(f"{'ok  ' if ok else 'FAIL'} exit {proc.returncode} | {case} | {shown[:160]}", flush=True)
        finally:
            busy.close()
            warm.close()
            for server in servers.values():
                server.__exit__()
        replaced = [str(p) for p in specials if not p.exists() or kind(p) != kinds[p]]
        print(f"\n{len(cases)} command-line cases: {failures} not one sentence with the expected exit code, "
              f"{tracebacks} tracebacks; {len(specials)} devices and pipes given, {len(replaced)} replaced "
              f"{replaced or ''}\n", flush=True)
        trace_lines, trace_failures, trace_tracebacks = sweep_traces.run_cases(d / "traces", args.k)
        print(f"\n{len(trace_lines)} trace-reader cases: {trace_failures} not the expected sentence or warning, "
              f"{trace_tracebacks} tracebacks\n", flush=True)
        sweep_signals.make_long_target(d)
        signal_lines, signal_failures, signal_tracebacks = sweep_signals.run_cases(d, sys.executable, env, args.k)
        print(f"\n{len(signal_lines)} signal cases: {signal_failures} not one sentence with exit code 130/143 and "
              f"the work kept, {signal_tracebacks} tracebacks", flush=True)
    n = len(cases) + len(trace_lines) + len(signal_lines)
    print(f"\nIn all: {n} cases, {failures + trace_failures + signal_failures} failures, "
          f"{tracebacks + trace_tracebacks + signal_tracebacks} tracebacks")
    return 1 if failures or replaced or trace_failures or signal_failures else 0


if __name__ == "__main__":
    sys.exit(main())
