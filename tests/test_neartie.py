"""Near-tie analysis: a flip between two nearly equal logits is explained, a real difference is not."""

from __future__ import annotations

import numpy as np
import torch

from specscope.core.engine.neartie import first_difference, near_tie_report, spacing
from specscope.core.engine.speculative import DecodeOptions, Decoder
from tests.models import tiny_model


def test_spacing_matches_numpy() -> None:
    for v in [1.0, 3.7, 12.3, 1e-3, 250.0]:
        assert spacing(v, torch.float32) == float(np.spacing(np.float32(v)))
        assert spacing(v, torch.float16) == float(np.spacing(np.float16(v)))
    assert spacing(1.0, torch.bfloat16) == 2.0**-7


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def _tie_model(gap_ulps: int):
    """A tiny model whose head makes tokens 5 and 9 tie at the first step, up to ``gap_ulps`` ulps."""
    model = tiny_model(3, vocab_size=16)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2]])).logits[0, -1]
        # Make token 9 the winner by exactly gap_ulps at token 5's level, by editing the head bias-free:
        # scale row 9 of the head so its logit lands where we want (the hidden state is fixed).
        hidden = model.model(torch.tensor([[1, 2]])).last_hidden_state[0, -1]
        top = float(logits.max()) + 1.0
        for tok, target in [(5, top), (9, top)]:
            row = model.lm_head.weight[tok]
            row.mul_(target / float(row @ hidden))
        l5 = float(model.lm_head.weight[5] @ hidden)
        target9 = np.float32(l5) + gap_ulps * np.spacing(np.float32(l5))
        row9 = model.lm_head.weight[9]
        row9.mul_(float(target9) / float(row9 @ hidden))
    return model


def test_near_tie_is_explained_as_arithmetic() -> None:
    model = _tie_model(1)
    plain = Decoder(model, 16).run([1, 2], options=DecodeOptions(max_new_tokens=3), plain=True).token_ids
    other = list(plain)
    other[0] = 5 if plain[0] == 9 else 9
    report = near_tie_report(model, [1, 2], plain, other)
    assert report is not None and report.position == 0
    assert report.gap_ulps <= 4 and report.is_near_tie
    assert "near-tie" in report.explain()


def test_large_gap_is_reported_as_a_bug() -> None:
    model = tiny_model(4, vocab_size=16, logit_scale=3.0)
    plain = Decoder(model, 16).run([1, 2], options=DecodeOptions(max_new_tokens=4), plain=True).token_ids
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, *plain[:2]]])).logits[0, -1]
    worst = int(torch.argmin(logits))
    other = [*plain[:2], worst, *plain[3:]]
    report = near_tie_report(model, [1, 2], plain, other)
    assert report is not None and report.position == 2 and not report.is_near_tie
    assert "bug" in report.explain()
    assert near_tie_report(model, [1, 2], plain, list(plain)) is None
