"""Output paths that are not regular files (issue 31, item 1): a device, a named pipe, a socket or a folder given
to ``--trace``, ``--chrome-trace``, ``verify --json``, ``bench --out`` or ``attach --trace`` is refused in one
sentence before anything is decoded, and the final atomic write never renames over one."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from specscope.core.trace.chrome_trace import write_chrome_trace
from specscope.core.trace.errors import TraceWriteError
from specscope.core.trace.files import write_trace
from specscope.core.trace.layout import trace_paths
from tests.cli_helpers import char_device, cli, fifo, is_char_device, one_sentence, sessions
from tests.fake_engine import FakeEngine
from tests.faults import leftovers
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.trace_samples import sample_records


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("paths")
    return save_model_dir(root / "target", tiny_model(5, vocab_size=64, logit_scale=3.0), word_tokenizer())


def run_args(target: Path, *extra: str) -> list[str]:
    return ["run", "--target", str(target), "--drafter", "lookup", "--no-chat-template", "--quiet",
            "--max-new-tokens", "8", "--prompt", "w5 w6", *extra]


def unix_socket(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


@pytest.mark.parametrize("flag", ["--trace", "--chrome-trace"])
def test_run_refuses_a_character_device_and_leaves_it_one(target, capsys, tmp_path, flag) -> None:
    device = char_device(tmp_path / "null-copy")
    before = sessions()
    rc, out, err = cli(capsys, *run_args(target, flag, str(device)))
    assert rc == 2 and out == ""
    assert one_sentence(err) == (f"specscope: error: {flag} {device} is a character device, not a regular file: "
                                 "choose a file path (it was left as it is)")
    assert is_char_device(device) and sessions() == before  # nothing decoded, nothing autosaved


def test_run_refuses_a_copy_of_dev_full(target, capsys, tmp_path) -> None:
    """/dev/full-like devices are character devices too: refused by the same rule, before any disk-full."""
    device = char_device(tmp_path / "full-copy", 1, 7)
    rc, _, err = cli(capsys, *run_args(target, "--trace", str(device)))
    assert rc == 2 and "is a character device, not a regular file" in one_sentence(err)
    assert is_char_device(device)


def test_run_refuses_a_named_pipe(target, capsys, tmp_path) -> None:
    pipe = fifo(tmp_path / "pipe.csv")
    rc, _, err = cli(capsys, *run_args(target, "--trace", str(pipe)))
    assert rc == 2 and f"--trace {pipe} is a named pipe, not a regular file" in one_sentence(err)
    assert stat.S_ISFIFO(pipe.stat().st_mode)


def test_run_refuses_a_socket(target, capsys, tmp_path) -> None:
    with unix_socket(tmp_path / "s.json") as _:
        rc, _, err = cli(capsys, *run_args(target, "--chrome-trace", str(tmp_path / "s.json")))
    assert rc == 2 and "is a socket, not a regular file" in one_sentence(err)


def test_run_refuses_a_trace_whose_sibling_file_is_a_device(target, capsys, tmp_path) -> None:
    """A trace is four files: a device at x.tokens.csv would be replaced by the tokens file."""
    device = char_device(tmp_path / "run.tokens.csv")
    rc, _, err = cli(capsys, *run_args(target, "--trace", str(tmp_path / "run.csv")))
    assert rc == 2
    assert one_sentence(err) == (f"specscope: error: {device}, a file of the --trace {tmp_path / 'run.csv'} trace, "
                                 "is a character device, not a regular file: choose a file path (it was left as "
                                 "it is)")
    assert is_char_device(device) and not (tmp_path / "run.csv").exists()


@pytest.mark.parametrize("flag", ["--trace", "--chrome-trace"])
def test_run_refuses_an_empty_output_path(target, capsys, flag) -> None:
    rc, _, err = cli(capsys, *run_args(target, flag, ""))
    assert rc == 2 and f"argument {flag}: needs a file path, got an empty one" in one_sentence(err)


def test_verify_json_refuses_a_device_before_loading(target, capsys, tmp_path) -> None:
    device = char_device(tmp_path / "report.json")
    rc, out, err = cli(capsys, "verify", "--target", str(target), "--drafter", "lookup", "--prompts", "prose",
                       "--limit", "1", "--json", str(device))
    assert rc == 2 and out == "" and "[" not in err  # no progress line: nothing was loaded
    assert f"--json {device} is a character device, not a regular file" in one_sentence(err)
    assert is_char_device(device)


def test_bench_out_refuses_a_device_at_the_report_path(target, capsys, tmp_path) -> None:
    device = char_device(tmp_path / "report.md")
    rc, out, err = cli(capsys, "bench", "--target", str(target), "--drafter", "lookup", "--prompts", "prose",
                       "--limit", "1", "--out", str(tmp_path / "report"))
    assert rc == 2 and out == ""
    assert f"--out {device} is a character device, not a regular file" in one_sentence(err)
    assert is_char_device(device) and leftovers(tmp_path) == []


@pytest.mark.parametrize(("stem", "sentence"), [
    ("", "argument --out: needs a path stem such as bench-out/report, got an empty one"),
    ("/", "argument --out: '/' names a folder: give a path stem such as /report"),
    (".", "argument --out: '.' names a folder: give a path stem such as report"),
    ("out/", "argument --out: 'out/' names a folder: give a path stem such as out/report"),
])
def test_bench_out_that_names_no_file_is_one_sentence(target, capsys, stem, sentence) -> None:
    rc, _, err = cli(capsys, "bench", "--target", str(target), "--out", stem)
    assert rc == 2 and sentence in one_sentence(err)


def test_attach_trace_is_checked_before_the_request(capsys, tmp_path) -> None:
    device = char_device(tmp_path / "attached.csv")
    with FakeEngine() as engine:
        rc, out, err = cli(capsys, "attach", engine.url, "--prompt", "hi", "--trace", str(device))
        assert engine.script.requests == []  # refused before streaming, not after
    assert rc == 2 and out == ""
    assert f"--trace {device} is a character device, not a regular file" in one_sentence(err)
    assert is_char_device(device)


def test_attach_trace_under_a_missing_folder_is_checked_before_the_request(capsys, tmp_path) -> None:
    with FakeEngine() as engine:
        rc, _, err = cli(capsys, "attach", engine.url, "--prompt", "hi", "--trace", "/proc/x/y.csv")
        assert engine.script.requests == []
    assert rc == 2 and "--trace /proc/x/y.csv cannot be written (No such file or directory)" in one_sentence(err)


# --- the atomic write itself (core/trace/files.py's atomic_text_files) -----------------------------------------


def test_write_trace_never_renames_over_a_device(tmp_path) -> None:
    """The check before decoding can be raced (the device appears later, or the app exports to one): the final
    rename refuses too, and renames none of the files."""
    device = char_device(tmp_path / "run.tokens.csv")
    with pytest.raises(TraceWriteError, match="is a character device, not a regular file; it was left as it is"):
        write_trace(tmp_path / "run.csv", sample_records())
    assert is_char_device(device)
    assert not any(p.exists() for p in trace_paths(tmp_path / "run.csv").all() if p != device)
    assert leftovers(tmp_path) == []


def test_chrome_trace_never_renames_over_a_named_pipe(tmp_path) -> None:
    pipe = fifo(tmp_path / "run.json")
    with pytest.raises(TraceWriteError, match="is a named pipe"):
        write_chrome_trace(pipe, sample_records())
    assert stat.S_ISFIFO(pipe.stat().st_mode) and leftovers(tmp_path) == []


def test_write_trace_over_a_link_to_a_device_leaves_both(tmp_path) -> None:
    device = char_device(tmp_path / "dev")
    (tmp_path / "run.csv").symlink_to(device)
    with pytest.raises(TraceWriteError, match="character device"):
        write_trace(tmp_path / "run.csv", sample_records())
    assert (tmp_path / "run.csv").is_symlink() and is_char_device(device)
