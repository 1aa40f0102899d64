"""The command line starts light (issue 38, item 6): every command's ``--help``, ``specscope attach`` itself and
reading a trace import neither torch nor transformers, so a laptop without them can attach to a GPU server and
``--help`` answers at once. Each case runs in a fresh interpreter and reads its ``sys.modules`` at the end;
the parser's modules are not imported by the test process first, so nothing is inherited."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specscope.core.commands.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers")


def _loaded_after(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; the heavy modules it left loaded, and what it printed last."""
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import json, sys
        print(json.dumps({{"heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", [*_commands(), None])
def test_help_of_every_command_imports_no_torch(command: str | None) -> None:
    argv = [command, "--help"] if command else ["--help"]
    loaded = _loaded_after(f"""
        import contextlib, io
        from specscope.core.commands.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
            main({argv!r})
        assert "usage:" in out.getvalue(), out.getvalue()
    """)
    assert loaded["heavy"] == []


def test_attach_to_a_server_imports_no_torch() -> None:
    """A whole ``specscope attach`` against the fake llama.cpp server, then writing and reading its trace."""
    loaded = _loaded_after("""
        import contextlib, io, tempfile
        from pathlib import Path
        from specscope.core.commands.cli import main
        from specscope.core.trace.files import read_trace
        from tests.fake_engine import FakeEngine
        with FakeEngine() as engine, tempfile.TemporaryDirectory() as tmp:
            trace = str(Path(tmp) / "a.csv")
            with contextlib.redirect_stdout(io.StringIO()) as out:
                rc = main(["attach", engine.url, "--prompt", "hi", "--max-tokens", "8", "--trace", trace])
            assert rc == 0 and "drafted" in out.getvalue(), out.getvalue()
            assert read_trace(Path(trace)).records
    """)
    assert loaded["heavy"] == []


def test_reading_a_trace_imports_no_torch() -> None:
    loaded = _loaded_after("""
        from pathlib import Path
        from specscope.core.trace.files import read_trace
        assert read_trace(Path("tests/data/trace-0.1.0/export/run.csv")).records
    """)
    assert loaded["heavy"] == []


def test_a_command_that_decodes_here_imports_the_engine_while_signals_are_still_quiet() -> None:
    """run/bench/verify/serve load torch and transformers before ``starting_done``: a Ctrl-C during those
    seconds stays one line (tests/test_cli_interrupt.py), as when the parser imported them; ``run --remote``,
    which decodes on a worker, loads none of it, and neither does a run its options already refuse (no draft
    for the model drafter: answered before the imports)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import contextlib, io, sys
        import specscope.core.commands.cli as cli
        seen = []
        real = cli.starting_done
        def spy():
            seen.append("torch" in sys.modules and "transformers" in sys.modules)
            real()
        cli.starting_done = spy
        with contextlib.redirect_stderr(io.StringIO()):
            cli.main(["run", "--target", "/nonexistent/model", "--prompt", "hi"])
            cli.main(["run", "--remote", "specscope://127.0.0.1:9/?token=x", "--prompt", "hi"])
            cli.main(["run", "--target", "no-such-org/no-such-model", "--drafter", "lookup", "--prompt", "hi"])
        print(seen)
    """)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    # a run refused for its options loads no torch; nor does run --remote (it decodes on the worker); a local
    # run that passes the checks (a hub id, looked up once the engine is loaded) has it before the start ends
    assert done.stdout.strip().splitlines()[-1] == "[False, False, True]"


def test_options_a_run_or_a_worker_refuses_are_answered_before_torch_loads(tmp_path: Path) -> None:
    """A typo costs a second, not the engine's imports (issue 39): a run without a prompt, the model drafter
    without --draft (run and serve), a model path with nothing there or a file, a target whose config.json is
    broken, an unwritable --trace and a worker's --exit-with-parent without a pipe on its stdin are each one
    sentence and exit 2 with neither torch nor transformers loaded; so are bench's and verify's pair options. A
    missing target is said before what the drafter needs."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": "big"}')
    sound = tmp_path / "sound"
    sound.mkdir()
    (sound / "config.json").write_text('{"model_type": "llama", "hidden_size": 32}')
    cases = [
        (["run", "--target", "/nonexistent/model"], "give a prompt with --prompt TEXT or --prompt-file FILE"),
        # the target's absence is said before what the drafter needs
        (["run", "--target", "/nonexistent/model", "--prompt", "hi"], "no model directory at /nonexistent/model"),
        (["serve", "--target", str(sound)],
         "the model drafter needs --draft (or choose --drafter lookup, suffix, early-exit or mtp)"),
        (["run", "--target", "/nonexistent/model", "--drafter", "lookup", "--prompt", "hi"],
         "no model directory at /nonexistent/model"),
        (["serve", "--target", "no-such-org/x", "--draft", str(model / "config.json")], "is a file, not a model"),
        (["run", "--target", str(model), "--drafter", "lookup", "--prompt", "hi"], '"hidden_size" is'),
        (["run", "--demo", "--prompt", "hi", "--trace", str(tmp_path)], "--trace"),
        (["serve", "--demo", "--exit-with-parent"], "--exit-with-parent needs standard input to be a pipe"),
        # bench and verify: the pair's options in the loader's words, before the engine too
        (["bench", "--target", "/nonexistent/model"], "no model directory at /nonexistent/model"),
        (["bench", "--demo", "--draft", str(sound)], "does not apply to the demo"),
        (["verify", "--demo", "--drafter", "mtp"], "has no multi-token-prediction layers"),
        (["verify", "--target", str(sound), "--drafter", "eagle", "--draft", "/nonexistent/head"],
         "the EAGLE-3 head directory /nonexistent/head does not exist"),
    ]
    loaded = _loaded_after(f"""
        import contextlib, io
        from specscope.core.commands.cli import main
        for argv, said in {cases!r}:
            with contextlib.redirect_stderr(io.StringIO()) as err:
                rc = main(argv)
            lines = err.getvalue().splitlines()
            assert rc == 2 and len(lines) == 1 and lines[0].startswith("specscope: error: "), (argv, lines)
            assert said in lines[0], (argv, lines)
    """)
    assert loaded["heavy"] == []
