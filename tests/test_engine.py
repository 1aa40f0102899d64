"""The speculative loop on small random models: exactness, caches, EOS/limits and live controls."""

from __future__ import annotations

import gc
import queue
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from specscope.core.controls import Controls
from specscope.core.engine import speculative
from specscope.core.engine.drafters.base import Drafter, Proposal
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.sampling import processed_probs
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.records import ControlValues, IterationRecord, TokenStatus
from tests.models import perturbed, tiny_model
from tests.stats import chi_square_pvalue, exact_first_two

V = 64
PROMPTS = [[1, 2, 3], [5], [7, 8, 9, 10, 11, 12], [40, 41, 40, 41]]


@pytest.fixture(scope="module")
def target():
    return tiny_model(0, vocab_size=V, logit_scale=3.0)


def _drafts(target):
    return {
        "perfect": target,
        "useless": tiny_model(1, vocab_size=V, logit_scale=3.0),
        "partial": perturbed(target, 0.03),
    }


_plain_outputs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plain(target, prompt, n=30) -> list[int]:
    """Plain greedy output, decoded once per model, prompt and length: the tests compare dozens of speculative
    runs with the same few plain ones (greedy decoding is deterministic, so the first decode is the answer)."""
    outputs = _plain_outputs.setdefault(target, {})
    key = (tuple(prompt), n)
    if key not in outputs:
        outputs[key] = Decoder(target, V).run(prompt, options=DecodeOptions(max_new_tokens=n), plain=True).token_ids
    return list(outputs[key])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_greedy_speculation_equals_plain_greedy(target, k: int) -> None:
    alphas = {}
    for name, draft in _drafts(target).items():
        drafted = accepted = 0
        for prompt in PROMPTS:
            dec = Decoder(target, V, drafter=ModelDrafter(draft, V))
            res = dec.run(prompt, Controls(ControlValues(k=k)), DecodeOptions(max_new_tokens=30))
            assert res.token_ids == _plain(target, prompt), (name, k, prompt)
            drafted += res.n_drafted
            accepted += res.n_accepted
        alphas[name] = accepted / drafted
    # The three drafts really are perfect, useless and in between, so all cache paths were exercised.
    assert alphas["perfect"] == 1.0
    assert alphas["useless"] < 0.15
    assert 0.1 < alphas["partial"] < 0.95


def test_statuses_follow_the_rule(target) -> None:
    dec = Decoder(target, V, drafter=ModelDrafter(target, V))
    res = dec.run([1, 2, 3], Controls(ControlValues(k=3)), DecodeOptions(max_new_tokens=17))
    # 17 = 4 iterations of 3 + 1, then one token of room: that last iteration proposes nothing, and its token
    # is the target's own plain step, not a bonus.
    assert {t.status for r in res.iterations for t in r.tokens} == {
        TokenStatus.ACCEPTED, TokenStatus.BONUS, TokenStatus.TARGET}
    for r in res.iterations:
        assert (r.n_drafted == 0) == any(t.status is TokenStatus.TARGET for t in r.tokens)
        assert (r.n_drafted == 0) == (r.tokens[-1].status is TokenStatus.TARGET)
    useless = Decoder(target, V, drafter=ModelDrafter(tiny_model(1, vocab_size=V, logit_scale=3.0), V))
    res = useless.run([1, 2, 3], Controls(ControlValues(k=3)), DecodeOptions(max_new_tokens=17))
    for r in res.iterations:
        committed = [t.token_id for t in r.tokens if t.status.committed]
        assert r.n_emitted == len(committed)
        statuses = [t.status for t in r.tokens]
        if r.n_accepted < r.n_drafted:  # a rejection: accepted*, rejected, correction
            assert statuses[-2:] == [TokenStatus.REJECTED, TokenStatus.CORRECTION]
    # committed tokens in the records are exactly the output, in order
    assert [t.token_id for r in res.iterations for t in r.tokens if t.status.committed] == res.token_ids


