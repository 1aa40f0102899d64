"""Attach to an OpenAI-compatible serving engine: stream one completion, scrape its counters, emit records.

``attach(options)`` runs one request and returns an ``AttachResult`` — the records (one per verify pass,
mode "attached"), the scrapes of ``/metrics`` taken before, during (every ``scrape_interval_s`` on a thread of
their own, so the stream is never held up) and after the request, the engine's final timings, and the
session description a trace writes. It never raises for a server problem: the result's ``error`` holds one
sentence and everything received until then is kept. Bad options raise ``AttachError`` before any I/O
(``options.check_options``).

The API key is read from the environment (``SPECSCOPE_API_KEY``, else ``OPENAI_API_KEY``) and only ever
put in the request header; the URL recorded anywhere has any user:password removed (``options.redact_url``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from specscope.core.attach.chunks import Chunk, ChunkError, StreamSanity, parse_sse_data
from specscope.core.attach.options import (
    AttachOptions,
    api_key_from_env,
    auth_from_url,
    base_url,
    check_options,
    redact_url,
    request_url,
)
from specscope.core.attach.passes import Pass, PassBuilder, RecordContext, RecordMaker, passes_from_steps
from specscope.core.attach.prometheus import CounterSnapshot, Engine, MetricsError, parse_counters
from specscope.core.attach.reconcile import Reconciliation, reconcile
from specscope.core.attach.request_metrics import RequestSpecReport
from specscope.core.attach.summary import chunk_latency
from specscope.core.records import ControlValues, IterationRecord

OnRecord = Callable[[IterationRecord], None]


@dataclass
class AttachResult:
    records: list[IterationRecord]
    text: str
    session: dict[str, Any]
    scrapes: list[CounterSnapshot]
    final_timings: dict[str, Any] | None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    ttft_ms: float | None = None
    elapsed_s: float = 0.0
    # The engine's own per-request report (vLLM metrics.speculative_decoding, SGLang spec_tokens_details).
    spec_report: RequestSpecReport | None = None
    records_rebuilt: bool = False  # the records were rebuilt from the report's per-step lists after the stream
    no_speculation: bool = False  # the error is that the server does not speculate (a plain baseline's due)
    placement_certain: bool = True  # each rebuilt pass's place in the stream is the only one the chunks allow
    reconciliation: Reconciliation | None = None  # which figures are exact, which estimated, and why
    latency: dict[str, float | None] = field(default_factory=dict)  # per chunk, as engines' benchmarks count

    @property
    def engine_totals(self) -> dict[str, int | None]:
        """The server's own counter increments over the request (last scrape minus the first)."""
        if len(self.scrapes) < 2:
            return {"drafts": None, "draft_tokens": None, "accepted_tokens": None}
        d = self.scrapes[-1].minus(self.scrapes[0])
        return {"drafts": d.drafts, "draft_tokens": d.draft_tokens, "accepted_tokens": d.accepted_tokens}


def _idle_scrape(scraper: _Scraper, timeout_s: float) -> CounterSnapshot | None:
    """The first scrape, taken once the engine runs no other request (a bounded wait: an earlier request,
    e.g. one a client abandoned, would otherwise land its counts inside ours)."""
    wait = threading.Event()
    deadline = time.monotonic() + min(timeout_s, 10.0)
    snap = scraper.scrape()
    while snap is not None and snap.requests_running and time.monotonic() < deadline:
        wait.wait(0.1)  # poll the server's own gauge
        snap = scraper.scrape()
    scraper.start_from_last()  # the totals run from this scrape, not from the busy ones before it
    return snap


def describe_http_error(exc: Exception, url: str) -> str:
    """One sentence for a transport failure."""
    where = redact_url(url)
    if isinstance(exc, httpx.ConnectError):
        return f"cannot reach a server at {where}: the connection was refused or the host is unknown"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"cannot reach a server at {where}: connecting timed out"
    if isinstance(exc, httpx.ReadTimeout):
        return f"the server at {where} stopped answering (no data within the timeout)"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return f"the connection to {where} dropped mid-stream; what arrived before is kept"
    return f"talking to {where} failed: {exc}"


