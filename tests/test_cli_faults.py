"""Bad input and faults on the command line (issue 14): one ``specscope: error:`` sentence, no traceback,
exit code 2 for bad input before anything is loaded or written, and no decoded work lost."""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from specscope.core.commands.cli import main
from specscope.core.commands.cli_checks import Interrupted, SignalGuard
from specscope.core.controls import Controls
from specscope.core.trace import files as trace
from specscope.core.trace.autosave import default_sessions_dir
from specscope.core.trace.files import read_trace
from tests.faults import leftovers
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.warm_python import WarmPython, WarmRun

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("faults")
    target = tiny_model(5, vocab_size=64, logit_scale=3.0)
    return {"target": save_model_dir(root / "target", target, word_tokenizer()), "root": root}


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr); argparse's refusals count as exit codes."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def sessions() -> set[Path]:
    root = default_sessions_dir()
    return set(root.iterdir()) if root.exists() else set()


def one_sentence(err: str) -> str:
    """The error line: the last ``specscope: error:`` line; asserts there is exactly one and no traceback."""
    lines = [ln for ln in err.splitlines() if ln.startswith("specscope: error: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return lines[0]


def run_args(dirs: dict[str, Path], *extra: str) -> list[str]:
    return ["run", "--target", str(dirs["target"]), "--drafter", "lookup", "--no-chat-template", "--quiet",
            "--max-new-tokens", "8", *extra]


# --- bad values: refused before anything is loaded -------------------------------------------------------

BAD_RUN_FLAGS = [
    (["--prompt", "w5", "--temperature", "nan"], "argument --temperature: must be 0 (greedy) or from 0.001 to 100"),
    (["--prompt", "w5", "--temperature", "inf"], "argument --temperature: must be 0 (greedy) or from 0.001"),
    (["--prompt", "w5", "--seed", "-1"], "argument --seed: must be from 0 to"),
    (["--prompt", "w5", "--seed", "99999999999999999999999"], "argument --seed: must be from 0 to"),
    (["--prompt", "w5", "--baseline-every", "-5"], "argument --baseline-every: must be from 0 to 10,000"),
    (["--prompt", "w5", "--max-new-tokens", "1000000"], "argument --max-new-tokens: must be from 1 to 131,072"),
    (["--prompt", "w5", "--top-p", "2"], "argument --top-p: must be a finite number from 1e-09 to 1"),
    (["--prompt", ""], "--prompt is empty"),
    (["--prompt", "  \n "], "--prompt is empty"),
    (["--prompt", "w5 \udcff\udcfe"], "--prompt is not valid UTF-8 text"),  # bytes 0xff 0xfe via surrogateescape
]


@pytest.mark.parametrize(("argv", "sentence"), BAD_RUN_FLAGS)
def test_bad_run_input_is_one_sentence_and_exit_2(dirs, capsys, argv, sentence) -> None:
    before = sessions()
    rc, out, err = cli(capsys, *run_args(dirs, *argv))
    assert rc == 2 and out == ""
    assert sentence in one_sentence(err)
    assert sessions() == before  # nothing autosaved, nothing loaded


def test_non_utf8_prompt_file_names_the_file(dirs, capsys, tmp_path) -> None:
    bad = tmp_path / "prompt.txt"
    bad.write_bytes(b"w5 w6 \xff\xfe w7")
    rc, _, err = cli(capsys, *run_args(dirs, "--prompt-file", str(bad)))
    assert rc == 2
    assert f"prompt file {bad} is not UTF-8 text (invalid byte at offset 6)" in one_sentence(err)


@pytest.mark.parametrize("where", ["under_a_file", "a_folder"])
@pytest.mark.parametrize("flag", ["--trace", "--chrome-trace"])
def test_unwritable_output_is_refused_before_decoding(dirs, capsys, tmp_path, flag, where) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    path = blocker / "t.csv" if where == "under_a_file" else tmp_path
    before = sessions()
    rc, out, err = cli(capsys, *run_args(dirs, "--prompt", "w5 w6", flag, str(path)))
    assert rc == 2 and out == ""
    line = one_sentence(err)
    if where == "under_a_file":
        assert f"{flag} {path} cannot be written (Not a directory)" in line
    else:
        assert f"{flag} {path} is a folder, not a regular file" in line
    assert sessions() == before and leftovers(tmp_path) == []


def test_prompt_longer_than_the_context_window_is_refused(dirs, capsys) -> None:
    rc, _, err = cli(capsys, *run_args(dirs, "--prompt", " ".join(["w5"] * 600)))
    assert rc == 2
    assert "the prompt is 600 tokens but" in one_sentence(err) and "holds 512 positions" in err


def test_generation_stops_at_the_context_window(dirs, capsys) -> None:
    rc, out, err = cli(capsys, *run_args(dirs, "--prompt", " ".join(["w5 w6"] * 250), "--max-new-tokens", "100",
                                         "--json", "--baseline-every", "4"))
    assert rc == 0, err
    result = json.loads(out)
    assert result["finish_reason"] == "context_window"
    assert len(result["token_ids"]) == 512 - 500


def test_quiet_is_quiet(dirs, capsys) -> None:
    rc, out, err = cli(capsys, *run_args(dirs, "--prompt", "w5 w6 w7"))
    assert rc == 0 and out and err == ""


# --- faults during and after a run ------------------------------------------------------------------------


def test_late_trace_write_failure_names_the_path_and_where_the_run_is(dirs, capsys, tmp_path, monkeypatch) -> None:
    """The disk fills up between the check and the export: the message names the path and the session folder,
    which holds the whole run; no temporary files are left."""
    import errno

    real_open = trace.open_for_csv
    failing: list[Path] = []

    def full(path: Path, mode: str):
        if path.parent == tmp_path:  # the export; the autosave folder keeps working
            failing.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, mode)

    monkeypatch.setattr(trace, "open_for_csv", full)
    rc, _out, err = cli(capsys, *run_args(dirs, "--prompt", "w5 w6 w5 w6", "--trace", str(tmp_path / "run.csv")))
    assert rc == 1 and failing
    line = one_sentence(err)
    assert f"cannot write {tmp_path / 'run.csv'}: No space left on device" in line
    folder = Path(line.rsplit("the whole trace is in ", 1)[1])
    saved = read_trace(folder)
    assert sum(r.n_emitted for r in saved.records) == 8
    assert leftovers(tmp_path) == [] and not (tmp_path / "run.csv").exists()


def test_late_chrome_trace_failure_saves_it_to_the_session_folder(dirs, capsys, tmp_path, monkeypatch) -> None:
    from specscope.core.trace import chrome_trace

    real = chrome_trace.write_chrome_trace
    target = tmp_path / "run.json"

    def full(path: Path, *a, **kw):
        if Path(path) == target:
            raise trace.TraceWriteError(Path(path), "No space left on device")
        return real(path, *a, **kw)

    monkeypatch.setattr(chrome_trace, "write_chrome_trace", full)
    rc, _, err = cli(capsys, *run_args(dirs, "--prompt", "w5 w6", "--chrome-trace", str(target)))
    assert rc == 1
    line = one_sentence(err)
    saved = Path(line.rsplit("saved it to ", 1)[1].split(" instead")[0])
    assert saved.name == "trace.chrome.json" and json.loads(saved.read_text())["traceEvents"]


def _subprocess_cli(warm: WarmPython, *argv: str, data_dir: Path | None = None, **kw) -> WarmRun:
    """``python -m specscope.core.commands.cli ARGV`` as a process of its own, forked from the session's warm
    interpreter (tests/warm_python.py) so it starts without ten seconds of imports."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if data_dir is not None:
        env["SPECSCOPE_DATA_DIR"] = str(data_dir)
    return warm.run(list(argv), env=env, cwd=ROOT, **kw)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_json_to_a_full_disk_is_one_sentence(dirs, warm_python) -> None:
    with open("/dev/full", "w") as full:
        proc = _subprocess_cli(warm_python, *run_args(dirs, "--prompt", "w5 w6", "--json"), stdout=full,
                               stderr=subprocess.PIPE, text=True)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    line = one_sentence(err)
    assert "cannot write to standard output: No space left on device; the run is saved in" in line
    assert read_trace(Path(line.rsplit(" saved in ", 1)[1])).records


def _long_model_dir(root: Path) -> Path:
    """A tiny target whose context window is far away, so a run lasts until it is stopped."""
    path = root / "long_target"
    if not path.exists():
        model = tiny_model(7, vocab_size=64, logit_scale=3.0)
        model.config.max_position_embeddings = 1 << 20
        tokenizer = word_tokenizer()
        tokenizer.eos_token = None  # no end of text: only a signal (or 100,000 tokens) ends the run
        save_model_dir(path, model, tokenizer)
    return path


def wait_for_rows(proc: WarmRun, data_dir: Path, rows: int = 3, timeout: float = 120.0) -> Path:
    """The autosaved session folder once its event log holds ``rows`` iterations (polling the file the run
    writes); the run is killed if that never happens, so no process outlives the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be stopped"
        for log in (data_dir / "sessions").glob("*/trace.events.jsonl"):
            if log.read_bytes().count(b'"type":"iteration"') >= rows:
                return log.parent
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("no autosaved iterations appeared")


@pytest.mark.parametrize(("sig", "reason", "code"), [(signal.SIGTERM, "terminated", 143),
                                                     (signal.SIGINT, "interrupted", 130)])
def test_signal_keeps_the_trace_and_labels_it(dirs, warm_python, tmp_path, sig, reason, code) -> None:
    target = _long_model_dir(dirs["root"])
    data = tmp_path / "data"
    out_trace = tmp_path / "run.csv"
    env_argv = ["run", "--target", str(target), "--drafter", "lookup", "--no-chat-template", "--prompt",
                "w5 w6 w7 w5 w6", "--max-new-tokens", "100000", "--trace", str(out_trace)]
    proc = _subprocess_cli(warm_python, *env_argv, data_dir=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    folder = wait_for_rows(proc, data)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    line = one_sentence(err)
    assert f"stopped by {signal.Signals(sig).name} after" in line and str(folder) in line
    assert f"finish: {reason}" in out
    with out_trace.open(newline="", encoding="utf-8") as f:
        last = list(csv.DictReader(f))[-1]
    assert last["finished"] == "false" and last["finish_reason"] == reason
    meta = json.loads((folder / "trace.session.json").read_text(encoding="utf-8"))
    assert meta["recording"]["state"] == "closed" and meta["recording"]["reason"] == reason
    assert not (folder / "RUNNING").exists()
    assert len(read_trace(folder).records) == len(read_trace(out_trace).records)


def test_first_signal_stops_at_the_boundary_and_a_second_one_at_once(capfd) -> None:
    controls = Controls()
    before = signal.getsignal(signal.SIGINT)  # default, or ignored when the suite runs in the background
    with SignalGuard(controls).installed() as guard:
        signal.raise_signal(signal.SIGINT)  # the handler runs here, on this thread, and must not raise
        assert controls.stop_requested and controls.checkpoint() is None
        assert guard.pending is not None and guard.pending.reason == "interrupted"
        said = capfd.readouterr().err  # said at once, so a user knows the key press was heard
        assert "SIGINT received: stopping when the iteration under way ends (press Ctrl-C again" in said
        with pytest.raises(Interrupted) as second:
            signal.raise_signal(signal.SIGTERM)
        assert second.value.reason == "terminated" and not guard.raising
        signal.raise_signal(signal.SIGINT)  # while the results are written: only noted
        assert guard.late is not None and guard.late.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # restored


class _SignalledWhileFinalized:
    """An object whose finalizer runs when a signal comes, like httpcore's stream generator being closed."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_a_second_signal_landing_in_a_finalizer_is_not_a_traceback_and_the_next_one_raises(capfd) -> None:
    """A raise inside a finalizer cannot propagate: Python printed "Exception ignored" and a traceback (seen in
    attach, a second Ctrl-C landing in an HTTP stream's close). It says nothing, and the next signal raises."""
    controls = Controls()
    with SignalGuard(controls).installed() as guard:
        signal.raise_signal(signal.SIGINT)  # the first: stop at the boundary
        capfd.readouterr()
        finalized = _SignalledWhileFinalized()
        del finalized  # the second lands in __del__, where nothing can propagate
        err = capfd.readouterr().err
        assert "Exception ignored" not in err and "Traceback" not in err, err
        assert guard.raising  # that raise cut nothing: the next signal raises again
        with pytest.raises(Interrupted):
            signal.raise_signal(signal.SIGINT)


def test_without_controls_the_first_signal_raises() -> None:
    with SignalGuard().installed(), pytest.raises(Interrupted):
        signal.raise_signal(signal.SIGTERM)


# --- verify and bench ------------------------------------------------------------------------------------

BAD_VERIFY = [
    (["--k", "1000"], "--k takes draft lengths from 1 to 16, got '1000'"),
    (["--max-new-tokens", "0"], "argument --max-new-tokens: must be from 1 to 131,072, got 0"),
    (["--top-p", "2"], "argument --top-p: must be a finite number from 1e-09 to 1"),
    (["--json", "/nonexistent/x.json"], "--json /nonexistent/x.json cannot be written (No such file or directory)"),
]


@pytest.mark.parametrize(("argv", "sentence"), BAD_VERIFY)
def test_bad_verify_input_is_one_sentence_and_exit_2(dirs, capsys, argv, sentence) -> None:
    rc, out, err = cli(capsys, "verify", "--target", str(dirs["target"]), "--drafter", "lookup",
                       "--prompts", "prose", "--limit", "1", *argv)
    assert rc == 2 and out == ""
    assert sentence in one_sentence(err)


def test_bench_prompts_of_the_wrong_shape_name_the_file_and_the_shape(dirs, capsys, tmp_path) -> None:
    bad = tmp_path / "prompts.json"
    bad.write_text(json.dumps([{"id": "a", "text": "w5"}]))
    rc, _, err = cli(capsys, "bench", "--target", str(dirs["target"]), "--drafter", "lookup", "--prompts", str(bad))
    assert rc == 2
    line = one_sentence(err)
    assert f"prompt file {bad}: expected a JSON object shaped" in line and '"prompts": [{"id"' in line
    assert "not a list" in line


def test_bench_prompts_not_utf8_name_the_file(dirs, capsys, tmp_path) -> None:
    bad = tmp_path / "pbad.bin"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    rc, _, err = cli(capsys, "bench", "--target", str(dirs["target"]), "--drafter", "lookup", "--prompts", str(bad))
    assert rc == 2 and f"prompt file {bad} is not UTF-8 text" in one_sentence(err)


def test_bench_out_under_a_file_is_refused_before_the_bench(dirs, capsys, tmp_path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    rc, out, err = cli(capsys, "bench", "--target", str(dirs["target"]), "--drafter", "lookup",
                       "--prompts", "prose", "--limit", "1", "--out", str(blocker / "report"))
    assert rc == 2 and out == ""
    assert f"--out {blocker / 'report'}: cannot make the folder {blocker}" in one_sentence(err)


def test_bench_late_write_failure_keeps_the_results(dirs, capsys, tmp_path, monkeypatch) -> None:
    from specscope.core.commands import bench

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bench, "write_report_files", full)
    rc, out, err = cli(capsys, "bench", "--target", str(dirs["target"]), "--drafter", "lookup", "--prompts",
                       "prose", "--limit", "1", "--rounds", "1", "--max-new-tokens", "4", "--no-transformers",
                       "--k", "2", "--no-adaptive", "--out", str(tmp_path / "r"))
    assert rc == 1
    assert "| plain" in out or "plain" in out  # the results reached stdout first
    assert "could not write" in one_sentence(err) and "No space left on device" in err


# --- models that must not load ----------------------------------------------------------------------------


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_malicious_pickle_is_refused_in_our_words(dirs, capsys, tmp_path) -> None:
    model_dir = save_model_dir(tmp_path / "evil", tiny_model(3), word_tokenizer())
    (model_dir / "model.safetensors").unlink()
    with open(model_dir / "pytorch_model.bin", "wb") as f:
        torch.save({"model.embed_tokens.weight": _Payload()}, f, pickle_module=pickle)
    rc, _, err = cli(capsys, *["run", "--target", str(model_dir), "--drafter", "lookup", "--prompt", "w5",
                               "--allow-pickle", "--quiet", "--no-chat-template"])
    assert rc == 2
    line = one_sentence(err)
    assert line.startswith(f"specscope: error: refused to load the target from {model_dir}: its pickle weights")
    detail = err.splitlines()[err.splitlines().index(line) + 1]
    assert detail.startswith("  detail: ") and "system" in detail
    assert "weights_only=False" not in err


def test_unknown_architecture_is_our_sentence_with_the_detail_below(dirs, capsys, tmp_path) -> None:
    model_dir = save_model_dir(tmp_path / "alien", tiny_model(3), word_tokenizer())
    config = json.loads((model_dir / "config.json").read_text())
    config["model_type"] = "alien-arch"
    (model_dir / "config.json").write_text(json.dumps(config))
    rc, _, err = cli(capsys, "run", "--target", str(model_dir), "--drafter", "lookup", "--prompt", "w5", "--quiet")
    assert rc == 2
    line = one_sentence(err)
    assert line == (f"specscope: error: transformers does not know the architecture named in "
                    f"{model_dir / 'config.json'}; specscope needs a causal language model that transformers "
                    "can load")
    assert "alien-arch" in err.splitlines()[err.splitlines().index(line) + 1]


def test_a_config_field_of_the_wrong_type_is_named_before_loading(dirs, capsys, tmp_path, monkeypatch) -> None:
    from specscope.core.engine import model_files
    from specscope.core.engine.pair_spec import ModelLoadError

    model_dir = save_model_dir(tmp_path / "oops", tiny_model(3), word_tokenizer())
    config = json.loads((model_dir / "config.json").read_text())
    config["hidden_size"] = "oops"
    (model_dir / "config.json").write_text(json.dumps(config))
    said = f'{model_dir / "config.json"}: "hidden_size" is "oops", not a whole number'
    for role in ("--target", "--draft"):
        argv = ["--target", str(dirs["target"]), "--draft", str(model_dir)] if role == "--draft" else \
            ["--target", str(model_dir), "--drafter", "lookup"]
        rc, _, err = cli(capsys, "run", *argv, "--prompt", "w5", "--quiet", "--no-chat-template")
        assert rc == 2 and one_sentence(err) == f"specscope: error: {said}", role
    # the loader says the same of a folder it reaches another way (a hub snapshot), before transformers reads it
    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", lambda *a, **k: pytest.fail("read anyway"))
    with pytest.raises(ModelLoadError, match="^" + re.escape(said) + "$"):
        model_files.read_config(model_dir, trust_remote_code=False)


def test_a_cli_run_freezes_what_is_loaded_only_while_it_runs(dirs, capsys, monkeypatch) -> None:
    """Full collections stay out of timed steps (core/gc_freeze.py), and the process gets its objects back."""
    import gc

    from specscope.core import session as session_module

    seen: list[int] = []
    stream = session_module.Session.stream

    def watching(self, prompt_ids):  # the loop runs with the loaded objects frozen
        seen.append(gc.get_freeze_count())
        yield from stream(self, prompt_ids)

    monkeypatch.setattr(session_module.Session, "stream", watching)
    rc, _, _ = cli(capsys, *run_args(dirs, "--prompt", "w5 w6", "--max-new-tokens", "4"))
    assert rc == 0
    assert seen and seen[0] > 10_000  # torch and the pair, not a handful
    assert gc.get_freeze_count() == 0


def test_autosave_stopped_by_a_full_disk_is_said_at_once_and_in_json(dirs, monkeypatch, capsys) -> None:
    """Issue 31 item 2: the run went on and exited 0 while its crash-safety net had silently stopped."""
    from specscope.core.trace import autosave

    from .faults import full_disk

    real = autosave.SessionRecorder

    def small_flushes(*a, **kw):  # flush every event, so the budget runs out during the run, not at its end
        return real(*a, **{**kw, "flush_interval_s": 0.0})

    monkeypatch.setattr(autosave, "SessionRecorder", small_flushes)
    # the session file fits (about 12 kB); the event log (about 20 kB over this 12-iteration run) soon does not
    full_disk(monkeypatch, free=24_000)
    rc = main(["run", "--target", str(dirs["target"]), "--drafter", "lookup", "--prompt", "w5 w6",
               "--no-chat-template", "--max-new-tokens", "80", "--json"])
    captured = capsys.readouterr()
    assert rc == 0  # the decoding itself was fine
    said = [line for line in captured.err.splitlines() if "crash-safety net is off" in line]
    assert len(said) == 1 and "No space left on device" in said[0]
    js = json.loads(captured.out)
    assert js["autosave_error"] and "No space left on device" in js["autosave_error"]
    assert js["finish_reason"] in ("eos", "max_new_tokens") and js["error"] is None