def test_every_top5_alternative_carries_its_text(target) -> None:
    """The worker decodes the alternatives where the tokenizer is: a remote client or a replay cannot."""
    decoded: list[int] = []

    def token_text(i: int) -> str:
        decoded.append(i)
        return f"<w{i}>"

    useless = ModelDrafter(tiny_model(1, vocab_size=V, logit_scale=3.0), V)
    for plain in (True, False):
        decoded.clear()
        dec = Decoder(target, V, drafter=None if plain else useless, token_text=token_text)
        res = dec.run([1, 2, 3], Controls(ControlValues(k=3)), DecodeOptions(max_new_tokens=12), plain=plain)
        tokens = [t for r in res.iterations for t in r.tokens]
        assert tokens and all(len(t.top5) == 5 for t in tokens)
        assert {t.status for t in tokens} >= ({TokenStatus.PLAIN} if plain else {TokenStatus.REJECTED})
        for t in tokens:
            assert t.top5_text == [f"<w{i}>" for i, _ in t.top5]
        assert len(decoded) == len(set(decoded))  # each id decoded once however often it is an alternative


def test_eos_inside_a_proposal_ends_the_run_at_eos(target) -> None:
    plain = _plain(target, [1, 2, 3], 30)
    eos = plain[7]  # a token the target really emits; the run must end right after its first occurrence
    first = plain.index(eos)
    dec = Decoder(target, V, drafter=ModelDrafter(target, V))
    opts = DecodeOptions(max_new_tokens=30, eos_token_ids=frozenset({eos}))
    res = dec.run([1, 2, 3], Controls(ControlValues(k=8)), opts)
    assert res.token_ids == plain[: first + 1]
    assert res.finish_reason == "eos"
    assert res.iterations[-1].finished


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_max_new_tokens_is_exact(target, n: int) -> None:
    dec = Decoder(target, V, drafter=ModelDrafter(target, V))
    res = dec.run([1, 2, 3], Controls(ControlValues(k=4)), DecodeOptions(max_new_tokens=n))
    assert res.token_ids == _plain(target, [1, 2, 3], n)
    assert len(res.token_ids) == n


def test_records_carry_timings_and_context(target) -> None:
    dec = Decoder(target, V, drafter=ModelDrafter(perturbed(target, 0.03), V))
    res = dec.run([1, 2, 3], Controls(ControlValues(k=4)), DecodeOptions(max_new_tokens=20))
    for r in res.iterations:
        assert r.draft_ms > 0 and r.verify_ms > 0 and r.rollback_ms >= 0
        assert r.iteration_ms >= r.draft_ms + r.verify_ms + r.rollback_ms
        assert r.t_end_s >= r.t_start_s
    assert res.iterations[-1].context_len == 3 + 20
    assert [r.generated_len for r in res.iterations] == list(np.cumsum([r.n_emitted for r in res.iterations]))


# ---- sampling: the whole loop keeps the target's distribution ---------------------------------------
# The rule itself is checked exactly in test_acceptance.py. Here: the loop hands the rule the distributions
# both models really sample from (exact, at every call), and one sampled end-to-end check of the whole loop.
V8 = 8
SAMPLED_RUNS = 1000
PLAIN_SAMPLING = ControlValues(k=2, temperature=1.0)
PROCESSED_SAMPLING = ControlValues(k=3, temperature=0.6, top_p=0.95)


def _pair8():
    return tiny_model(10, vocab_size=V8, logit_scale=1.0), tiny_model(11, vocab_size=V8, logit_scale=1.0)


def _exact_first_two(target, prompt, controls: ControlValues) -> np.ndarray:
    return exact_first_two(target, prompt, controls, V8)


def _loop_counts(target, drafter, prompt, controls: ControlValues, runs: int) -> np.ndarray:
    dec = Decoder(target, V8, drafter=drafter)
    counts = np.zeros((V8, V8))
    c = Controls(controls)
    for seed in range(runs):
        ids = dec.run(prompt, c, DecodeOptions(max_new_tokens=2, seed=seed, record_tokens=False)).token_ids
        counts[ids[0], ids[1]] += 1
    return counts


