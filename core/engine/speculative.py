"""The speculative loop and plain decoding, streaming one record per iteration.

Cache invariant (both loops): the committed sequence is ``ids`` (prompt + generated); the target's cache
holds ``ids[:-1]``. The last committed token was supplied by the target (or is the last prompt token) and
has not been through it yet, so it opens the next pass. A speculative pass feeds it plus the k proposals
and reads k+1 rows of logits; afterwards the cache is returned to the new ``ids[:-1]`` by the rules of
``rollback.py`` (a crop, a trim of recorded sliding-window rows, or a restored recurrent state plus a recompute
of the accepted tokens), inside the step's rollback time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

import torch
from transformers import DynamicCache, PreTrainedModel

from specscope.core.controls import K_MAX, Controls
from specscope.core.engine.acceptance import accept_greedy, accept_sample
from specscope.core.engine.drafters.base import Drafter, Proposal
from specscope.core.engine.rollback import CacheRollback
from specscope.core.engine.sampling import processed_probs, sample_from
from specscope.core.events import ControlChange, regime
from specscope.core.memory.residency import compute_device
from specscope.core.records import (
    PLAIN_MODE,
    SPECULATIVE_MODE,
    ControlValues,
    IterationRecord,
    RunResult,
    TokenRecord,
    TokenStatus,
)

try:
    import resource as _resource
except ImportError:  # Windows: CPU time without the preemption count
    _resource = None  # type: ignore[assignment]


class KPolicy(Protocol):
    """Chooses k for the next iteration (adaptive k). Shown every speculative record of the run."""

    def choose_k(self, k_max: int) -> int: ...

    def observe(self, record: IterationRecord) -> None: ...


@runtime_checkable
class ProposalLengthPolicy(Protocol):
    """A k policy that decides after the proposal is found (prompt lookup: the match is known, the tokens are
    free, only the verify pass costs): how many of the proposed tokens to keep."""

    def proposal_length(self, match_ngram: int, available: int) -> int: ...


def cpu_snapshot() -> tuple[float, int]:
    """(process CPU seconds over all threads, involuntary context switches so far): read at each end of a step
    so the busy-machine detector can tell a step that was preempted from one that waited for I/O."""
    if _resource is None:
        return time.process_time(), 0
    ru = _resource.getrusage(_resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, int(ru.ru_nivcsw)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so a phase's wall time is its real cost (CUDA and MPS run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@dataclass
class DecodeOptions:
    max_new_tokens: int = 128
    seed: int | None = None
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    record_tokens: bool = True  # per-token p, q and top-5; off only to measure instrumentation overhead
    # A baseline is ``baseline_steps`` real plain iterations (they commit their tokens), due after every
    # ``baseline_every`` speculative iterations (0 = on request only); one before the first speculative
    # iteration too with ``baseline_first``. ``baseline_due(since, tokens_left)``, asked once one is due, may put
    # it off (the session spaces baselines to keep their cost within a budget, core/measure/schedule.py).
    baseline_every: int = 0
    baseline_steps: int = 1
    baseline_first: bool = False
    baseline_due: Callable[[int, int], bool] | None = None
    # Before a speculative iteration: the k to run it at instead, to time a verify pass length never measured
    # (None = the k in use). The session bounds how often.
    explore_k: Callable[[int], int | None] | None = None
    context_window: int | None = None  # positions the models hold: decoding stops there ("context_window")


class TargetRunner:
    """The target model with its cache: forward passes, crops, and plain steps on the live context."""

    def __init__(self, model: PreTrainedModel, vocab_size: int):
        self.model = model
        self.vocab_size = vocab_size
        # where its forward runs: an offloaded model's first weights may sit on meta behind a hook
        self.device = compute_device(model, next(model.parameters()).device)
        self.cache = DynamicCache(config=model.config)
        self.rollback = CacheRollback(self.cache)

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.rollback = CacheRollback(self.cache)

    @property
    def cache_len(self) -> int:
        return int(self.cache.get_seq_length())

    def forward(self, ids: list[int], keep: int) -> torch.Tensor:
        """Run ``ids`` through the model (extending the cache); return the last ``keep`` rows of logits."""
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(inp, cache=self.cache, use_cache=True, logits_to_keep=keep)
        return out.logits[0, -keep:, : self.vocab_size]

    def forward_with_features(
        self, ids: list[int], keep: int, layers: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Like ``forward``, plus the hidden inputs of ``layers`` at every position fed: (len(ids), n*H).

        ``hidden_states[i]`` from transformers is the input of decoder layer i (0 = the embeddings), the
        tensor vLLM and SGLang capture for EAGLE-3.
        """
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(inp, cache=self.cache, use_cache=True, logits_to_keep=keep, output_hidden_states=True)
        features = torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)
        return out.logits[0, -keep:, : self.vocab_size], features

    def mark(self) -> None:
        """Before a pass whose tokens may be rejected: the cache may have to return to what it holds now."""
        self.rollback.mark(self.cache_len)

    def crop_to(self, committed_ids: list[int]) -> None:
        """Return the cache to ``committed_ids[:-1]`` (the loop's invariant) after a verify pass."""

        def refeed(start: int, end: int) -> None:
            self.forward(committed_ids[start:end], keep=1)

        self.rollback.crop_to(len(committed_ids) - 1, refeed)


