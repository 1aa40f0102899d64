"""A session: one pair, one prompt, one event stream (``core.events``).

The loop (``speculative.Decoder``) measures; the session joins the observations the loop cannot make by
itself — the nearest memory sample (``memory.sampler.MemorySampler``, its own thread), machine-busy flags
(``busy.BusyDetector``) and paging flags (``memory.detector.PagingDetector``) — onto each iteration before
it leaves, then feeds every event to the ``Run`` its consumer handed it (``core.measure.run``: the one
measurement, the stream kept, each event with the snapshot after it handed to the run's sinks — autosave,
the GUI's buffer, a socket — on this thread, in order). ``stream`` yields the same events. The session
builds no measurement: its adaptive k, baseline schedule and exploration read that run's snapshot, so the
session feeds the run itself, between iterations, and a stream closed mid-run still delivers its end.
The stream opens with ``RunStarted`` and always ends with ``RunFinished``, even when the run is cut short
(a stop, a signal, an error): the sinks get it then too.

The session also runs the paging drill (``drill.PagingDrill``): asked for through the controls or scheduled
in the options, applied between iterations, announced as a :class:`DrillEvent` in the stream. For each
iteration it joins the evidence a paging step leaves: the bytes accelerate's offload hooks streamed in the
draft and the verify phase (``memory.offload_meter``), and this process's storage reads and major faults
since the iteration before ended (``/proc/self/io``, ``getrusage``; read once per iteration).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import torch

from specscope.core.controls import DEFAULT_MAX_NEW_TOKENS, K_MAX, Controls
from specscope.core.engine.cpu_linear import choose_one_token_kernels
from specscope.core.engine.drafters.suffix import SuffixDrafter
from specscope.core.engine.pair import ModelPair
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.events import ALPHA_WINDOW, ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure.adaptive import CostModelKPolicy
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.adaptive_suffix import SuffixLengthPolicy
from specscope.core.measure.busy import BusyDetector
from specscope.core.measure.run import Run
from specscope.core.measure.schedule import (
    BASELINE_EARLY_BUDGET,
    BASELINE_MAX_GAP,
    MEASUREMENT_BUDGET,
    BaselineSchedule,
    VerifyExploration,
)
from specscope.core.memory.bandwidth import device_bandwidth
from specscope.core.memory.detector import PagingDetector, is_streaming_flag
from specscope.core.memory.drill import DrillError, DrillSpec, PagingDrill, drill_target
from specscope.core.memory.host import io_and_faults
from specscope.core.memory.offload_meter import OffloadMeter
from specscope.core.memory.residency import model_residency
from specscope.core.memory.sampler import MemorySampler
from specscope.core.records import SPECULATIVE_MODE, DrillEvent, IterationRecord, RunResult


@dataclass
class SessionOptions:
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    seed: int | None = None
    plain: bool = False
    record_tokens: bool = True
    # A baseline is a real plain iteration on the live context (``baseline_steps`` of them): blocks of
    # speculative decoding between them make the measured speed-up a paired ratio robust to the machine
    # drifting. The first comes after ``baseline_every`` speculative iterations, the next ones at least as far
    # apart and, once a first speed-up is known, spaced so that they and exploration together cost at most
    # ``measurement_budget`` of the wall time (core/measure/schedule.py). 0 = only when asked
    # (controls.request_baseline).
    baseline_every: int = 6
    baseline_steps: int = 1
    measurement_budget: float = MEASUREMENT_BUDGET
    # Now and then a real iteration at a k whose verify pass length was never timed (the curve over k needs
    # it); at most one in ``explore_every`` speculative iterations, within ``measurement_budget``, after the
    # measured speed-up exists where baselines run. 0 = never.
    explore_every: int = 16
    alpha_window: int = ALPHA_WINDOW  # recorded in RunStarted: the run's measurement uses it from there
    memory_period_s: float = 0.25  # 0 disables the sampler
    paging_factor: float = 3.0
    drill: DrillSpec | None = None  # a scheduled drill: from iteration drill.start until before drill.end
    drill_folder: str | None = None  # where a CPU drill writes its offloaded layers (default: the temp dir)
    measure_bandwidth: bool = True  # the compute devices' bandwidth, for the first-iteration paging check
    # What RunStarted says about the run, beside what the session knows itself.
    prompt_text: str = ""
    source: str = "local"
    extra: dict[str, Any] = field(default_factory=dict)


class Session:
    def __init__(self, pair: ModelPair, controls: Controls | None = None, options: SessionOptions | None = None,
                 run: Run | None = None):
        self.pair = pair
        self.controls = controls or Controls()
        self.options = options or SessionOptions()
        # the run this session feeds (its consumer's, with the consumer's sinks); a run of its own without one
        self.measured = run if run is not None else Run(alpha_window=self.options.alpha_window)
        # prompt lookup and suffix decoding find a whole continuation for free: their adaptive k trims what
        # was found (lookup's per match size, suffix decoding's by the draft's own count ratios)
        self.k_policy: CostModelKPolicy | LookupLengthPolicy = (
            SuffixLengthPolicy(self.measured, pair.drafter) if isinstance(pair.drafter, SuffixDrafter)
            else LookupLengthPolicy(self.measured) if pair.drafter_kind == "lookup"
            else CostModelKPolicy(self.measured))
        choose_one_token_kernels(pair)  # at this run's thread count, if the load's differed (timed once per count)
        self.busy = BusyDetector.for_device(pair.target.device, torch.get_num_threads())
        self.detector = PagingDetector(factor=self.options.paging_factor)
        self.sampler: MemorySampler | None = None
        if self.options.memory_period_s > 0:
            self.sampler = MemorySampler(
                period_s=self.options.memory_period_s,
                models=self._models_for_residency(),
                caches={
                    "target": lambda: self.decoder.target.cache,
                    "draft": lambda: getattr(pair.drafter, "cache", None),
                },
                rollbacks={
                    "target": lambda: self.decoder.target.rollback,
                    "draft": lambda: getattr(pair.drafter, "cache_rollback", None),
                },
                expected_devices=self._expected_devices(),
            )
        self.decoder = Decoder(
            pair.target.model,
            pair.vocab_size,
            drafter=pair.drafter,
            token_text=pair.token_text,
            k_policy=self.k_policy,
        )
        self.records: list[IterationRecord] = []
        self.drill_events: list[DrillEvent] = []
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None
        self.drill: PagingDrill | None = None
        self.meter = OffloadMeter()
        self._profile: dict[str, float] = {}  # per-model step bytes and device bandwidth, joined to records
        self._io_before: dict[str, float] = {}
        self._scheduled_done = False

    def _models_for_residency(self) -> dict[str, object]:
        models: dict[str, object] = {"target": self.pair.target.model}
        if self.pair.draft is not None:
            models["draft"] = self.pair.draft.model
        return models

    def _expected_devices(self) -> dict[str, str]:
        devices = {"target": str(self.pair.target.device)}
        if self.pair.draft is not None:
            devices["draft"] = str(self.pair.draft.device)
        return devices

    @property
    def result(self) -> RunResult | None:
        return self.decoder.result

    def decode_options(self) -> DecodeOptions:
        o = self.options
        schedule = (BaselineSchedule(self.measured, max(1, o.baseline_steps), min_gap=o.baseline_every,
                                     max_gap=max(o.baseline_every, BASELINE_MAX_GAP), budget=o.measurement_budget,
                                     early_budget=max(o.measurement_budget, BASELINE_EARLY_BUDGET))
                    if o.baseline_every > 0 else None)
        # the cost-model policy scores nothing before a plain step is timed: give it one first (lookup's policy
        # times its own plain step, a match before any length-1 pass proposes nothing)
        first = (self.controls.values.adaptive_k and not o.plain
                 and isinstance(self.k_policy, CostModelKPolicy))
        explore = (VerifyExploration(self.measured, K_MAX, every=o.explore_every, budget=o.measurement_budget,
                                     after_measured=schedule is not None) if o.explore_every > 0 else None)
        return DecodeOptions(
            max_new_tokens=o.max_new_tokens,
            seed=o.seed,
            eos_token_ids=self.pair.eos_token_ids,
            record_tokens=o.record_tokens,
            baseline_every=o.baseline_every,
            baseline_steps=o.baseline_steps,
            baseline_first=first,
            baseline_due=schedule.due if schedule is not None else None,
            explore_k=explore,
            context_window=self.pair.context_window,
        )

    def run_started(self, prompt_ids: list[int]) -> RunStarted:
        """The stream's first event: what this run is."""
        pair, o = self.pair, self.options
        draft = pair.draft.name if pair.draft is not None else ""
        machine: dict[str, Any] = {
            "target_device": str(pair.target.device),
            "draft_device": str(pair.draft.device) if pair.draft is not None else "",
            "platform": platform.platform(terse=True),
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
        }
        for role, loaded in (("target", pair.target), ("draft", pair.draft)):
            kernels = getattr(loaded, "one_token_kernels", {}).get(torch.get_num_threads(), "") if loaded else ""
            if kernels:  # what a one-token step (a plain step, a draft step) ran on: the speed-up's reference
                machine[f"{role}_one_token_kernel"] = kernels
        options = {"baseline_every": o.baseline_every, "baseline_steps": o.baseline_steps,
                   "measurement_budget": o.measurement_budget, "explore_every": o.explore_every, **o.extra}
        return RunStarted(
            source=o.source, target=str(pair.target.name), draft=str(draft),
            drafter="none" if o.plain else str(pair.drafter_kind),
            description=str(getattr(pair, "description", "") or ""), prompt=o.prompt_text,
            prompt_tokens=len(prompt_ids), controls=self.controls.values, max_new_tokens=o.max_new_tokens,
            plain=o.plain, seed=o.seed, options=options, machine=machine, t_s=time.monotonic(),
            alpha_window=o.alpha_window,
        )

    def _emit(self, event: Event) -> None:
        """Feed the run (it keeps the event and hands it with the snapshot after it to its sinks)."""
        self.measured.feed(event)

    # ---- drill and evidence -----------------------------------------------------------------------------
    def _profile_models(self) -> None:
        """Bytes one pass of each model reads and its compute device's bandwidth (measured once, cached)."""
        devices = self._expected_devices()
        for name, model in self._models_for_residency().items():
            residency = model_residency(model, devices[name], name)  # type: ignore[arg-type]
            self._profile[f"{name}_step_read_bytes"] = float(residency.step_read_bytes)
            if self.options.measure_bandwidth:
                self._profile[f"{name}_bandwidth_bytes_per_s"] = device_bandwidth(devices[name])

    def _weights_moved(self) -> None:
        self.meter.watch(self._models_for_residency().values())  # type: ignore[arg-type]
        if self.sampler is not None:
            self.sampler.refresh_residency()
            self.sampler.sample_once()

    def _drill_change(self, next_iteration: int) -> DrillEvent | None:
        """Start or end a drill at this boundary when asked (controls) or scheduled (options)."""
        request = self.controls.take_drill_request()
        spec = self.options.drill
        if request is None and spec is not None:
            if self.drill is None and not self._scheduled_done and next_iteration >= spec.start:
                request = ("start", spec)
            elif self.drill is not None and self.drill.spec is spec and next_iteration >= spec.end:
                request = ("end", None)
        if request is None:
            return None
        kind, asked = request
        if kind == "start":
            if self.drill is not None:  # one drill at a time: the new one replaces the old
                self._end_drill(next_iteration)
            return self._start_drill(asked, next_iteration)
        return self._end_drill(next_iteration) if self.drill is not None else None

    def _start_drill(self, spec: DrillSpec, next_iteration: int) -> DrillEvent:
        if spec is self.options.drill:
            self._scheduled_done = True
        try:
            model, device = drill_target(self.pair, spec.model)
            drill = PagingDrill(spec, model, device, self.options.drill_folder)
            drill.start()
        except (DrillError, OSError, RuntimeError) as exc:
            return DrillEvent("start", spec.model, 0, 0, "", next_iteration, t_s=time.monotonic(), error=str(exc))
        self.drill = drill
        self._weights_moved()
        return DrillEvent("start", spec.model, drill.n_layers, drill.total_layers, drill.place, next_iteration,
                          moved_bytes=drill.moved_bytes, t_s=time.monotonic())

    def _end_drill(self, next_iteration: int) -> DrillEvent:
        drill, self.drill = self.drill, None
        assert drill is not None
        error = ""
        try:
            drill.end()
        except (DrillError, OSError, RuntimeError) as exc:
            error = str(exc)
        self._weights_moved()
        return DrillEvent("end", drill.spec.model, drill.n_layers, drill.total_layers, drill.place,
                          next_iteration, moved_bytes=drill.moved_bytes, t_s=time.monotonic(), error=error)

    def _evidence(self, record: IterationRecord) -> dict[str, float]:
        """What this iteration read: offload-hook bytes per phase, storage reads, major faults, the drill."""
        out = dict(self._profile)
        now = io_and_faults()
        for key, name in (("host_read_bytes", "io_read_bytes"), ("host_rchar_bytes", "io_rchar_bytes"),
                          ("host_major_faults", "io_major_faults_count")):
            if key in now and key in self._io_before:
                out[name] = max(0.0, now[key] - self._io_before[key])
        self._io_before = now
        if self.meter.watched_modules:
            t0 = record.t_start_s
            t_draft_end = t0 + record.draft_ms / 1000.0
            if record.mode == SPECULATIVE_MODE:
                out["draft_offload_read_bytes"] = float(self.meter.bytes_between(t0, t_draft_end))
                out["target_offload_read_bytes"] = float(self.meter.bytes_between(t_draft_end, record.t_end_s))
            else:
                out["target_offload_read_bytes"] = float(self.meter.bytes_between(t0, record.t_end_s))
            self.meter.forget_before(record.t_end_s)
        for name in ("draft", "target"):
            active = self.drill is not None and self.drill.spec.model == name
            out[f"drill_{name}_layers_count"] = float(self.drill.n_layers) if active and self.drill else 0.0
        return out

    def stream(self, prompt_ids: list[int]) -> Generator[Event, None, None]:
        started = self.started = self.run_started(prompt_ids)
        self._emit(started)
        yield started
        self._profile_models()
        self.meter.watch(self._models_for_residency().values())  # type: ignore[arg-type]
        if self.sampler is not None:
            self.sampler.start()
        events = self.decoder.stream(prompt_ids, self.controls, self.decode_options(), plain=self.options.plain)
        error = ""
        try:
            while True:
                change = self._drill_change(len(self.records))
                if change is not None:
                    self.drill_events.append(change)
                    self._emit(change)
                    yield change
                if change is not None or not self._io_before:
                    # otherwise the last iteration's reading is this one's start (one /proc read an iteration,
                    # not two): what the bookkeeping between them reads counts to the next iteration
                    self._io_before = io_and_faults()
                try:
                    event = next(events)
                except StopIteration:
                    break
                if isinstance(event, ControlChange):
                    self._emit(event)
                    yield event
                    continue
                self._observe(event)
                self.records.append(event)
                self._emit(event)
                yield event
        except GeneratorExit:  # the consumer closed the stream (a stop between iterations): not an error
            raise
        except BaseException as exc:  # a model failing, a second signal: the stream still says how it ended
            error = getattr(exc, "reason", "") or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            events.close()  # the decoder's finally sets the result
            if self.drill is not None:  # a run that stops mid-drill gives the weights back
                end = self._end_drill(len(self.records))
                self.drill_events.append(end)
                self._emit(end)
            self.meter.unwatch()
            if self.sampler is not None:
                self.sampler.stop()
            self.finished = self._finish(error)
            self._emit(self.finished)
        yield self.finished

    def _observe(self, event: IterationRecord) -> None:
        """Join what the loop cannot see: the memory sample, this iteration's evidence, busy and paging flags."""
        if self.sampler is not None:
            event.memory = self.sampler.sample_near(event.t_start_s, event.t_end_s)
        event.memory.update(self._evidence(event))
        # A preempted step is slow for a reason that is not memory: name it, and do not call it paging from its
        # time alone. Weights measured streaming through offload hooks are a fact either way, so that sentence
        # stays beside the busy one.
        busy = self.busy.observe(event)
        paging = self.detector.observe(event)
        event.flags = busy + [f for f in paging if is_streaming_flag(f)] if busy else paging

    def _finish(self, error: str) -> RunFinished:
        result = self.decoder.result
        if error:
            reason = error if error in ("interrupted", "terminated") else "error"
        elif result is None:
            reason = "error"
        elif result.finish_reason == "stop":
            reason = self.controls.stop_reason
        else:
            reason = result.finish_reason
        return RunFinished(
            reason=reason, iterations=len(self.records), tokens=len(result.token_ids) if result else 0,
            elapsed_s=result.elapsed_s if result else 0.0, prefill_ms=self.decoder.prefill_ms,
            error=error if reason == "error" else "", t_s=time.monotonic(),
        )

    def run(self, prompt_ids: list[int]) -> RunResult:
        for _ in self.stream(prompt_ids):
            pass
        assert self.result is not None
        return self.result