class _Scraper:
    """Scrapes ``/metrics`` on its own thread every ``interval_s`` until stopped (the stream never waits)."""

    def __init__(self, client: httpx.Client, url: str, interval_s: float):
        self.client, self.url, self.interval_s = client, url, interval_s
        self.snapshots: list[CounterSnapshot] = []
        self.problem: str | None = None
        self.missing = False  # /metrics answered 404: the engine exposes none (a failure, as README says)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="specscope-attach-scraper", daemon=True)

    def start_from_last(self) -> None:
        with self._lock:
            del self.snapshots[:-1]

    def scrape(self) -> CounterSnapshot | None:
        try:
            response = self.client.get(self.url)
        except httpx.HTTPError as exc:
            self.problem = describe_http_error(exc, self.url)
            return None
        t = time.monotonic()
        if response.status_code != 200:
            self.missing = self.missing or response.status_code == 404
            self.problem = (f"{redact_url(self.url)} answered {response.status_code}: the engine exposes no "
                            "metrics there (llama.cpp's server needs --metrics)")
            return None
        try:
            snap = parse_counters(response.text, t)
        except MetricsError as exc:
            self.problem = str(exc)
            return None
        except UnicodeDecodeError:
            self.problem = f"{redact_url(self.url)} answered with text that is not readable: no metrics there"
            return None
        with self._lock:
            self.snapshots.append(snap)
        return snap

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.scrape()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval_s + 10.0)


