"""Fake vLLM and SGLang servers whose wire formats follow the engines' released source (vLLM 0.34.0, SGLang
0.5.23; read from their wheels, module paths below), with a simulated engine behind them that decides what each
verify step drafted and accepted. Used by tests/test_attach_engines.py, one test per case of issue 38.

vLLM (``vllm/entrypoints/openai/completion/serving.py``, ``completion_stream_generator``):
- one ``data:`` chunk per engine output (one step, or several merged when the HTTP side lags or with
  ``--stream-interval``), a ``CompletionStreamResponse`` dumped with ``exclude_unset=True``: ``id``, ``object``,
  ``created``, ``model``, ``choices[0]`` (``index``, ``text``, ``logprobs``, ``finish_reason``,
  ``stop_reason``, ``prompt_token_ids``, ``token_ids``, ``weight_versions``), ``kv_transfer_params``, and with
  ``continuous_usage_stats`` a cumulative ``usage``;
- then, with ``include_usage``, the final usage chunk (``choices: []``, dumped with ``exclude_none=True``)
  carrying ``metrics.speculative_decoding`` when the server runs ``--per-request-spec-decode-metrics``
  (``RequestSpecDecodeMetrics.to_dict`` of ``vllm/v1/metrics/stats.py``; per-step lists at ``detailed``);
- ``/metrics``: ``SpecDecodingProm`` (``vllm/v1/spec_decode/metrics.py``): counters ``vllm:spec_decode_num_drafts``,
  ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and ``..._num_accepted_tokens_per_pos`` (label
  ``position``, one series per position < num_speculative_tokens), labels ``model_name`` and ``engine``, one
  child per engine; the gauge ``vllm:num_requests_running``. A step counts when its drafts are verified
  (``Scheduler.update_from_output``: ``num_accepted = len(generated) - 1``, before ``max_tokens`` trims what is
  sent); a step that drafted nothing is not counted (``make_spec_decoding_stats``).

SGLang (``sglang/srt/entrypoints/openai/serving_completions.py``): text chunks, then, when the request asked
``return_spec_tokens_details``, a chunk with ``choices: []`` and ``sglext.spec_tokens_details``
(``SpecTokensDetails``; ``spec_num_proposed_drafts`` = passes x (``speculative_num_draft_tokens`` - 1), as
``TokenizerManager`` computes it), then the usage chunk. ``/server_info`` (``/get_server_info`` deprecated) gives
the resolved server arguments, ``speculative_*`` included; ``/metrics`` has the gauges ``sglang:spec_accept_length``,
``sglang:spec_accept_rate`` and ``sglang:num_running_reqs`` labelled by ``model_name``, ``engine_type`` and
``tp_rank``, without samples until the scheduler's first logging window (``fresh``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


@dataclass
class Step:
    """One engine step of our request: drafted 0 is a step that drafted nothing (one token)."""

    drafted: int
    accepted: int

    @property
    def tokens(self) -> int:
        return self.accepted + 1


def steps_of(pairs: list[tuple[int, int]]) -> list[Step]:
    return [Step(d, a) for d, a in pairs]


@dataclass
class Engine:
    """What the simulated engine does for the one request it serves, and what else runs meanwhile."""

    k: int
    steps: list[Step]  # after the prefill (which sends the first token)
    max_tokens: int | None = None  # trims the last step's tokens, as the scheduler does after counting it
    # chunks: how many engine outputs (prefill first, then steps) each streamed chunk carries; None: one each
    merge: list[int] | None = None
    per_request: str = "none"  # vLLM --per-request-spec-decode-metrics: none, summary or detailed
    engines: int = 1  # data-parallel engines, each with its own counter children
    start_counts: tuple[int, int, int] = (7, 25, 13)  # counters that did not start at zero
    other_steps: list[Step] = field(default_factory=list)  # another request, on engine 1, during ours
    prompt_tokens: int = 11
    speculative: bool = True  # False: started without --speculative-config (no spec_decode counters at all)

    def tokens_sent(self) -> list[int]:
        """Tokens each engine output sends: the prefill's one, then each step's, the last trimmed."""
        sent = [1] + [s.tokens for s in self.steps]
        if self.max_tokens is not None:
            total = 0
            for i, n in enumerate(sent):
                sent[i] = max(0, min(n, self.max_tokens - total))
                total += sent[i]
        return sent

    def chunks(self) -> list[list[int]]:
        """Indexes of the engine outputs each chunk carries (0 = prefill)."""
        outputs = list(range(len(self.steps) + 1))
        if self.merge is None:
            return [[i] for i in outputs]
        out, at = [], 0
        for n in self.merge:
            out.append(outputs[at:at + n])
            at += n
        assert at == len(outputs), "merge must cover every engine output"
        return out


class VllmMetrics:
    """The counters as vLLM registers them, updated step by step."""

    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        per_engine = {i: ["fake/model", str(i)] for i in range(engine.engines)}
        # SpecDecodingProm registers nothing without a speculative config: a scratch registry keeps them unseen
        spec_registry = self.registry if engine.speculative else CollectorRegistry()
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels,
                              registry=spec_registry)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels,
                                    registry=spec_registry)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels,
                                registry=spec_registry)
        per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                          [*labels, "position"], registry=spec_registry)
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             labels, registry=self.registry)
        self.per_engine = per_engine
        self.per_pos = {i: [per_pos.labels(*lv, str(p)) for p in range(engine.k)] for i, lv in per_engine.items()}
        for i, lv in per_engine.items():
            self.running.labels(*lv).set(0)
            drafts, tokens, accepted = engine.start_counts
            self.drafts.labels(*lv).inc(drafts)
            self.draft_tokens.labels(*lv).inc(tokens)
            self.accepted.labels(*lv).inc(accepted)
            for p in range(min(engine.k, accepted)):
                self.per_pos[i][p].inc(1)

    def observe(self, step: Step, engine_idx: int = 0) -> None:
        if not step.drafted:  # make_spec_decoding_stats: a step that drafted nothing is no draft
            return
        lv = self.per_engine[engine_idx]
        self.drafts.labels(*lv).inc(1)
        self.draft_tokens.labels(*lv).inc(step.drafted)
        self.accepted.labels(*lv).inc(step.accepted)
        for p in range(step.accepted):
            self.per_pos[engine_idx][p].inc(1)

    def set_running(self, n: int, engine_idx: int = 0) -> None:
        self.running.labels(*self.per_engine[engine_idx]).set(n)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def vllm_spec_report(engine: Engine) -> dict[str, Any]:
    """``RequestSpecDecodeMetrics.to_dict`` for our request's steps."""
    drafting = [s for s in engine.steps if s.drafted]
    hist = [0] * (engine.k + 1)
    for s in drafting:
        hist[s.accepted] += 1
    steps = sum(hist)
    accepted = sum(j * c for j, c in enumerate(hist))
    drafted = sum(s.drafted for s in drafting)
    out: dict[str, Any] = {
        "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": hist, "num_spec_steps": steps, "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted, "num_spec_tokens": engine.k,
    }
    if engine.per_request == "detailed":
        out["per_step_accepted"] = [s.accepted for s in drafting]
        out["per_step_drafted"] = [s.drafted for s in drafting]
    return out


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="fake-serving", daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


