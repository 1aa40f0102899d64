"""GPU check for memory residency and paging detection (run by hand on a CUDA machine; not a pytest file).

    python tests/gpu/gpu_paging_check.py            # on CUDA: about a minute, must finish within 5
    python tests/gpu/gpu_paging_check.py --dry-run  # on CPU: tiny models, exercises every code path

It builds a random Llama pair from configs (no downloads: a ~350M-parameter target and a ~60M draft in
fp16), runs speculative decoding normally, then again with the draft's weights offloaded to host memory by
accelerate's ``cpu_offload`` (copied over PCIe on every step: the reference texts' paging symptom). It
checks that (1) the loop's phase times cover the GPU work (CUDA events around each forward), (2) NVML
reports device memory and more PCIe RX while offloaded, (3) the paging detector flags the offloaded
iterations with a "draft step ... paging over PCIe" sentence and leaves the normal run alone. Then, through
the session as the app and the CLI run it: (4) the paging drill moves the draft's layers to host memory
with accelerate's CPU offload (to disk on the dry run) and back: its iterations are flagged with the
streaming sentence and no others, and the greedy tokens equal a run without the drill; (5) a target loaded
under a GPU memory cap (accelerate's ``infer_auto_device_map`` + ``dispatch_model``, as ``device_map="auto"``
with ``max_memory`` does) is flagged from iteration 0 against the measured device bandwidth. Prints a short
report; exits 1 when a check fails, 2 when it cannot run (no CUDA without --dry-run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate import cpu_offload
from transformers import LlamaConfig, LlamaForCausalLM

from specscope.core.controls import Controls
from specscope.core.drill_spec import DrillSpec
from specscope.core.engine.drafters.lookup import PromptLookupDrafter
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.pair import LoadedModel, ModelPair
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.memory.detector import PagingDetector
from specscope.core.memory.residency import format_residency, model_residency
from specscope.core.memory.sampler import MemorySampler
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.session import Session, SessionOptions

TIME_LIMIT_S = 270.0  # leave margin under the 5-minute budget


def llama(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=int(hidden * 2.75),
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                       max_position_embeddings=2048, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                       tie_word_embeddings=False)


def build(config: LlamaConfig, device: torch.device, dtype: torch.dtype, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    with device:
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval()


class ForwardTimer:
    """CUDA events around every forward of a model (pre/post hooks): the GPU time of each pass."""

    def __init__(self, model: torch.nn.Module, enabled: bool):
        self.enabled = enabled
        self.pending: list[tuple[Any, Any]] = []
        self._start: Any = None
        if enabled:
            model.register_forward_pre_hook(self._pre)
            model.register_forward_hook(self._post)

    def _pre(self, *_: Any) -> None:
        self._start = torch.cuda.Event(enable_timing=True)
        self._start.record()

    def _post(self, *_: Any) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.pending.append((self._start, end))

    def take_ms(self) -> float | None:
        """GPU ms of the forwards since the last call (None when timing is off)."""
        if not self.enabled:
            return None
        torch.cuda.synchronize()
        total = sum(s.elapsed_time(e) for s, e in self.pending)
        self.pending.clear()
        return total


@dataclass
class Phase:
    name: str
    records: list[IterationRecord] = field(default_factory=list)
    flags: dict[int, list[str]] = field(default_factory=dict)
    verify_gpu_ms: list[float] = field(default_factory=list)
    draft_gpu_ms: list[float] = field(default_factory=list)
    residency: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_phase(name: str, target: Any, draft: Any, device: torch.device, detector: PagingDetector,
              tokens: int, timers: tuple[ForwardTimer, ForwardTimer], period_s: float,
              observe: bool = True) -> Phase:
    phase = Phase(name)
    t0 = time.perf_counter()
    vocab = target.config.vocab_size
    drafter = ModelDrafter(draft, vocab, device=device)  # offloaded params sit on meta: say where it runs
    decoder = Decoder(target, vocab, drafter=drafter)
    sampler = MemorySampler(period_s=period_s, models={"target": target, "draft": draft},
                            caches={"draft": lambda: drafter.cache, "target": lambda: decoder.target.cache},
                            expected_devices={"target": str(device), "draft": str(device)})
    phase.residency = [format_residency(n, r) for n, r in
                       (("target", model_residency(target, device, "target")),
                        ("draft", model_residency(draft, device, "draft")))]
    controls = Controls(ControlValues(k=4))
    prompt = list(range(1, 33))
    tv, td = timers
    tv.take_ms(), td.take_ms()
    sampler.start()
    try:
        for event in decoder.stream(prompt, controls, DecodeOptions(max_new_tokens=tokens, seed=0)):
            if not isinstance(event, IterationRecord):
                continue
            verify_gpu, draft_gpu = tv.take_ms(), td.take_ms()
            event.memory = sampler.sample_near(event.t_start_s, event.t_end_s)
            if observe:
                event.flags = detector.observe(event)
                if event.flags:
                    phase.flags[event.iteration] = event.flags
            phase.records.append(event)
            if verify_gpu is not None and draft_gpu is not None:
                phase.verify_gpu_ms.append(verify_gpu)
                phase.draft_gpu_ms.append(draft_gpu)
    finally:
        sampler.stop()
    phase.seconds = time.perf_counter() - t0
    return phase


class IdTokenizer:
    """Token ids as text: all the session needs from a tokenizer here."""

    chat_template = None

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return " ".join(str(i) for i in ids)


def make_pair(target: Any, draft: Any | None, device: torch.device, dtype: torch.dtype) -> ModelPair:
    vocab = target.config.vocab_size
    drafter: Any = ModelDrafter(draft, vocab, device) if draft is not None else PromptLookupDrafter(3, 4)
    return ModelPair(target=LoadedModel(target, "gpu-check-target", device, dtype), tokenizer=IdTokenizer(),
                     drafter=drafter, drafter_kind="model" if draft is not None else "lookup",
                     draft=LoadedModel(draft, "gpu-check-draft", device, dtype) if draft is not None else None,
                     vocab_size=vocab)


PROMPT = [*range(1, 33)]
DRILL_START, DRILL_END = 8, 24


def session_run(pair: ModelPair, tokens: int, drill: DrillSpec | None = None) -> Session:
    session = Session(pair, Controls(ControlValues(k=4)), SessionOptions(
        max_new_tokens=tokens, seed=0, baseline_every=0, memory_period_s=0.05, drill=drill))
    session.run(PROMPT)
    return session


def paging(flags: list[str]) -> list[str]:
    return [f for f in flags if "streamed" in f or "likely paging" in f]


def drill_checks(rep: Report, pair: ModelPair, tokens: int, cuda: bool) -> None:
    """(4) the drill on the draft, through the session: flagged in the drill only; tokens unchanged."""
    quiet = session_run(pair, tokens)
    drilled = session_run(pair, tokens, DrillSpec("draft", None, DRILL_START, DRILL_END))
    place = "cpu" if cuda else "disk"
    events = [(e.kind, e.iterations_done, e.place, e.error) for e in drilled.drill_events]
    rep.check(events == [("start", DRILL_START, place, ""), ("end", DRILL_END, place, "")],
              f"drill events {events}")
    assert quiet.result is not None and drilled.result is not None
    rep.check(quiet.result.token_ids == drilled.result.token_ids, "greedy tokens identical with and without the drill")
    inside = [r for r in drilled.records if DRILL_START <= r.iteration < DRILL_END and r.n_drafted]
    outside = [r for r in drilled.records if not DRILL_START <= r.iteration < DRILL_END]
    hit = [r for r in inside[1:] if any(f.startswith("draft: ") for f in r.flags)]
    rep.check(len(hit) >= 0.9 * max(1, len(inside) - 1),
              f"drill: {len(hit)}/{len(inside) - 1} draft iterations after the first flagged")
    wrong = [f for r in outside + quiet.records for f in paging(r.flags)]
    rep.check(not wrong, f"no paging flags outside the drill ({len(wrong)})")
    first = next((f for r in inside for f in r.flags if f.startswith("draft: ")), "")
    print(f"first drill flag: {first}")
    where = "host memory" if cuda else "disk"
    rep.check(f"streamed from {where}" in first, f"the drill's sentence names {where}")
    steps_in = [r.draft_step_ms for r in inside if r.draft_step_ms is not None]
    steps_out = [r.draft_step_ms for r in quiet.records if r.draft_step_ms is not None]
    rep.note(f"draft step in the drill {median(steps_in):.2f} ms vs {median(steps_out):.2f} ms without")
    if cuda:
        rx_in = median([r.memory.get("pcie0_rx_bytes_per_s", 0.0) for r in inside])
        rx_out = median([r.memory.get("pcie0_rx_bytes_per_s", 0.0) for r in quiet.records])
        rep.check(rx_in > 3 * max(rx_out, 1e6), f"PCIe RX in the drill {rx_in / 1e9:.2f} GB/s vs "
                                                f"{rx_out / 1e9:.3f} GB/s without")


def capped_checks(rep: Report, config: LlamaConfig, device: torch.device, dtype: torch.dtype, tokens: int,
                  cuda: bool) -> None:
    """(5) a target loaded with device_map="auto" under a memory cap is flagged from its first iteration."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        model = build(config, torch.device("cpu"), dtype, 0)
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        model.save_pretrained(f"{folder}/model")
        del model
        cap: dict[Any, Any] = ({0: int(size * 0.3), "cpu": int(size * 4)} if cuda
                               else {"cpu": int(size * 0.3)})
        model = LlamaForCausalLM.from_pretrained(f"{folder}/model", dtype=dtype, device_map="auto",
                                                 max_memory=cap, offload_folder=f"{folder}/offload").eval()
        residency = model_residency(model, device, "target")
        rep.note(f"capped target: {format_residency('target', residency)}")
        rep.check(residency.offloaded_bytes > 0.3 * residency.param_bytes, "the cap offloaded most weights")
        session = session_run(make_pair(model, None, device, dtype), max(8, tokens // 4))
    first = session.records[0].flags if session.records else []
    print(f"capped target, iteration 0: {first}")
    rep.check(any(f.startswith("target: ") and "effective against" in f for f in first),
              "capped target flagged from iteration 0 against the measured bandwidth")


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def mem_median(phase: Phase, key: str) -> float:
    return median([r.memory[key] for r in phase.records if key in r.memory])


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        if not ok:
            self.failures.append(what)

    def note(self, what: str) -> None:
        print(f"  [..] {what}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny models: exercise the code paths only")
    ap.add_argument("--tokens", type=int, default=0, help="new tokens per phase (default 160 GPU, 24 dry)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print("gpu_paging_check: no CUDA device (use --dry-run to exercise the script on CPU)")
        return 2
    device = torch.device("cuda:0" if cuda else "cpu")
    dtype = torch.float16 if cuda else torch.float32
    tokens = args.tokens or (160 if cuda else 24)
    if cuda:
        t_cfg, d_cfg = llama(32000, 1024, 24, 16, 8), llama(32000, 512, 8, 8, 4)
    else:
        t_cfg, d_cfg = llama(256, 64, 2, 4, 2), llama(256, 32, 2, 4, 2)
    target, draft = build(t_cfg, device, dtype, 0), build(d_cfg, device, dtype, 1)
    n_t = sum(p.numel() for p in target.parameters()) / 1e6
    n_d = sum(p.numel() for p in draft.parameters()) / 1e6
    print(f"gpu_paging_check on {torch.cuda.get_device_name(0) if cuda else 'CPU (dry run)'}: "
          f"target {n_t:.0f}M, draft {n_d:.0f}M params, {dtype}, {tokens} tokens per phase")
    timers = (ForwardTimer(target, cuda), ForwardTimer(draft, cuda))
    detector = PagingDetector(factor=3.0)
    period = 0.05

    run_phase("warm-up", target, draft, device, detector, 16, timers, period, observe=False)
    normal = run_phase("normal", target, draft, device, detector, tokens, timers, period)
    rep = Report()
    print("drill (session):")
    drill_checks(rep, make_pair(target, draft, device, dtype), tokens, cuda)
    cpu_offload(draft, execution_device=device)  # weights to host; hooks copy them in on each forward
    offload = run_phase("offloaded", target, draft, device, detector, tokens, timers, period)
    print("memory cap (session):")
    capped_checks(rep, t_cfg, device, dtype, tokens, cuda)

    for phase in (normal, offload):
        steps = [r.draft_step_ms for r in phase.records if r.draft_step_ms is not None]
        print(f"{phase.name}: {len(phase.records)} iterations in {phase.seconds:.1f} s; draft step median "
              f"{median(steps):.2f} ms, verify median {median([r.verify_ms for r in phase.records]):.2f} ms; "
              f"{len(phase.flags)} flagged")
        for line in phase.residency:
            print(f"    {line}")
        if phase.records:
            keys = ("gpu0_free_bytes", "proc_gpu0_bytes", "torch_cuda0_allocated_bytes",
                    "pcie0_rx_bytes_per_s", "draft_kv_bytes", "sample_age_ms")
            print("    memory medians: " + ", ".join(f"{k}={mem_median(phase, k):.4g}" for k in keys))
    first = next(iter(offload.flags.values()), [""])[0]
    if first:
        print(f"first offloaded flag: {first}")

    print("checks:")
    rep.check(bool(normal.records) and bool(offload.records), "both phases produced iterations")
    for sentence in [s for fl in normal.flags.values() for s in fl][:3]:
        print(f"normal-run flag: {sentence}")
    if cuda:
        # a lone GC or scheduler pause may be flagged ("memory looks fine"); paging sentences may not
        paging = [s for fl in normal.flags.values() for s in fl if "likely" in s]
        rep.check(not paging and len(normal.flags) <= 0.03 * len(normal.records),
                  f"normal run not flagged for paging ({len(normal.flags)} flagged, {len(paging)} paging)")
        _gpu_checks(rep, normal, offload)
    else:
        rep.note(f"dry run: {len(normal.flags)} normal iterations flagged (CPU timings are not checked); "
                 "timing, NVML and detector checks need CUDA")
        rep.check(all("draft_weights_cpu_bytes" in r.memory for r in offload.records),
                  "offloaded draft residency reported in the memory samples")
    elapsed = time.perf_counter() - started
    rep.check(elapsed < TIME_LIMIT_S, f"finished in {elapsed:.0f} s (limit {TIME_LIMIT_S:.0f} s)")
    print("RESULT: " + ("PASS" if not rep.failures else f"FAIL ({len(rep.failures)} checks)"))
    return 0 if not rep.failures else 1


def _gpu_checks(rep: Report, normal: Phase, offload: Phase) -> None:
    # (1) phase timing covers the GPU work: wall >= GPU event time (minus event resolution) every pass
    for phase in (normal, offload):
        pairs: list[tuple[str, Callable[[IterationRecord], float], list[float]]] = [
            ("verify", lambda r: r.verify_ms, phase.verify_gpu_ms),
            ("draft", lambda r: r.draft_ms, phase.draft_gpu_ms),
        ]
        for what, wall_of, gpu in pairs:
            ratios = [wall_of(r) / g for r, g in zip(phase.records, gpu, strict=False) if g > 0.05]
            covered = sum(x >= 0.9 for x in ratios) / max(1, len(ratios))
            rep.check(covered >= 0.95 and median(ratios) < 3.0,
                      f"{phase.name} {what}: wall/GPU-event median {median(ratios):.2f}, "
                      f"{covered:.0%} of passes have wall >= 0.9 x GPU time")
    # (2) NVML: memory and PCIe traffic
    nvml_ok = all(r.memory.get("nvml_available") == 1.0 for r in normal.records + offload.records)
    rep.check(nvml_ok, "NVML available in every sample")
    total = mem_median(normal, "gpu0_total_bytes")
    used = mem_median(normal, "gpu0_used_bytes")
    rep.check(total > 0 and used > 0, f"NVML device memory: {used / 1e9:.2f} of {total / 1e9:.1f} GB used")
    proc = mem_median(normal, "proc_gpu0_bytes")
    if proc > 0:
        rep.check(True, f"NVML sees this process on the GPU ({proc / 1e9:.2f} GB)")
    else:
        rep.note(f"NVML process memory {proc} (PID namespace of a container hides it: not a failure)")
    rx_normal = mem_median(normal, "pcie0_rx_bytes_per_s")
    rx_off = mem_median(offload, "pcie0_rx_bytes_per_s")
    rep.check(rx_off > 3 * max(rx_normal, 1e6) and rx_off > 1e8,
              f"PCIe RX while offloaded {rx_off / 1e9:.2f} GB/s vs normal {rx_normal / 1e9:.3f} GB/s")
    # (3) the detector flags the offloaded iterations with the right sentence
    flagged = len(offload.flags) / max(1, len(offload.records))
    rep.check(flagged >= 0.8, f"{flagged:.0%} of offloaded iterations flagged")
    sentences = [s for fl in offload.flags.values() for s in fl if s.startswith("draft step")]
    right = [s for s in sentences if "paging over PCIe" in s and "cpu" in s]
    rep.check(bool(sentences) and len(right) == len(sentences),
              f"{len(right)}/{len(sentences)} draft flags name cpu weights and paging over PCIe")


if __name__ == "__main__":
    sys.exit(main())
