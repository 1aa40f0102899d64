"""The window's sources (app/run_sources.py): each kind answers for itself, so neither the run controller nor the
window asks which kind it holds, and the window's parts are handed what they drive instead of importing it."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("PySide6")

from specscope.app.attach_source import AttachRunner
from specscope.app.run_sources import AttachRun, LocalWorker, RemoteWorker
from specscope.app.worker import RecordBuffer, RunRequest
from specscope.app.worker_link import WorkerLink
from specscope.core.attach.options import AttachOptions
from specscope.core.controls import Controls
from specscope.core.records import ControlValues
from specscope.core.remote.url import parse_worker_url

APP = Path(__file__).resolve().parents[1] / "app"
WINDOW_PARTS = ("run_views.py", "settings_keeper.py", "trace_files.py", "window_menus.py", "arrangement.py")

# A branch on which kind of source is held: the link's (or a source's) kind, or a kind compared with a kind's name.
# (A recorded run's ``RunStarted.source`` is data on screen, not the source held: the title reads it.)
KIND_BRANCH = re.compile(r"\b(link|source)\.kind\b|\bkind\s*[=!]=\s*[\"'](local|remote|attach|replay)[\"']"
                         r"|\b(LOCAL|REMOTE)\b")


def test_no_module_of_the_app_branches_on_the_kind_of_source():
    found = [f"{path.name}:{n}: {line.strip()}" for path in sorted(APP.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if KIND_BRANCH.search(line)]
    assert found == []


def test_the_scan_finds_a_kind_branch_where_there_is_one():
    assert KIND_BRANCH.search('        if self.link.kind == REMOTE and self.has_pair:')
    assert KIND_BRANCH.search('again = "Reconnect" if c.kind == "remote" else "Restart"')
    assert not KIND_BRANCH.search('if band.kind == "paging":')
    assert not KIND_BRANCH.search('elif shown is not None and shown.source == "attach":')


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, those under ``if TYPE_CHECKING:`` included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("part", WINDOW_PARTS)
def test_a_window_part_does_not_import_the_window(part):
    assert "specscope.app.window" not in imported_modules(APP / part)


def remote_link(drafter: str = "model") -> WorkerLink:
    """A link as a File ▸ Connect leaves it once the worker's welcome arrived (no connection is needed to read it)."""
    link = WorkerLink()
    link.address = parse_worker_url("specscope://gpu-box:7001/?token=s3cret")
    link.info = {"device": "cuda:0", "pair": {"description": "Qwen 7B + 0.5B", "drafter": drafter}}
    return link


def test_a_remote_worker_keeps_its_own_drafter_and_says_how_to_switch_it_there():
    source = RemoteWorker(remote_link("model"))
    assert source.drafter_started("lookup") == "model"  # Start runs what the worker loaded, not the window's box
    # a drafter that needs weights of its own: one sentence naming the worker and how to get it there
    refusal = source.drafter_switch_refusal("eagle", "model")
    assert refusal is not None and "gpu-box:7001" in refusal and "specscope serve --drafter eagle" in refusal
    assert source.drafter_switch_refusal("lookup", "model") is None  # swapped on that worker, target kept
    assert source.description == "Qwen 7B + 0.5B (worker at gpu-box:7001)"
    assert source.device == "cuda:0" and source.pair is None and source.on_worker
    assert source.failure_is_connection and source.restart_label == "Reconnect"
    assert source.process_gone() is None  # not this app's process


def test_a_remote_runs_sidecar_names_the_worker_without_its_token():
    meta: dict = {}
    RemoteWorker(remote_link()).add_run_meta(meta)
    assert meta["worker"] == "specscope://gpu-box:7001/" and "s3cret" not in str(meta)
    assert meta["pair"]["drafter"] == "model"


def test_this_apps_worker_loads_the_windows_drafter_and_is_restarted_not_reconnected():
    link = remote_link("model")  # the same welcome, from the worker this app spawned
    source = LocalWorker(link)
    assert source.drafter_started("lookup") == "lookup"
    assert source.drafter_switch_refusal("lookup", "model") is None  # a reload switches it
    assert source.description == "Qwen 7B + 0.5B"  # no "(worker at …)": it is this machine's
    assert not source.failure_is_connection and source.restart_label == "Restart the worker"
    assert source.process_gone() is None  # nothing spawned yet


def test_a_worker_whose_connection_is_gone_starts_no_run():
    source = LocalWorker(WorkerLink())
    assert source.start_run(RunRequest(prompt="hi"), ControlValues(), RecordBuffer(), None,
                            lambda how, text: None, lambda text: None) is None


def test_an_attached_request_is_cancelled_but_never_paused_or_steered(tmp_path):
    runner = AttachRunner(AttachOptions(url="http://127.0.0.1:9/v1", prompt="hi"), RecordBuffer(), tmp_path)
    run = AttachRun(runner)
    assert not run.pause(True) and not run.pause(False)
    assert isinstance(run.controls, Controls)
    run.controls.request_baseline()  # asked for during an attach: goes to idle controls, not to a worker
    assert not runner.cancel.is_set()
    run.stop(paused=False)
    assert runner.cancel.is_set() and not run.reads_worker and run.failure() == ""