class _Base(BaseHTTPRequestHandler):
    def log_message(self, *_args: Any) -> None:
        pass

    def _json(self, obj: Any, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, text: str) -> None:
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _start_stream(self) -> dict[str, Any]:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        return dict(body)

    def _data(self, obj: Any) -> None:
        self.wfile.write(f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode())
        self.wfile.flush()


class FakeVllm(_Server):
    """``with FakeVllm(engine) as server: server.url``; ``server.requests`` holds the request bodies."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.metrics = VllmMetrics(engine)
        self.requests: list[dict[str, Any]] = []
        # /metrics requests: how many began, and the latest one answered (a scrape that began after a change in
        # the counters has seen it)
        self._scrapes = threading.Condition()
        self._scrapes_begun = 0
        self._last_answered = -1
        fake = self

        class Handler(_Base):
            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json({"object": "list", "data": [{"id": "fake/model", "object": "model"}]})
                elif self.path == "/version":
                    self._json({"version": "0.34.0"})
                elif self.path == "/metrics":
                    with fake._scrapes:
                        n = fake._scrapes_begun
                        fake._scrapes_begun += 1
                    self._text(fake.metrics.text())
                    with fake._scrapes:
                        fake._last_answered = max(fake._last_answered, n)
                        fake._scrapes.notify_all()
                else:
                    self._json({"detail": "Not Found"}, 404)

            def do_POST(self) -> None:
                fake.requests.append(self._start_stream())
                fake.stream(self)

        super().__init__(Handler)

    def stream(self, h: _Base) -> None:
        e, m = self.engine, self.metrics
        m.set_running(1)
        sent = e.tokens_sent()
        total = 0
        for n, outputs in enumerate(e.chunks()):
            if e.other_steps and n == 1:  # another request on engine 1 runs through our stream
                m.set_running(1, engine_idx=1)
                for s in e.other_steps:
                    m.observe(s, engine_idx=1)
                with self._scrapes:  # a scrape begun from here on sees it running (the client's own thread)
                    first = self._scrapes_begun
                    self._scrapes.wait_for(lambda first=first: self._last_answered >= first, timeout=30)
                m.set_running(0, engine_idx=1)
            for i in outputs:
                if i:
                    m.observe(e.steps[i - 1])
            tokens = sum(sent[i] for i in outputs)
            total += tokens
            last = n == len(e.chunks()) - 1
            finish = "length" if last and e.max_tokens is not None and total >= e.max_tokens else \
                "stop" if last else None
            h._data({"id": "cmpl-fake", "object": "text_completion", "created": 1, "model": "fake/model",
                     "choices": [{"index": 0, "text": "".join(f" t{total - tokens + j}" for j in range(tokens)),
                                  "logprobs": None, "finish_reason": finish, "stop_reason": None,
                                  "prompt_token_ids": None, "token_ids": None, "weight_versions": None}],
                     "kv_transfer_params": None,
                     "usage": {"prompt_tokens": e.prompt_tokens, "completion_tokens": total,
                               "total_tokens": e.prompt_tokens + total}})
        m.set_running(0)
        final: dict[str, Any] = {"id": "cmpl-fake", "object": "text_completion", "created": 1, "model": "fake/model",
                                 "choices": [], "usage": {"prompt_tokens": e.prompt_tokens, "completion_tokens": total,
                                                          "total_tokens": e.prompt_tokens + total}}
        if e.per_request != "none":
            final["metrics"] = {"speculative_decoding": vllm_spec_report(e)}
        h._data(final)
        h._data("[DONE]")


@dataclass
class SglangState:
    algorithm: str | None = "EAGLE"
    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int = 4
    fresh: bool = False  # gauges registered, no sample yet
    deprecated_only: bool = False  # an older server: /get_server_info only
    send_details: bool = True  # the request asked return_spec_tokens_details and this server sends them


class FakeSglang(_Server):
    def __init__(self, engine: Engine, state: SglangState) -> None:
        self.engine, self.state = engine, state
        self.requests: list[dict[str, Any]] = []
        self.info_paths: list[str] = []
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine_type", "tp_rank"]
        self.accept_length = Gauge("sglang:spec_accept_length", "Mean acceptance length of speculative decoding "
                                   "(accepted drafts + bonus token per forward).", labels, registry=self.registry,
                                   multiprocess_mode="mostrecent")
        self.accept_rate = Gauge("sglang:spec_accept_rate", "Speculative acceptance rate.", labels,
                                 registry=self.registry, multiprocess_mode="mostrecent")
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", labels,
                             registry=self.registry, multiprocess_mode="mostrecent")
        if not state.fresh:
            on = state.algorithm is not None
            for rank in ("0", "1"):  # two tensor-parallel ranks report the same requests
                self.accept_length.labels("fake/model", "unified", rank).set(2.5 if on else 0.0)
                self.accept_rate.labels("fake/model", "unified", rank).set(0.5 if on else 0.0)
                self.running.labels("fake/model", "unified", rank).set(0)
        fake = self

        class Handler(_Base):
            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json({"object": "list", "data": [{"id": "fake/model", "object": "model"}]})
                elif self.path in ("/server_info", "/get_server_info"):
                    fake.info_paths.append(self.path)
                    if self.path == "/server_info" and state.deprecated_only:
                        self._json({"detail": "Not Found"}, 404)
                        return
                    self._json({"model_path": "fake/model", "speculative_algorithm": state.algorithm,
                                "speculative_num_steps": state.num_steps, "speculative_eagle_topk": state.topk,
                                "speculative_num_draft_tokens": state.num_draft_tokens, "version": "0.5.23",
                                "internal_states": [{}]})
                elif self.path == "/metrics":
                    self._text(generate_latest(fake.registry).decode())
                else:
                    self._json({"detail": "Not Found"}, 404)

            def do_POST(self) -> None:
                body = self._start_stream()
                fake.requests.append(body)
                fake.stream(self, body)

        super().__init__(Handler)

    def stream(self, h: _Base, body: dict[str, Any]) -> None:
        e, st = self.engine, self.state
        sent = e.tokens_sent()
        total = 0
        for n, outputs in enumerate(e.chunks()):
            tokens = sum(sent[i] for i in outputs)
            total += tokens
            last = n == len(e.chunks()) - 1
            h._data({"id": "fake", "object": "text_completion", "created": 1, "model": "fake/model",
                     "choices": [{"index": 0, "text": "".join(f" t{total - tokens + j}" for j in range(tokens)),
                                  "logprobs": None, "finish_reason": "length" if last else None,
                                  "matched_stop": None}],
                     "usage": {"prompt_tokens": e.prompt_tokens, "completion_tokens": total,
                               "total_tokens": e.prompt_tokens + total}})
        verify = [s for s in e.steps if st.algorithm is not None]
        if body.get("return_spec_tokens_details") and st.send_details and verify:
            hist: list[int] = []
            for s in verify:
                hist.extend([0] * (s.accepted + 1 - len(hist)))
                hist[s.accepted] += 1
            correct = sum(s.accepted for s in verify)
            proposed = len(verify) * (st.num_draft_tokens - 1)
            h._data({"id": "fake", "object": "text_completion", "created": 1, "model": "fake/model", "choices": [],
                     "usage": None, "sglext": {"routed_experts": None, "cached_tokens_details": None,
                                               "spec_tokens_details": {
                                                   "spec_accept_rate": correct / proposed,
                                                   "spec_accept_length": total / len(verify),
                                                   "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
                                                   "spec_num_correct_drafts": correct,
                                                   "spec_num_proposed_drafts": proposed,
                                                   "spec_verify_ct": len(verify),
                                                   "spec_correct_drafts_histogram": hist,
                                                   "spec_cap_lens_histogram": []},
                                               "input_ids": None, "output_ids": None}})
        h._data({"id": "fake", "object": "text_completion", "created": 1, "model": "fake/model", "choices": [],
                 "usage": {"prompt_tokens": e.prompt_tokens, "completion_tokens": total,
                           "total_tokens": e.prompt_tokens + total}})
        h._data("[DONE]")