# Power, from the exact distributions (scripts/sampled_loop_power.py; chi-square at the 1e-3 level with cells
# pooled as tests/stats.py pools them): with 1,000 runs this test fails with probability 1.000 when
# temperature/top-p reach q but not p, and 0.990 when the drafter samples from the processed q but reports its
# raw q (500 runs: 1.000 and 0.703; the 6,000 runs it had before: 1.000 and 1.000). A correct loop fails it
# with probability 1e-3 (the seeds are fixed, so a given build passes or fails every time). The exact check
# below, at every call of the rule, catches both bugs with certainty; this one covers the loop as a whole.
# The run with temperature 1 is in the full tier only (`slow`): the processed run covers more.
@pytest.mark.parametrize("controls", [pytest.param(PLAIN_SAMPLING, marks=pytest.mark.slow), PROCESSED_SAMPLING],
                         ids=["plain", "processed"])
def test_sampling_loop_keeps_target_joint_distribution(controls: ControlValues) -> None:
    target, draft = _pair8()
    prompt = [1, 2, 3]
    counts = _loop_counts(target, ModelDrafter(draft, V8), prompt, controls, SAMPLED_RUNS)
    assert chi_square_pvalue(counts, _exact_first_two(target, prompt, controls)) > 1e-3


class RawQReport(Drafter):
    """A bug on purpose: proposals are sampled from the processed q, but the loop is told the raw q."""

    name = "raw-q"

    def __init__(self, inner: ModelDrafter):
        self.inner = inner

    def reset(self, prompt_ids):
        self.inner.reset(prompt_ids)

    def propose(self, context_ids, k, controls, generator) -> Proposal:
        prop = self.inner.propose(context_ids, k, controls, generator)
        with torch.no_grad():
            seq = torch.tensor([[*context_ids, *prop.tokens[:-1]]])
            logits = self.inner.model(seq).logits[0, -len(prop.tokens):]
        raw = processed_probs(logits, ControlValues())  # temperature 1, no top-p: the unprocessed q
        return Proposal(prop.tokens, raw, [float(raw[i, x]) for i, x in enumerate(prop.tokens)])

    def rollback(self, committed_ids):
        self.inner.rollback(committed_ids)


def _rule_inputs_off_by(monkeypatch, drafter: Drafter, controls: ControlValues, runs: int = 6) -> tuple[float, float]:
    """Run the loop and compare, at every call of the acceptance rule, the p rows and q rows it was handed with
    each model's processed distributions recomputed from scratch at the same contexts. Returns the largest
    difference on the target's side and on the draft's side."""
    import specscope.core.engine.speculative as loop_module

    target, draft = _pair8()
    calls: list[tuple[list[int], torch.Tensor | None, torch.Tensor, tuple[int, int]]] = []
    rule = loop_module.accept_sample

    def recording(proposals, q, p_rows, generator):
        result = rule(proposals, q, p_rows, generator)
        calls.append((list(proposals), None if q is None else q.clone(), p_rows.clone(), result))
        return result

    monkeypatch.setattr(loop_module, "accept_sample", recording)
    prompt = [1, 2, 3]
    worst_p = worst_q = 0.0
    for seed in range(runs):
        calls.clear()
        Decoder(target, V8, drafter=drafter).run(prompt, Controls(controls),
                                                 DecodeOptions(max_new_tokens=12, seed=seed, record_tokens=False))
        assert calls, "the loop never called the acceptance rule"
        context = list(prompt)
        for proposals, q, p_rows, (n_accepted, next_token) in calls:
            seq = torch.tensor([[*context, *proposals]])
            with torch.no_grad():
                p_expected = processed_probs(target(seq).logits[0, len(context) - 1:], controls)
                worst_p = max(worst_p, float((p_rows - p_expected).abs().max()))
                if proposals:
                    assert q is not None
                    q_expected = processed_probs(draft(seq).logits[0, len(context) - 1:-1], controls)
                    worst_q = max(worst_q, float((q[: len(proposals)] - q_expected).abs().max()))
            context += [*proposals[:n_accepted], next_token]
    return worst_p, worst_q


