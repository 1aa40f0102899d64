"""Helpers for the app tests (not a test module): tiny pairs, a fake tokenizer, a window factory, records.

Pairs are built with ``core.engine.pair.ModelPair`` around tiny random models, so the tests skip model loading and
know the outcome: a draft that *is* the target is always accepted under greedy decoding; a draft whose LM
head is the target's negated head always proposes the target's least likely token, so it is always
rejected.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.pair import LoadedModel, ModelPair

from .models import tiny_model

VOCAB = 64


class FakeTokenizer:
    """Enough of a tokenizer for the loop and the GUI: ids <-> short readable pieces."""

    chat_template = None

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(f" t{i}" for i in ids)

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) % VOCAB for c in text[:32]] or [1]}


def _loaded(model: Any, name: str) -> LoadedModel:
    return LoadedModel(model=model, name=name, device=torch.device("cpu"), dtype=torch.float32)


def make_pair(kind: str = "perfect", seed: int = 0, fail_after: int | None = None) -> ModelPair:
    """'perfect' (draft = target), 'useless' (target with a negated LM head), 'partial' (another model),
    'lookup' (no draft model: prompt lookup)."""
    target = tiny_model(seed, vocab_size=VOCAB, logit_scale=4.0)
    if kind == "lookup":
        from specscope.core.engine.drafters.lookup import PromptLookupDrafter

        return ModelPair(target=_loaded(target, f"tiny-{seed}"), tokenizer=FakeTokenizer(),
                         drafter=PromptLookupDrafter(), drafter_kind="lookup", draft=None, vocab_size=VOCAB,
                         eos_token_ids=frozenset(), use_chat_template=False, description="tiny lookup pair")
    if kind == "perfect":
        draft = target
    elif kind == "useless":
        draft = copy.deepcopy(target)
        with torch.no_grad():
            draft.lm_head.weight.neg_()
    else:
        draft = tiny_model(seed + 1, vocab_size=VOCAB, logit_scale=4.0)
    if fail_after is not None:
        _fail_after(target, fail_after)
    return ModelPair(target=_loaded(target, f"tiny-{seed}"), tokenizer=FakeTokenizer(),
                     drafter=ModelDrafter(draft, VOCAB), drafter_kind="model", draft=_loaded(draft, kind),
                     vocab_size=VOCAB, eos_token_ids=frozenset(), use_chat_template=False,
                     description=f"tiny {kind} pair")


def _fail_after(model: Any, n_calls: int) -> None:
    """Make the model raise on its (n_calls+1)-th forward: a model failing mid-run."""
    original = model.forward
    calls = {"n": 0}

    def forward(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > n_calls:
            raise RuntimeError("simulated device failure in forward")
        return original(*args, **kwargs)

    model.forward = forward


def pair_factory(kind: str = "perfect", **kw: Any) -> Callable[[Any], ModelPair]:
    def build(progress: Any) -> ModelPair:
        progress("building a tiny pair", 0.5)
        return make_pair(kind, **kw)

    return build


def qt_binding_broken() -> str | None:
    """The reason the installed Qt binding cannot run the GUI tests (they would abort the process)."""
    from specscope.app.qt_check import binding_problem

    return binding_problem()


def make_window(qtbot: Any, tmp_path: Any, check_interrupted: bool = False) -> Any:
    """A main window with settings and autosave under tmp_path, registered with qtbot."""
    from specscope.app.settings import AppSettings, make_qsettings
    from specscope.app.window import MainWindow

    settings = AppSettings(make_qsettings(str(tmp_path / "settings.ini")))
    window = MainWindow(settings=settings, data_dir=tmp_path / "data", check_interrupted=check_interrupted)
    qtbot.addWidget(window)
    window.show()
    return window


def load_tiny(qtbot: Any, window: Any, kind: str = "perfect", **kw: Any) -> None:
    with qtbot.waitSignal(window.pair_ready, timeout=60_000):
        window.load_pair(pair_factory(kind, **kw))


def synthetic_records(n: int, k: int = 4, accept: Callable[[int], int] | None = None, draft_ms: float = 1.0,
                      verify_ms: float = 10.0, memory: bool = True, flag_every: int = 0,
                      baseline_every: int = 0, baseline_steps: int = 2, first_baseline: bool = True,
                      controls: Callable[[int], Any] | None = None, drafter: str = "model") -> list[Any]:
    """Iteration records without a model, for view tests, measurement tests and the GUI benchmark: ``n``
    speculative iterations; baselines are runs of ``baseline_steps`` real plain iterations (mode plain, one
    "target" token each, committed), one before the first speculative iteration (``first_baseline``) and one
    every ``baseline_every`` speculative iterations if set. Iteration numbers count every record.
    ``accept(i)`` and ``controls(i)`` are given the speculative iteration's index i (0..n-1)."""
    from specscope.core.records import ControlValues, IterationRecord, TokenRecord, TokenStatus

    accept = accept or (lambda i: i % (k + 1))
    out: list[Any] = []
    generated = 0
    plain_steps = 0

    def memory_at(it: int) -> dict[str, float]:
        return {"host_rss_bytes": 5e8 + it, "gpu0_used_bytes": 2e9} if memory else {}

    def baseline(values: Any) -> None:
        nonlocal generated, plain_steps
        for _ in range(baseline_steps):
            it = len(out)
            ms = 9.0 + 0.5 * (plain_steps % 3)  # a plain step of 9.0, 9.5 or 10.0 ms: median 9.5
            plain_steps += 1
            t0 = float(it)
            out.append(IterationRecord(
                iteration=it, mode="plain", drafter="none", controls=values,
                tokens=[TokenRecord(60, " p", TokenStatus.TARGET, generated, p=0.7, top5=[(60, 0.7)])],
                n_drafted=0, n_accepted=0, n_emitted=1, draft_ms=0.0, verify_ms=ms, rollback_ms=0.0,
                iteration_ms=ms + 0.1, context_len=9 + generated, generated_len=generated + 1, t_start_s=t0,
                t_end_s=t0 + (ms + 0.1) / 1000.0, memory=memory_at(it)))
            generated += 1

    for i in range(n):
        values = controls(i) if controls is not None else ControlValues(k=k)
        if (first_baseline and i == 0) or (baseline_every and i and i % baseline_every == 0):
            baseline(values)
        kk = values.k
        n_acc = min(kk, accept(i))
        tokens = [TokenRecord(10 + j, f" w{j}", TokenStatus.ACCEPTED, generated + j, p=0.9, q=0.8,
                              top5=[(10 + j, 0.9), (3, 0.05)]) for j in range(n_acc)]
        if n_acc < kk:
            tokens.append(TokenRecord(40, " x", TokenStatus.REJECTED, generated + n_acc, p=0.1, q=0.7))
        tokens.append(TokenRecord(50, " y", TokenStatus.CORRECTION if n_acc < kk else TokenStatus.BONUS,
                                  generated + n_acc, p=0.6, top5=[(50, 0.6)]))
        generated += n_acc + 1
        it = len(out)
        t0 = float(it)
        out.append(IterationRecord(
            iteration=it, mode="speculative", drafter=drafter, controls=values, tokens=tokens,
            n_drafted=kk, n_accepted=n_acc, n_emitted=n_acc + 1, draft_ms=draft_ms * kk, verify_ms=verify_ms,
            rollback_ms=0.2, iteration_ms=draft_ms * kk + verify_ms + 0.3, context_len=8 + generated,
            generated_len=generated, t_start_s=t0, t_end_s=t0 + 0.01, memory=memory_at(it),
            flags=(["target verify 5x its recent median: paging?"]
                   if flag_every and i % flag_every == 0 else []),
        ))
    return out


