"""A session: one pair, one prompt, the loop's records enriched with measurement and memory.

The loop (``speculative.Decoder``) measures; the session joins what the loop cannot know by itself:
every derived number (``measurement.Measurement``, the one owner: α, costs, speed-ups with their interval,
best k), the nearest memory sample (``memory.sampler.MemorySampler``, its own thread), machine-busy flags
(``busy.BusyDetector``) and paging flags (``memory.detector.PagingDetector``).
The CLI and the GUI worker both consume ``Session.stream``.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from .adaptive import CostModelKPolicy
from .busy import BusyDetector
from .controls import K_MAX, Controls
from .measurement import Measurement
from .memory.detector import PagingDetector
from .memory.sampler import MemorySampler
from .pair import ModelPair
from .records import BaselineRecord, IterationRecord, RunResult
from .speculative import DecodeOptions, Decoder


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


class Session:
    def __init__(self, pair: ModelPair, controls: Controls | None = None, options: SessionOptions | None = None):
        self.pair = pair
        self.controls = controls or Controls()
        self.options = options or SessionOptions()
        self.measurement = Measurement(window=self.options.alpha_window)
        self.k_policy = CostModelKPolicy(self.measurement)
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

    def stream(self, prompt_ids: list[int]) -> Generator[IterationRecord | BaselineRecord, None, None]:
        if self.sampler is not None:
            self.sampler.start()
        try:
            for event in self.decoder.stream(
                prompt_ids, self.controls, self.decode_options(), plain=self.options.plain
            ):
                if isinstance(event, BaselineRecord):
                    self.measurement.observe_baseline(event)
                    self.baselines.append(event)
                    yield event
                    continue
                if self.sampler is not None:
                    event.memory = self.sampler.sample_near(event.t_start_s, event.t_end_s)
                # A preempted step is slow for a reason that is not memory: name it, and do not call it paging.
                busy = self.busy.observe(event)
                paging = self.detector.observe(event)
                event.flags = busy or paging
                self.measurement.enrich(event)
                self.records.append(event)
                yield event
        finally:
            if self.sampler is not None:
                self.sampler.stop()

    def run(self, prompt_ids: list[int]) -> RunResult:
        for _ in self.stream(prompt_ids):
            pass
        assert self.result is not None
        return self.result