@pytest.mark.parametrize("controls", [PLAIN_SAMPLING, PROCESSED_SAMPLING], ids=["plain", "processed"])
def test_the_rule_is_handed_what_each_model_samples_from(monkeypatch, controls: ControlValues) -> None:
    """Exact where the sampled test above has power: p and q at every call are the processed distributions."""
    worst_p, worst_q = _rule_inputs_off_by(monkeypatch, ModelDrafter(_pair8()[1], V8), controls)
    assert worst_p < 1e-4 and worst_q < 1e-4, (worst_p, worst_q)


@pytest.mark.parametrize("side", ["target", "draft"])
def test_processing_only_one_model_is_detected(monkeypatch, side: str) -> None:
    """The same check must fail when temperature/top-p reach one model's distribution but not the other's."""
    import specscope.core.engine.speculative as loop_module

    drafter: Drafter = ModelDrafter(_pair8()[1], V8)
    if side == "target":  # p computed from raw logits while q is processed
        monkeypatch.setattr(loop_module, "processed_probs", lambda logits, c: processed_probs(logits, ControlValues()))
    else:  # q processed for sampling but the ratio sees the raw q
        drafter = RawQReport(drafter)  # type: ignore[arg-type]
    worst_p, worst_q = _rule_inputs_off_by(monkeypatch, drafter, PROCESSED_SAMPLING)
    off, exact = (worst_p, worst_q) if side == "target" else (worst_q, worst_p)
    assert off > 0.01 and exact < 1e-4, (worst_p, worst_q)


# ---- live controls from another thread --------------------------------------------------------------
def _run_in_thread(dec: Decoder, controls: Controls, n: int, maxsize: int = 0):
    out: queue.Queue = queue.Queue(maxsize=maxsize)

    def work() -> None:
        for ev in dec.stream([1, 2, 3], controls, DecodeOptions(max_new_tokens=n)):
            out.put(ev)
        out.put(None)

    th = threading.Thread(target=work, daemon=True)
    th.start()
    return th, out


def test_k_changed_mid_run_shows_in_records(target) -> None:
    controls = Controls(ControlValues(k=4))
    dec = Decoder(target, V, drafter=ModelDrafter(perturbed(target, 0.03), V))
    th, out = _run_in_thread(dec, controls, 200)
    seen: list[IterationRecord] = []
    while (ev := out.get(timeout=60)) is not None:
        if not isinstance(ev, IterationRecord):
            continue  # the control change itself, announced before the first iteration it applies to
        seen.append(ev)
        if len(seen) == 3:
            controls.update(k=2)
    th.join(timeout=60)
    ks = [r.controls.k for r in seen]
    switch = ks.index(2)
    assert switch >= 3 and set(ks[:switch]) == {4} and set(ks[switch:]) == {2}
    assert all(r.n_drafted <= r.controls.k for r in seen)
    assert dec.result is not None and dec.result.token_ids == _plain(target, [1, 2, 3], 200)


def test_pause_resume_and_stop_return_tokens_so_far(target) -> None:
    controls = Controls(ControlValues(k=2))
    dec = Decoder(target, V, drafter=ModelDrafter(perturbed(target, 0.03), V))
    # maxsize=1: the loop can run at most two records ahead of this reader (one queued, one blocked in put).
    th, out = _run_in_thread(dec, controls, 400, maxsize=1)
    seen = []
    while (ev := out.get(timeout=60)) is not None:
        seen.append(ev)
        if len(seen) == 2:
            controls.pause()
            # Up to two iterations may already be past the boundary; after them the loop must block.
            extra = []
            try:
                while True:
                    extra.append(out.get(timeout=0.5))
            except queue.Empty:
                pass
            assert len(extra) <= 2 and controls.paused
            seen.extend(extra)
            controls.resume()
        if len(seen) == 5:
            controls.stop()
    th.join(timeout=60)
    res = dec.result
    assert res is not None and res.finish_reason == "stop"
    assert 0 < len(res.token_ids) < 400
    assert res.token_ids == _plain(target, [1, 2, 3], len(res.token_ids))
    assert res.token_ids == [t.token_id for r in res.iterations for t in r.tokens if t.status.committed]


