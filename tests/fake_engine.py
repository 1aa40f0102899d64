"""A scripted OpenAI-compatible server on 127.0.0.1 (or ::1), shaped like llama.cpp's: ``/v1/models``,
``/props``, ``/metrics`` and a streamed ``/v1/completions`` whose chunks the test writes.

For the faults a real engine cannot be made to produce on demand: a stream cut before ``[DONE]``, valid JSON
of the wrong shape, NaN counters. A real llama.cpp server is in test_attach_llama_server.py.
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LLAMACPP_METRICS = """# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {drafted}
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total {accepted}
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {drafts}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
"""


def llama_chunk(text: Any, n: Any, drafted: Any = 0, accepted: Any = 0, finish: str | None = None) -> str:
    """One chunk as llama.cpp's server streams it with ``timings_per_token`` (values as given, hostile or not)."""
    timings: dict[str, Any] = {"predicted_n": n, "predicted_ms": 1.0}
    if drafted:
        timings.update(draft_n=drafted, draft_n_accepted=accepted)
    return json.dumps({"choices": [{"text": text, "finish_reason": finish}], "timings": timings})


def good_stream(n: int = 6) -> list[str]:
    """A prompt pass, then passes drafting 2 and accepting 1 (2 tokens each), and a finish chunk."""
    chunks = [llama_chunk("a", 1)]
    total, drafted, accepted = 1, 0, 0
    while total < n:
        drafted, accepted = drafted + 2, accepted + 1
        for _ in range(2):
            total += 1
            chunks.append(llama_chunk(f"t{total}", total, drafted, accepted))
    chunks.append(llama_chunk("", total, drafted, accepted, finish="length"))
    return chunks


@dataclass
class Script:
    """What the server answers; change it between requests."""

    chunks: list[str] = field(default_factory=good_stream)
    done: bool = True  # send ``data: [DONE]`` at the end
    props: Any = field(default_factory=lambda: {"build_info": "fake-1", "default_generation_settings": {
        "params": {"speculative.n_max": 2}}, "model_path": "/models/fake.gguf"})
    metrics: str = LLAMACPP_METRICS.format(drafted=0, accepted=0, drafts=0)
    metrics_status: int = 200  # 404: a llama.cpp server started without --metrics
    completion_status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)  # completion request bodies received
    auth_headers: list[str | None] = field(default_factory=list)
    # A stream that stalls: after this many chunks the server sets ``paused`` and waits for ``resume`` (a
    # signal test stops the client mid-stream, then lets the rest come).
    pause_after: int | None = None
    paused: threading.Event = field(default_factory=threading.Event)
    resume: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    script: Script

    def log_message(self, *_args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        s = self.script
        s.auth_headers.append(self.headers.get("Authorization"))
        if self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "fake"}]}).encode(), "application/json")
        elif self.path == "/props":
            self._send(200, json.dumps(s.props).encode(), "application/json")
        elif self.path == "/metrics":
            self._send(s.metrics_status, s.metrics.encode() if s.metrics_status == 200 else b"Not Found",
                       "text/plain")
        else:
            self._send(404, b"{}", "application/json")

    def do_POST(self) -> None:
        s = self.script
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        s.requests.append(body)
        if self.path != "/v1/completions" or s.completion_status != 200:
            self._send(s.completion_status if self.path == "/v1/completions" else 404,
                       json.dumps({"error": {"message": "refused by the fake"}}).encode(), "application/json")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")  # the end of the body is the close: a cut looks like a cut
        self.end_headers()
        for i, chunk in enumerate(s.chunks):
            if i == s.pause_after:
                s.paused.set()
                if not s.resume.wait(timeout=120):
                    return
            try:
                self.wfile.write(f"data: {chunk}\n\n".encode())
                self.wfile.flush()
            except OSError:  # the client closed the stream (cancelled)
                return
        if s.done:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class FakeEngine:
    """``with FakeEngine() as engine: engine.url``; ``engine.script`` says what it answers."""

    def __init__(self, ipv6: bool = False, script: Script | None = None):
        self.script = script or Script()
        handler = type("Handler", (_Handler,), {"script": self.script})
        server_class = _V6Server if ipv6 else ThreadingHTTPServer
        self.server = server_class(("::1" if ipv6 else "127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        port = self.server.server_address[1]
        self.url = f"http://[::1]:{port}" if ipv6 else f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-engine", daemon=True)

    def __enter__(self) -> FakeEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)
