"""Attach in the window (issue 24): the attached run goes through the run controller like a local one — Start is
disabled while it streams, the run panel and title name the engine, and the run is autosaved as an event log
that replays. The server is a small fake of llama.cpp's OpenAI-compatible streaming API on 127.0.0.1 (the real
one is tests/test_attach_llama_server.py's, which needs a built llama-server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("pytestqt")

from specscope.core.attach.options import AttachOptions

from .app_helpers import load_tiny, make_window, qt_binding_broken
from .fake_engine import LLAMACPP_METRICS

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]

# (tokens so far, drafted so far, accepted so far) per streamed token, as llama.cpp's timings_per_token
# reports them: a prompt pass (1 token), then passes alternating drafted 4 / accepted 2 (3 tokens) and
# drafted 4 / accepted 4 (5 tokens).
def _counters(passes: int) -> list[tuple[int, int, int]]:
    out = [(1, 0, 0)]
    n = drafted = accepted = 0
    n = 1
    for i in range(passes):
        take = 2 if i % 2 == 0 else 4
        drafted += 4
        accepted += take
        for _ in range(take + 1):
            n += 1
            out.append((n, drafted, accepted))
    return out


class FakeLlamaServer:
    """/v1/models, /props (so the client takes it for llama.cpp) and a streaming /v1/completions that holds
    after ``hold_after`` chunks until ``release`` is set."""

    def __init__(self, passes: int = 12, hold_after: int = 8) -> None:
        self.counters = _counters(passes)
        self.hold_after = hold_after
        self.release = threading.Event()
        self.finished = threading.Event()  # the completion streamed its last token
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _json(self, obj: Any, status: int = 200) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json({"object": "list", "data": [{"id": "fake-model"}]})
                elif self.path == "/props":
                    self._json({"build_info": "fake-llama", "default_generation_settings": {"params": {}}})
                elif self.path == "/metrics":  # started with --metrics: the counters as the request left them
                    _, drafted, accepted = server.counters[-1] if server.finished.is_set() else (0, 0, 0)
                    drafts = drafted // 4
                    body = LLAMACPP_METRICS.format(drafted=drafted, accepted=accepted, drafts=drafts).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self._json({"error": "not found"}, 404)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.requests.append(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i, (n, drafted, accepted) in enumerate(server.counters):
                    if i == server.hold_after and not server.release.wait(60):
                        return
                    last = i == len(server.counters) - 1
                    timings: dict[str, Any] = {"predicted_n": n, "predicted_ms": 10.0 * n}
                    if drafted:
                        timings.update(draft_n=drafted, draft_n_accepted=accepted)
                    chunk = {"choices": [{"text": f" w{i}", "finish_reason": "length" if last else None}],
                             "timings": timings}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                server.finished.set()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server() -> Iterator[FakeLlamaServer]:
    server = FakeLlamaServer()
    yield server
    server.close()


def test_an_attached_run_disables_start_and_is_autosaved(qtbot, tmp_path, fake_server):
    from specscope.app.attach_dialog import start_attach
    from specscope.core.events import RunFinished, RunStarted
    from specscope.core.trace.autosave import RUNNING_MARKER
    from specscope.core.trace.files import read_trace

    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")  # a local pair is loaded: Start would be live but for the attached run
    assert w.menus.start_action.isEnabled()
    runner = start_attach(w, AttachOptions(url=fake_server.url, prompt="Tell me about ferries", max_tokens=64))
    assert runner is not None
    qtbot.waitUntil(lambda: len(w.data.records) >= 2, timeout=60_000)  # the server holds the rest back
    # one run owner: the attached run is the controller's running run
    assert w.state == "running" and not w.controller.can_start
    assert not w.menus.start_action.isEnabled() and not w.panel.start_button.isEnabled()
    assert not w.start_run()
    assert "attached to" in w.windowTitle() and "127.0.0.1" in w.run_panel.pair.text()
    assert "tiny perfect pair" not in w.run_panel.pair.text()
    folders = list((w.data_dir / "sessions").iterdir())
    assert len(folders) == 1 and (folders[0] / RUNNING_MARKER).exists()  # autosave is recording
    fake_server.release.set()
    qtbot.waitUntil(lambda: getattr(w, "attach_result", None) is not None, timeout=60_000)
    result = w.attach_result
    assert result.error is None, result.error
    assert len(w.data.records) == len(result.records) > 4
    assert w.state == "finished" and w.menus.start_action.isEnabled()
    assert "attached: finished" in w.run_panel.state.text()
    # the autosaved session: the whole stream, closed, and it replays
    folder = folders[0]
    qtbot.waitUntil(lambda: not (folder / RUNNING_MARKER).exists(), timeout=10_000)
    loaded = read_trace(folder)
    assert [r.n_accepted for r in loaded.records] == [r.n_accepted for r in result.records]
    assert isinstance(loaded.events[0], RunStarted) and loaded.events[0].source == "attach"
    assert isinstance(loaded.events[-1], RunFinished) and loaded.events[-1].reason == "max_new_tokens"
    assert loaded.events[0].prompt == "Tell me about ferries"
    live = w.data.estimate
    with qtbot.waitSignal(w.trace_opened, timeout=10_000):
        assert w.files.open_trace(folder)
    assert w.state == "replay" and len(w.data.records) == len(result.records)
    assert w.data.estimate is not None and live is not None
    assert w.data.estimate.alpha_text() == live.alpha_text()
    assert "attached to" in w.run_panel.pair.text() and w.panel.prompt_text() == "Tell me about ferries"


def test_the_window_says_which_attached_figures_are_estimates(qtbot, tmp_path):
    """A vLLM that merges steps into chunks: the window drew the passes as streamed, so the attach source says in
    one line which figures hold (the counters') and why (issue 38)."""
    from specscope.app.attach_source import AttachRunner
    from specscope.app.worker import RecordBuffer
    from tests.fake_serving import Engine, FakeVllm, steps_of

    steps = steps_of([(3, 3), (3, 1), (3, 0), (3, 2), (3, 3), (3, 0)])
    with FakeVllm(Engine(k=3, steps=steps, merge=[1, 3, 3])) as server:
        runner = AttachRunner(AttachOptions(url=server.url, prompt="Count", max_tokens=64, scrape_interval_s=0.05),
                              RecordBuffer(), tmp_path / "sessions")
        notices: list[str] = []
        runner.notice.connect(notices.append)
        with qtbot.waitSignal(runner.finished, timeout=60_000) as done:
            runner.start()
    assert done.args == [""]
    line = next(n for n in notices if "the passes shown are as streamed" in n)
    accepted, judged = 9, 9 + 6 - 2  # 6 steps, 2 accepting all 3
    assert f"α {accepted / judged:.3f} (specscope's)" in line and "from the engine's counters" in line
    assert "merged engine steps into one chunk" in line and "\n" not in line