class _Interrupt(BaseException):
    """What a SIGINT handler raises (the CLI's ``Interrupted`` is a BaseException too)."""


# The loop's own files (wherever the package is installed: an editable install's paths do not contain
# "specscope"), and torch's grad-mode wrappers around the steps.
_WATCHED = (str(Path(speculative.__file__).parent), "torch/utils/_contextlib.py", "torch/autograd/grad_mode.py")


def _consume_with_interrupt_at(decoder: Decoder, prompt: list[int], at: int | None) -> tuple[int, BaseException | None]:
    """Consume a stream like the CLI does, raising an interrupt at the ``at``-th traced line of the loop's own
    frames, of torch's grad-mode wrappers, and of this consumer. Returns the lines seen and what was raised."""
    seen = 0

    def local(frame, event, arg):
        nonlocal seen
        if event in ("call", "line"):
            seen += 1
            if seen == at:
                raise _Interrupt
        return local

    def watch(frame, event, arg):
        filename = frame.f_code.co_filename
        return local(frame, event, arg) if any(w in filename for w in _WATCHED) or filename == __file__ else None

    caught: BaseException | None = None
    stream = decoder.stream(prompt, Controls(ControlValues(k=2)), DecodeOptions(max_new_tokens=6, baseline_every=2))
    sys.settrace(watch)
    try:
        for _ in stream:
            pass
    except _Interrupt as exc:
        caught = exc  # held like the CLI holds it: its traceback keeps the frames it passed through alive
    finally:
        sys.settrace(None)
        stream.close()
    return seen, caught


def _interrupt_sweep(target, points: int) -> int:
    """Interrupt a decode at ``points`` lines spread over every line it runs; asserts the result is kept at each
    one that landed, and returns how many landed."""
    drafter = ModelDrafter(perturbed(target, 0.03), V)
    total, caught = _consume_with_interrupt_at(Decoder(target, V, drafter=drafter), [1, 2, 3], None)
    assert caught is None and total > 100
    landed = 0
    for at in np.linspace(1, total - 1, points).astype(int):
        # An interrupt inside torch's inference-mode entry leaves its C++ guard in the held traceback's frames;
        # the guard restores the grad mode when it is collected, which without this would be at some allocation
        # in the next run (a frame of that run then runs with grad on). Collect it between runs, as a process
        # that handles the interrupt and starts over does before decoding again.
        caught = None
        gc.collect()
        decoder = Decoder(target, V, drafter=drafter)
        _, caught = _consume_with_interrupt_at(decoder, [1, 2, 3], int(at))
        if caught is None:
            continue  # this line ran only in the traced-through run: nothing was interrupted
        landed += 1
        result = decoder.result
        assert result is not None, f"the result was lost when the interrupt landed at line {at} of {total}"
        assert result.token_ids == [t.token_id for r in result.iterations for t in r.tokens if t.status.committed]
    return landed


def test_an_interrupt_at_lines_spread_over_the_loop_keeps_the_result(target) -> None:
    """A signal handler raises at whatever line runs when the signal comes. Wherever that is (the loop, a step,
    the grad-mode wrapper around it, the consumer), closing the stream leaves what was decoded in ``result``.
    The fast tier's sweep: 24 lines spread over the run (each traced run costs seconds)."""
    assert _interrupt_sweep(target, 24) > 18


@pytest.mark.slow
def test_an_interrupt_anywhere_in_the_loop_keeps_the_result(target) -> None:
    """The same at 120 lines spread over the run (about 2-3 minutes of traced decoding: the full tier's)."""
    assert _interrupt_sweep(target, 120) > 100