def synthetic_stream(records: list[Any], *, description: str = "tiny synthetic pair", drafter: str = "model",
                     prompt: str = "a synthetic prompt", reason: str = "max_new_tokens", target: str = "tiny",
                     draft: str = "tiny-draft") -> list[Any]:
    """A whole run's event stream around ``records``: RunStarted, the control changes the records imply,
    the records, RunFinished (what a session emits, as a trace holds it)."""
    from specscope.core.events import RunFinished, RunStarted, control_changes

    first = records[0]
    started = RunStarted(source="local", target=target, draft=draft, drafter=drafter, description=description,
                         prompt=prompt, prompt_tokens=8, controls=first.controls, max_new_tokens=1000,
                         t_s=first.t_start_s)
    changes = {c.iteration: c for c in control_changes(records)}
    events: list[Any] = [started]
    for r in records:
        if r.iteration in changes:
            events.append(changes[r.iteration])
        events.append(r)
    last = records[-1]
    events.append(RunFinished(reason=reason, iterations=len(records), tokens=last.generated_len,
                              elapsed_s=last.t_end_s - first.t_start_s, prefill_ms=5.0, t_s=last.t_end_s))
    return events


def in_column(qtbot: Any, widget: Any, width: int = 1200, height: int = 500) -> Any:
    """``widget`` on top of a stretching label in a shown window ``width`` x ``height``: what it asks of a
    layout moves the label, as the run panel's lines move the token view. Keep the window returned: qtbot
    holds it weakly, and the widget goes with it."""
    from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

    holder = QWidget()
    qtbot.addWidget(holder)
    col = QVBoxLayout(holder)
    col.addWidget(widget)
    col.addWidget(QLabel("below"), 1)
    holder.resize(width, height)
    holder.show()
    return holder