def _server_info(client: httpx.Client, root: str) -> dict[str, Any]:
    """What the engine says about itself (version, model, speculative settings); {} parts where it says nothing."""
    info: dict[str, Any] = {}

    def get_json(path: str) -> Any:
        try:
            r = client.get(root + path)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        try:
            return r.json()
        except ValueError:
            return None

    models = get_json("/v1/models")
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        ids = [m.get("id") for m in models["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if ids:
            info["models"] = ids
    version = get_json("/version")  # vLLM
    if isinstance(version, dict) and "version" in version:
        info["vllm_version"] = version["version"]
    props = get_json("/props")  # llama.cpp
    if isinstance(props, dict) and "build_info" in props:
        info["llama_cpp_build"] = props.get("build_info")
        settings = props.get("default_generation_settings")
        params = settings.get("params") if isinstance(settings, dict) else None
        if settings is not None and not isinstance(params, dict):
            # Valid JSON of another shape: the speculative settings are unknown, the request can still run.
            info["problems"] = [f"{redact_url(root)}/props sent default_generation_settings of an unexpected "
                                "shape: its speculative settings are not known"]
        params = params if isinstance(params, dict) else {}
        info["speculative"] = {k: v for k, v in params.items() if str(k).startswith("speculative")}
        info["model_path"] = props.get("model_path")
        # /props shows the request defaults ("speculative.types": "none" even with -md); /slots says whether
        # each slot really speculates.
        slots = get_json("/slots")
        if isinstance(slots, list) and slots and isinstance(slots[0], dict) and "speculative" in slots[0]:
            info["speculative"]["slots_speculative"] = bool(slots[0]["speculative"])
    if "vllm_version" not in info and "llama_cpp_build" not in info:
        # SGLang: /server_info (0.5 and later); /get_server_info, deprecated, on older servers
        server_info = get_json("/server_info")
        if not _is_sglang_info(server_info):
            server_info = get_json("/get_server_info")
        if _is_sglang_info(server_info):
            info["sglang_version"] = server_info.get("version")
            info["speculative"] = {k: v for k, v in server_info.items() if str(k).startswith("speculative")}
            # None: launched without --speculative-algorithm
            info["speculation_on"] = server_info.get("speculative_algorithm") is not None
    return info


def _is_sglang_info(obj: Any) -> bool:
    return isinstance(obj, dict) and ("speculative_algorithm" in obj or "version" in obj)


def _engine_from_info(info: dict[str, Any]) -> Engine:
    if "llama_cpp_build" in info:
        return Engine.LLAMA_CPP
    if "sglang_version" in info:
        return Engine.SGLANG
    if "vllm_version" in info:
        return Engine.VLLM
    return Engine.UNKNOWN


def _request_body(options: AttachOptions, model: str | None, engine: Engine) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": options.prompt,
        "max_tokens": options.max_tokens,
        "temperature": options.temperature,
        "stream": True,
        # vLLM (and others that follow OpenAI): cumulative token counts on every chunk.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if model:
        body["model"] = model
    if engine is Engine.SGLANG:
        body["return_spec_tokens_details"] = True  # the request's exact totals and histogram, before [DONE]
    if engine is Engine.LLAMA_CPP:
        body["timings_per_token"] = True  # cumulative draft_n / draft_n_accepted on every chunk
        body["cache_prompt"] = False  # every request processes its prompt: requests are comparable
    body.update(options.extra_body)
    return body


def attach(options: AttachOptions, on_record: OnRecord | None = None,
           cancel: threading.Event | None = None) -> AttachResult:
    """Run one attached request (see the module docstring). ``cancel`` set → the stream is closed early."""
    check_options(options)
    root = base_url(options.url)
    clean_root = request_url(root)
    headers = {"Accept": "text/event-stream"}
    key = api_key_from_env()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    timeout = httpx.Timeout(options.timeout_s, connect=min(options.timeout_s, 10.0))
    auth = auth_from_url(root)
    started = time.monotonic()
    result = AttachResult(records=[], text="", session={}, scrapes=[], final_timings=None)
    with httpx.Client(headers=headers, timeout=timeout, auth=auth) as client, \
            httpx.Client(headers=headers, timeout=timeout, auth=auth) as scrape_client:
        # Reachability first: one sentence for "nothing there" before anything else is tried.
        try:
            probe = client.get(clean_root + "/v1/models")
        except httpx.HTTPError as exc:
            result.error = describe_http_error(exc, root)
            result.session = _session(options, root, Engine.UNKNOWN, {}, None)
            return result
        if probe.status_code in (401, 403):
            result.error = (f"{redact_url(root)} refused the request ({probe.status_code}): set SPECSCOPE_API_KEY "
                            "or OPENAI_API_KEY to the server's API key")
            result.session = _session(options, root, Engine.UNKNOWN, {}, None)
            return result
        info = _server_info(client, clean_root)
        result.warnings.extend(info.pop("problems", []))
        scraper = _Scraper(scrape_client, clean_root + options.metrics_path, options.scrape_interval_s)
        before = _idle_scrape(scraper, options.timeout_s)
        if before is not None and before.requests_running:
            result.warnings.append(f"the server was still working on {before.requests_running:.0f} other "
                                   "request(s): its counter totals may include them")
        engine = before.engine if before is not None and before.engine is not Engine.UNKNOWN \
            else _engine_from_info(info)
        model = options.model or (info.get("models") or [None])[0]
        if before is None and scraper.problem:
            result.warnings.append(scraper.problem)
        elif before is not None and not before.has_speculation_counters and engine is not Engine.LLAMA_CPP \
                and info.get("speculation_on") is not True:
            # llama.cpp always lists its speculative counters; vLLM only when speculation is on; SGLang publishes
            # its gauges after its first logging window, so /server_info decides there.
            result.warnings.append(f"the {engine.value} server exposes no speculative-decoding metrics: "
                                   "speculation looks disabled there")
        draft_len = _draft_len(before, info)
        session = _session(options, root, engine, info, model)
        session["draft_len"] = draft_len
        result.session = session
        controls = ControlValues(k=draft_len or 0, temperature=options.temperature)
        context = RecordContext(drafter=_drafter_name(engine, info), controls=controls,
                                prompt_tokens=None, t_request_s=time.monotonic())
        maker = RecordMaker(context)
        builder = PassBuilder(draft_len=draft_len)
        texts: list[str] = []
        chunks: list[Chunk] = []
        report: RequestSpecReport | None = None

        def emit(passes: list[Pass], finished: bool = False, reason: str = "") -> None:
            for i, p in enumerate(passes):
                last = finished and i == len(passes) - 1
                rec = maker.record(p, finished=last, finish_reason=reason if last else "")
                result.records.append(rec)
                if on_record is not None:
                    on_record(rec)

        scraper.start()
        finish_reason = ""
        last_chunk: Chunk | None = None
        sanity = StreamSanity(max_tokens=options.max_tokens)
        saw_done = cancelled = False
        n_chunks = 0
        try:
            with client.stream("POST", clean_root + "/v1/completions",
                               json=_request_body(options, model, engine)) as response:
                if response.status_code != 200:
                    response.read()
                    result.error = _status_sentence(response, root)
                else:
                    for line in response.iter_lines():
                        if cancel is not None and cancel.is_set():
                            finish_reason = "stop"
                            cancelled = True
                            result.warnings.append("cancelled: the stream was closed early")
                            break
                        if not line.startswith("data:"):
                            continue
                        t = time.monotonic()
                        chunk = parse_sse_data(line[len("data:"):].strip(), t)
                        if chunk is None:
                            saw_done = True
                            break
                        sanity.check(chunk)
                        n_chunks += 1
                        chunks.append(chunk)
                        if context.prompt_tokens is None and chunk.prompt_tokens is not None:
                            context.prompt_tokens = chunk.prompt_tokens  # the trace's context length includes it
                            session["prompt_tokens"] = chunk.prompt_tokens
                        if chunk.completion_tokens is not None:
                            session["completion_tokens"] = chunk.completion_tokens  # the stream's own count
                        if chunk.spec_report is not None:
                            report = chunk.spec_report
                        if chunk.report_problem:
                            result.warnings.append(chunk.report_problem)
                        if result.ttft_ms is None and (chunk.text or chunk.completion_tokens):
                            result.ttft_ms = (t - context.t_request_s) * 1000.0
                        last_chunk = chunk
                        texts.append(chunk.text)
                        if chunk.timings is not None:
                            result.final_timings = chunk.timings
                        if chunk.finish_reason:
                            finish_reason = _finish_reason(chunk.finish_reason)
                        emit(builder.add(chunk))
        except httpx.HTTPError as exc:
            result.error = describe_http_error(exc, root)
            finish_reason = "error"
        except ChunkError as exc:
            result.error = str(exc)
            finish_reason = "error"
        finally:
            scraper.stop()
        if result.error is None and not saw_done and not cancelled:
            if finish_reason:  # the completion said it was over; only the stream's end marker is missing
                result.warnings.append("the stream ended without its closing [DONE] line after the finish reason")
            else:
                result.error = (f"the stream from {redact_url(root)} ended after {n_chunks} chunk"
                                f"{'s' * (n_chunks != 1)} without [DONE] or a finish reason: the completion is "
                                "incomplete; what arrived is kept")
                finish_reason = "error"
        if result.error and not finish_reason:
            finish_reason = "error"
        emit(builder.finish(), finished=True, reason=finish_reason or "stop")
        if result.records and not result.records[-1].finished:
            result.records[-1].finished = True
            result.records[-1].finish_reason = finish_reason or "stop"
        result.text = "".join(texts)
        result.spec_report = report
        if report is not None and report.detailed and result.error is None and not cancelled:
            assert report.per_step_accepted is not None and report.per_step_drafted is not None
            rebuilt, result.placement_certain = passes_from_steps(chunks, report.per_step_accepted,
                                                                  report.per_step_drafted)
            exact_maker = RecordMaker(context)
            exact = [exact_maker.record(p) for p in rebuilt]
            if exact:
                exact[-1].finished, exact[-1].finish_reason = True, finish_reason or "stop"
                result.records, result.records_rebuilt = exact, True
        result.latency = chunk_latency(chunks, context.t_request_s)
        if last_chunk is not None and last_chunk.fingerprint and "llama_cpp_build" not in info:
            session["system_fingerprint"] = last_chunk.fingerprint
        if result.error is None or "dropped" not in result.error:
            scraper.scrape()  # the counters after the request (llama.cpp folds them in at its end)
        result.scrapes = list(scraper.snapshots)
        if session.get("draft_len") is None and result.scrapes:
            # llama.cpp lists its per-position counters only once a request has drafted: k is known afterwards.
            session["draft_len"] = _draft_len(result.scrapes[-1], info)
        chunk_counters = any(c.draft_n is not None for c in chunks)
        result.reconciliation = reconcile(result.records, result.scrapes, engine, session.get("draft_len"), report,
                                          builder.max_chunk_tokens, records_exact=result.records_rebuilt
                                          or chunk_counters, placement_certain=result.placement_certain)
        if result.error is None:
            problem = _speculation_problem(result, engine, info)
            if problem:
                result.error, result.no_speculation = problem, True
        if result.error is None and scraper.missing and scraper.problem:  # what arrived is kept; still exit 1
            result.warnings = [w for w in result.warnings if w != scraper.problem]
            result.error = scraper.problem
    result.elapsed_s = time.monotonic() - started
    result.session["scrapes"] = [_snapshot_dict(s) for s in result.scrapes]
    result.session["error"] = result.error
    result.session["warnings"] = result.warnings
    result.session["latency"] = result.latency
    if result.reconciliation is not None:
        result.session["exactness"] = result.reconciliation.to_dict()
    return result


def _finish_reason(reason: str) -> str:
    return {"length": "max_new_tokens", "stop": "eos"}.get(reason, reason)


def _status_sentence(response: httpx.Response, root: str) -> str:
    where = redact_url(root)
    if response.status_code == 404:
        return f"{where} has no /v1/completions: it is not an OpenAI-compatible server (or the URL is wrong)"
    if response.status_code in (401, 403):
        return f"{where} refused the request ({response.status_code}): set SPECSCOPE_API_KEY or OPENAI_API_KEY"
    detail = ""
    try:
        body = response.json()
        err = body.get("error") if isinstance(body, dict) else None
        detail = str(err.get("message") if isinstance(err, dict) else (err or body))[:200]
    except ValueError:
        detail = response.text[:200]
    return f"{where} answered {response.status_code} to the completion request: {detail}"


def _speculation_problem(result: AttachResult, engine: Engine, info: dict[str, Any]) -> str | None:
    """A sentence when the request ran without speculation (nothing drafted anywhere we can see)."""
    if not result.records:
        return None
    if engine is Engine.SGLANG:
        if info.get("speculation_on") is False:
            return ("the SGLang server runs without speculative decoding (its /server_info gives no "
                    "speculative_algorithm): start it with --speculative-algorithm")
        if info.get("speculation_on") is None and result.spec_report is None and result.scrapes and not any(
                s.accept_length for s in result.scrapes):
            return ("the SGLang server reports no speculative decoding (sglang:spec_accept_length is 0 or absent "
                    "and it sent no spec_tokens_details): start it with --speculative-algorithm")
        return None
    drafted = sum(r.n_drafted for r in result.records)
    counters = result.engine_totals
    if engine is Engine.LLAMA_CPP and drafted == 0 and not counters.get("draft_tokens"):
        return ("the server generated without speculative decoding (nothing was drafted): start llama-server "
                "with a draft model (-md) or a --spec-type")
    if engine is Engine.VLLM and result.scrapes and not any(s.has_speculation_counters for s in result.scrapes):
        return (f"the {engine.value} server reports no speculative-decoding counters: start it with a "
                "speculative config")
    return None


def _draft_len(snapshot: CounterSnapshot | None, info: dict[str, Any]) -> int | None:
    """k as the engine reports it: vLLM creates one per-position series per draft position at start."""
    spec = info.get("speculative") or {}
    if isinstance(spec.get("speculative_num_draft_tokens"), int) and spec["speculative_num_draft_tokens"] > 1:
        # SGLang drafts num_draft_tokens - 1 per pass (its spec_num_proposed_drafts); num_steps is the chain
        # depth, which is not the draft's size once topk > 1 makes it a tree.
        return int(spec["speculative_num_draft_tokens"]) - 1
    for key in ("speculative_num_steps", "num_speculative_tokens"):
        if isinstance(spec.get(key), int):
            return int(spec[key])
    if snapshot is not None and snapshot.accepted_per_pos:
        return len(snapshot.accepted_per_pos)
    return None


def _drafter_name(engine: Engine, info: dict[str, Any]) -> str:
    spec = info.get("speculative") or {}
    kind = spec.get("speculative.types") or spec.get("speculative_algorithm")
    return f"{engine.value} {kind}" if kind else engine.value


def _session(options: AttachOptions, root: str, engine: Engine, info: dict[str, Any],
             model: str | None) -> dict[str, Any]:
    version = info.get("vllm_version") or info.get("llama_cpp_build") or info.get("sglang_version")
    return {
        "command": "attach",
        "source": "attached",
        "engine": engine.value,
        "engine_version": version,
        "url": redact_url(root),
        "model": model,
        "speculative_config": info.get("speculative") or {},
        "max_tokens": options.max_tokens,
        "temperature": options.temperature,
        "timeout_s": options.timeout_s,
        "scrape_interval_s": options.scrape_interval_s,
        "api_key": "from environment" if api_key_from_env() else None,  # never the key itself
    }


def _snapshot_dict(s: CounterSnapshot) -> dict[str, Any]:
    return {"t_s": s.t_s, "drafts": s.drafts, "draft_tokens": s.draft_tokens, "accepted_tokens": s.accepted_tokens,
            "accepted_per_pos": s.accepted_per_pos, "accept_length": s.accept_length, "accept_rate": s.accept_rate}
