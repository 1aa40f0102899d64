"""A session: one pair, one prompt, the loop's records enriched with measurement and memory.

The loop (``speculative.Decoder``) measures; the session joins what the loop cannot know by itself:
every derived number (``measurement.Measurement``, the one owner: α, costs, speed-ups with their interval,
best k), the nearest memory sample (``memory.sampler.MemorySampler``, its own thread), machine-busy flags
(``busy.BusyDetector``) and paging flags (``memory.detector.PagingDetector``).
The CLI and the GUI worker both consume ``Session.stream``.

The session also runs the paging drill (``drill.PagingDrill``): asked for through the controls or scheduled
in the options, applied between iterations, announced as a :class:`DrillEvent` in the stream. For each
iteration it joins the evidence a paging step leaves: the bytes accelerate's offload hooks streamed in the
draft and the verify phase (``memory.offload_meter``), and this process's storage reads and major faults
over the iteration (``/proc/self/io``, ``getrusage``).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass

from .adaptive import CostModelKPolicy
from .adaptive_lookup import LookupLengthPolicy
from .busy import BusyDetector
from .controls import K_MAX, Controls
from .drill import DrillError, DrillSpec, PagingDrill, drill_target
from .measurement import Measurement
from .memory.bandwidth import device_bandwidth
from .memory.detector import PagingDetector, is_streaming_flag
from .memory.host import io_and_faults
from .memory.offload_meter import OffloadMeter
from .memory.residency import model_residency
from .memory.sampler import MemorySampler
from .pair import ModelPair
from .records import BaselineRecord, DrillEvent, IterationRecord, RunResult
from .speculative import DecodeOptions, Decoder

Event = IterationRecord | BaselineRecord | DrillEvent


@dataclass
class SessionOptions:
    max_new_tokens: int = 256
    seed: int | None = None
    plain: bool = False
    record_tokens: bool = True
    # Plain steps on the live context every N iterations: short blocks of plain and speculative decoding,
    # interleaved, make the measured speed-up a paired ratio robust to the machine drifting.
    baseline_every: int = 6
    baseline_steps: int = 3
    verify_sweep: bool = True  # with a baseline, time passes of length 1..sweep_k_max+1 (the verify fit)
    sweep_k_max: int = K_MAX  # so every k the curve offers has a measured pass length
    sweep_every: int = 4
    alpha_window: int = 32
    memory_period_s: float = 0.25  # 0 disables the sampler
    paging_factor: float = 3.0
    drill: DrillSpec | None = None  # a scheduled drill: from iteration drill.start until before drill.end
    drill_folder: str | None = None  # where a CPU drill writes its offloaded layers (default: the temp dir)
    measure_bandwidth: bool = True  # the compute devices' bandwidth, for the first-iteration paging check


class Session:
    def __init__(self, pair: ModelPair, controls: Controls | None = None, options: SessionOptions | None = None):
        self.pair = pair
        self.controls = controls or Controls()
        self.options = options or SessionOptions()
        self.measurement = Measurement(window=self.options.alpha_window)
        # prompt lookup finds a whole continuation for free: its adaptive k trims what it found, per match
        self.k_policy: CostModelKPolicy | LookupLengthPolicy = (
            LookupLengthPolicy(self.measurement) if pair.drafter_kind == "lookup"
            else CostModelKPolicy(self.measurement))
        self.busy = BusyDetector.for_device(pair.target.device)
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
        self.baselines: list[BaselineRecord] = []
        self.drill_events: list[DrillEvent] = []
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
        return DecodeOptions(
            max_new_tokens=o.max_new_tokens,
            seed=o.seed,
            eos_token_ids=self.pair.eos_token_ids,
            record_tokens=o.record_tokens,
            baseline_every=o.baseline_every,
            baseline_steps=o.baseline_steps,
            verify_sweep=o.verify_sweep,
            sweep_k_max=o.sweep_k_max,
            sweep_every=o.sweep_every,
            context_window=self.pair.context_window,
        )

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
            if record.mode == "speculative":
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
        self._profile_models()
        self.meter.watch(self._models_for_residency().values())  # type: ignore[arg-type]
        if self.sampler is not None:
            self.sampler.start()
        events = self.decoder.stream(prompt_ids, self.controls, self.decode_options(), plain=self.options.plain)
        try:
            while True:
                change = self._drill_change(len(self.records))
                if change is not None:
                    self.drill_events.append(change)
                    yield change
                self._io_before = io_and_faults()
                try:
                    event = next(events)
                except StopIteration:
                    break
                if isinstance(event, BaselineRecord):
                    self.measurement.observe_baseline(event)
                    self.baselines.append(event)
                    yield event
                    continue
                if self.sampler is not None:
                    event.memory = self.sampler.sample_near(event.t_start_s, event.t_end_s)
                event.memory.update(self._evidence(event))
                # A preempted step is slow for a reason that is not memory: name it, and do not call it paging
                # from its time alone. Weights measured streaming through offload hooks are a fact either way,
                # so that sentence stays beside the busy one.
                busy = self.busy.observe(event)
                paging = self.detector.observe(event)
                event.flags = busy + [f for f in paging if is_streaming_flag(f)] if busy else paging
                self.measurement.enrich(event)
                self.records.append(event)
                yield event
        finally:
            events.close()  # the decoder's finally sets the result
            if self.drill is not None:  # a run that stops mid-drill gives the weights back
                self.drill_events.append(self._end_drill(len(self.records)))
            self.meter.unwatch()
            if self.sampler is not None:
                self.sampler.stop()

    def run(self, prompt_ids: list[int]) -> RunResult:
        for _ in self.stream(prompt_ids):
            pass
        assert self.result is not None
        return self.result