class Decoder:
    """Runs plain or speculative decoding for one target (and optionally one drafter).

    ``stream`` is a generator of :class:`IterationRecord` and :class:`ControlChange`; after it ends (or is
    stopped through the controls, or closed) ``result`` holds the tokens generated so far.
    """

    def __init__(
        self,
        target: PreTrainedModel,
        vocab_size: int,
        drafter: Drafter | None = None,
        token_text: Callable[[int], str] | None = None,
        k_policy: KPolicy | None = None,
    ):
        self.target = TargetRunner(target, vocab_size)
        self.drafter = drafter
        self.vocab_size = vocab_size
        self._token_text = token_text or (lambda i: str(i))
        self._text_cache: dict[int, str] = {}
        self.k_policy = k_policy
        self.result: RunResult | None = None
        self.prefill_ms: float = 0.0
        self._draft_gen: torch.Generator | None = None

    # ---- helpers -------------------------------------------------------------------------------------
    def text(self, token_id: int) -> str:
        t = self._text_cache.get(token_id)
        if t is None:
            t = self._token_text(token_id)
            self._text_cache[token_id] = t
        return t

    def _sync(self) -> None:
        synchronize(self.target.device)
        if self.drafter is not None:
            dev = getattr(self.drafter, "device", None)
            if isinstance(dev, torch.device) and dev != self.target.device:
                synchronize(dev)

    @torch.inference_mode()
    def _prefill(self, prompt_ids: list[int]) -> None:
        t0 = time.perf_counter()
        self.target.reset()
        if self.drafter is not None:
            self.drafter.reset(prompt_ids)
        if len(prompt_ids) > 1:
            if self.drafter is not None and self.drafter.feature_layers:
                _, features = self.target.forward_with_features(prompt_ids[:-1], 1, self.drafter.feature_layers)
                self.drafter.observe_target_features(0, features)
            else:
                self.target.forward(prompt_ids[:-1], keep=1)
        self._sync()
        self.prefill_ms = (time.perf_counter() - t0) * 1000.0

    def _token_record(self, token_id: int, status: TokenStatus, position: int, p_row: torch.Tensor,
                      q: float | None = None) -> TokenRecord:
        """One token's record: p(x) from the target's processed row, and the row's top 5 with their texts
        (decoded here, where the tokenizer is, so a remote client or a replay can name every alternative)."""
        vals, idx = torch.topk(p_row, 5)
        top_ids = idx.tolist()
        return TokenRecord(token_id, self.text(token_id), status, position, p=float(p_row[token_id]), q=q,
                           top5=list(zip(top_ids, vals.tolist(), strict=True)),
                           top5_text=[self.text(i) for i in top_ids])

    def _choose(self, logits_row: torch.Tensor, controls: ControlValues, gen: torch.Generator | None) -> int:
        if controls.greedy:
            return int(torch.argmax(logits_row).item())
        return sample_from(processed_probs(logits_row.unsqueeze(0), controls)[0], gen)

    def _seeded_generators(self, seed: int | None) -> torch.Generator | None:
        """The target's generator for a seeded run (None unseeded); a draft on another device gets its own."""
        self._draft_gen = None
        if seed is None:
            return None
        gen = torch.Generator(device=self.target.device)
        gen.manual_seed(seed)
        draft_device = getattr(self.drafter, "device", None)
        if isinstance(draft_device, torch.device) and draft_device != self.target.device:
            # A generator only draws on its own device: the draft samples with its own, seeded too.
            self._draft_gen = torch.Generator(device=draft_device)
            self._draft_gen.manual_seed(seed + 1)
        return gen

    # ---- the loops -----------------------------------------------------------------------------------
    # The steps run in inference mode; the generator itself is not wrapped. torch's decorator turns a generator
    # into an outer one that enters the mode around each send, and an exception raised in that outer frame
    # (a SIGINT landing there) leaves this generator unclosed, so its ``finally`` never sets the result.
    def stream(
        self,
        prompt_ids: list[int],
        controls: Controls | None = None,
        options: DecodeOptions | None = None,
        plain: bool = False,
    ) -> Generator[IterationRecord | ControlChange, None, None]:
        """Iteration records in order, with a :class:`ControlChange` before the first iteration that runs
        under changed controls. Every target pass here commits tokens: a baseline is a few plain iterations.

        Bad arguments raise here, before anything runs. ``result`` holds an empty run from this call on, so an
        interrupt that lands before the loop's first line still leaves a result (with nothing decoded)."""
        if not prompt_ids:
            raise ValueError("the prompt is empty: at least one token is needed")
        if not plain and self.drafter is None:
            raise ValueError("speculative decoding needs a drafter (or pass plain=True)")
        opts = options or DecodeOptions()
        window_bound = False  # the context window, not max_new_tokens, ends the run
        if opts.context_window is not None:
            room = opts.context_window - len(prompt_ids)
            if room < 1:
                raise ValueError(f"the prompt ({len(prompt_ids):,} tokens) fills the model's context window "
                                 f"({opts.context_window:,} positions)")
            if room < opts.max_new_tokens:
                opts, window_bound = replace(opts, max_new_tokens=room), True
        self.result = RunResult(prompt_ids=list(prompt_ids), token_ids=[], text="", iterations=[],
                                finish_reason="max_new_tokens", elapsed_s=0.0)
        return self._loop(list(prompt_ids), controls or Controls(), opts, window_bound, plain)

    def _loop(
        self, prompt_ids: list[int], controls: Controls, opts: DecodeOptions, window_bound: bool, plain: bool,
    ) -> Generator[IterationRecord | ControlChange, None, None]:
        ids = list(prompt_ids)
        n_prompt = len(prompt_ids)
        records: list[IterationRecord] = []
        finish = "max_new_tokens"
        t_run = time.perf_counter()
        try:
            gen = self._seeded_generators(opts.seed)
            last_values: ControlValues | None = None
            baseline_left = 0  # plain steps still to run in the baseline under way
            since_baseline = 0  # speculative iterations since the last baseline
            gap = opts.baseline_every
            first_baseline_due = bool(opts.baseline_every and opts.baseline_first)  # before the first iteration
            self._prefill(prompt_ids)
            iteration = 0
            while len(ids) - n_prompt < opts.max_new_tokens:
                values = controls.checkpoint()
                if values is None:
                    finish = "stop"
                    break
                if last_values is not None and regime(values) != regime(last_values):
                    yield ControlChange(iteration, last_values, values, time.monotonic())
                    # the new segment's first block starts at once, bracketed by a baseline like every other
                    first_baseline_due = bool(opts.baseline_every)
                last_values = values
                if not plain and baseline_left == 0 and (
                    controls.take_baseline_request() or first_baseline_due
                    or (gap and since_baseline >= gap and (
                        opts.baseline_due is None
                        or opts.baseline_due(since_baseline, opts.max_new_tokens - (len(ids) - n_prompt))))
                ):
                    baseline_left, since_baseline, first_baseline_due = max(1, opts.baseline_steps), 0, False
                if plain or baseline_left:
                    rec = self._plain_step(ids, n_prompt, iteration, values, gen, opts, baseline=not plain)
                    if baseline_left:
                        baseline_left -= 1
                else:
                    rec = self._speculative_step(ids, n_prompt, iteration, values, gen, opts)
                    since_baseline += 1
                if window_bound and rec.finish_reason == "max_new_tokens":
                    rec.finish_reason = "context_window"
                records.append(rec)
                if self.k_policy is not None and rec.mode == SPECULATIVE_MODE:
                    self.k_policy.observe(rec)
                iteration += 1
                if rec.finished:
                    finish = rec.finish_reason
                    yield rec
                    break
                yield rec
        finally:
            # The tokens of the recorded iterations: an interrupt inside a step (after its tokens joined the
            # context, before its record did) leaves the result as consistent as the trace.
            gen_ids = ids[n_prompt:n_prompt + records[-1].generated_len] if records else []
            self.result = RunResult(
                prompt_ids=list(prompt_ids),
                token_ids=gen_ids,
                text="".join(self.text(t) for t in gen_ids),
                iterations=records,
                finish_reason=finish,
                elapsed_s=time.perf_counter() - t_run,
            )

    def run(self, prompt_ids: list[int], controls: Controls | None = None,
            options: DecodeOptions | None = None, plain: bool = False) -> RunResult:
        """Consume the stream; return the result."""
        for _ in self.stream(prompt_ids, controls, options, plain):
            pass
        assert self.result is not None
        return self.result

    def _finish_check(
        self, ids: list[int], n_prompt: int, new: list[int], opts: DecodeOptions
    ) -> tuple[list[int], str]:
        """Truncate newly committed tokens at EOS (kept) or at max_new_tokens."""
        for i, t in enumerate(new):
            if t in opts.eos_token_ids:
                return new[: i + 1], "eos"
        room = opts.max_new_tokens - (len(ids) - n_prompt)
        if len(new) >= room:
            return new[:room], "max_new_tokens"
        return new, ""

    @torch.inference_mode()
    def _plain_step(
        self,
        ids: list[int],
        n_prompt: int,
        iteration: int,
        values: ControlValues,
        gen: torch.Generator | None,
        opts: DecodeOptions,
        baseline: bool = False,
    ) -> IterationRecord:
        """One target step that commits its token. ``baseline``: a plain step inside a speculative run (the
        drafter sees the token as committed context; an EAGLE head gets the step's features)."""
        t_start = time.monotonic()
        cpu0, pre0 = cpu_snapshot()
        t0 = time.perf_counter()
        first_fed = self.target.cache_len
        features: torch.Tensor | None = None
        if baseline and self.drafter is not None and self.drafter.feature_layers:
            rows, features = self.target.forward_with_features(ids[first_fed:], 1, self.drafter.feature_layers)
            logits = rows[-1]
        else:
            logits = self.target.forward(ids[first_fed:], keep=1)[-1]
        token = self._choose(logits, values, gen)
        self._sync()
        t1 = time.perf_counter()
        tokens: list[TokenRecord] = []
        new, reason = self._finish_check(ids, n_prompt, [token], opts)
        if opts.record_tokens:
            probs = processed_probs(logits.unsqueeze(0), values)[0]
            status = TokenStatus.TARGET if baseline else TokenStatus.PLAIN
            tokens.append(self._token_record(token, status, len(ids) - n_prompt, probs))
        ids.extend(new)
        if features is not None and self.drafter is not None:
            self.drafter.observe_target_features(first_fed, features)
        t2 = time.perf_counter()
        cpu1, pre1 = cpu_snapshot()
        return IterationRecord(
            iteration=iteration, mode=PLAIN_MODE, drafter="none", controls=values, tokens=tokens,
            n_drafted=0, n_accepted=0, n_emitted=len(new), draft_ms=0.0,
            verify_ms=(t1 - t0) * 1000.0, rollback_ms=0.0, iteration_ms=(t2 - t0) * 1000.0,
            context_len=len(ids), generated_len=len(ids) - n_prompt, t_start_s=t_start,
            t_end_s=time.monotonic(), finished=bool(reason), finish_reason=reason,
            cpu_ms=(cpu1 - cpu0) * 1000.0, preempted=pre1 - pre0,
        )

    @torch.inference_mode()
    def _speculative_step(
        self,
        ids: list[int],
        n_prompt: int,
        iteration: int,
        values: ControlValues,
        gen: torch.Generator | None,
        opts: DecodeOptions,
    ) -> IterationRecord:
        assert self.drafter is not None
        note, explore = "", False
        if values.adaptive_k and self.k_policy is not None:
            values = replace(values, k=max(0, min(K_MAX, self.k_policy.choose_k(K_MAX))))
            note = str(getattr(self.k_policy, "note", ""))
        elif opts.explore_k is not None:
            other = opts.explore_k(values.k)
            if other is not None and other != values.k:
                note = f"exploring k={other} to time a verify pass of {other + 1} tokens never measured"
                values, explore = replace(values, k=other), True
        remaining = opts.max_new_tokens - (len(ids) - n_prompt)
        k = max(0, min(values.k, remaining - 1))  # never draft past max_new_tokens
        t_start = time.monotonic()
        cpu0, pre0 = cpu_snapshot()
        t0 = time.perf_counter()
        # 1. draft
        if k > 0:
            proposal = self.drafter.propose(ids, k, values, self._draft_gen or gen)
        else:
            proposal = Proposal(tokens=[], q_probs=None, q_token_probs=[])
        proposals = proposal.tokens[:k]
        if values.adaptive_k and isinstance(self.k_policy, ProposalLengthPolicy):
            keep = 0
            if proposals:
                keep = max(0, min(len(proposals),
                                  self.k_policy.proposal_length(proposal.match_ngram, len(proposals))))
            proposals = proposals[:keep]
            values = replace(values, k=keep)  # the record shows the k the policy chose
        k = len(proposals)
        self._sync()
        t1 = time.perf_counter()
        # the rollback point (a copy of any recurrent state) is rollback's cost, not the verify pass's
        self.target.mark()
        mark_s = time.perf_counter() - t1
        # 2. verify: the unseen committed token(s) plus all proposals in one pass -> k+1 rows
        first_fed = self.target.cache_len
        unseen = ids[first_fed:]
        features: torch.Tensor | None = None
        if self.drafter.feature_layers:
            rows, features = self.target.forward_with_features([*unseen, *proposals], k + 1,
                                                               self.drafter.feature_layers)
        else:
            rows = self.target.forward([*unseen, *proposals], keep=k + 1)
        p_rows: torch.Tensor | None = None
        if values.greedy:
            n_acc, next_token = accept_greedy(proposals, rows)
        else:
            p_rows = processed_probs(rows, values)
            q = proposal.q_probs[:k].to(p_rows.device) if proposal.q_probs is not None else None
            n_acc, next_token = accept_sample(proposals, q, p_rows, gen)
        self._sync()
        t2 = time.perf_counter()
        # 3. commit and roll both caches back to the committed prefix
        committed = [*proposals[:n_acc], next_token]
        new, reason = self._finish_check(ids, n_prompt, committed, opts)
        position0 = len(ids) - n_prompt
        ids.extend(new)
        self.target.crop_to(ids)
        if features is not None:  # rows of the positions now committed (the target's cache holds ids[:-1])
            self.drafter.observe_target_features(first_fed, features[: len(ids) - 1 - first_fed])
        self.drafter.rollback(ids)
        self._sync()
        t3 = time.perf_counter()
        # 4. record (counted in iteration_ms: it is part of what the loop costs)
        tokens: list[TokenRecord] = []
        if opts.record_tokens and p_rows is None:
            # Greedy needs only arg-maxes to decide; p(x) for the records is computed here, outside verify_ms.
            p_rows = processed_probs(rows, values)
        if opts.record_tokens and p_rows is not None:
            for i, x in enumerate(proposals):
                if i < n_acc and i >= len(new):
                    break  # accepted but after EOS / the output limit: never emitted
                status = TokenStatus.ACCEPTED if i < n_acc else TokenStatus.REJECTED
                tokens.append(self._token_record(x, status, position0 + i, p_rows[i], q=proposal.q_token_probs[i]))
                if status is TokenStatus.REJECTED:
                    break
            if len(new) == len(committed):
                # k == 0 (nothing proposed: lookup found no match, adaptive k chose not to draft, or the
                # output limit left no room) is a plain step through the loop, neither a bonus nor a correction.
                status = (TokenStatus.TARGET if k == 0
                          else TokenStatus.BONUS if n_acc == k else TokenStatus.CORRECTION)
                tokens.append(self._token_record(next_token, status, position0 + n_acc, p_rows[n_acc]))
        t4 = time.perf_counter()
        cpu1, pre1 = cpu_snapshot()
        return IterationRecord(
            iteration=iteration, mode=SPECULATIVE_MODE, drafter=self.drafter.name, controls=values,
            tokens=tokens, n_drafted=k, n_accepted=n_acc, n_emitted=len(new),
            draft_ms=(t1 - t0) * 1000.0, verify_ms=(t2 - t1 - mark_s) * 1000.0,
            rollback_ms=(t3 - t2 + mark_s) * 1000.0,
            iteration_ms=(t4 - t0) * 1000.0, context_len=len(ids), generated_len=len(ids) - n_prompt,
            t_start_s=t_start, t_end_s=time.monotonic(), finished=bool(reason), finish_reason=reason,
            cpu_ms=(cpu1 - cpu0) * 1000.0, preempted=pre1 - pre0, explore=explore, k_note=note,
            match_len=proposal.match_ngram or None, expected_accepted=proposal.expected_accepted,
        )
