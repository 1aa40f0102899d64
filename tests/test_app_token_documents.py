"""The token view keeps two documents, with and without the rejected tokens (app/widgets/token_document.py):
hiding rejected tokens shows the other one. Both must hold the tokens they should, in order, with each
token's offset right (hover names the token under the mouse), through appends made while either is shown."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QTextCursor

from specscope.app.widgets.token_document import BLOCK_TOKENS, visible_text
from specscope.core.records import ControlValues, IterationRecord, TokenRecord, TokenStatus

from .app_helpers import qt_binding_broken

PARAGRAPH = "\u2029"  # a block break, as a selection's text spells it
pytestmark = pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))

# Texts a real tokenizer gives: spaces, a newline, a character outside the BMP (two UTF-16 units), a special
# token, a byte fragment, an empty token; and half of a surrogate pair, which a broken trace file can hold.
TEXTS = [" the", " ocean", "\n", "🌊", " is", "<|im_end|>", "\ufffd", "", " deep", "é", " 1.", "\n\n", "x\ud83d"]
FATES = [TokenStatus.ACCEPTED, TokenStatus.REJECTED, TokenStatus.CORRECTION, TokenStatus.ACCEPTED,
         TokenStatus.BONUS, TokenStatus.REJECTED, TokenStatus.REJECTED, TokenStatus.ACCEPTED, TokenStatus.PLAIN]


WORDS = [t for t in TEXTS if "\n" not in t]  # no newline: a long run is broken into blocks of BLOCK_TOKENS


def records(n: int, start: int = 0, texts: list[str] = TEXTS) -> list[IterationRecord]:
    out = []
    for it in range(start, start + n):
        tokens = []
        for j in range(3):
            i = 3 * it + j
            tokens.append(TokenRecord(i, texts[i % len(texts)], FATES[i % len(FATES)], i, p=0.5))
        out.append(IterationRecord(
            iteration=it, mode="speculative", drafter="model", controls=ControlValues(k=2), tokens=tokens,
            n_drafted=2, n_accepted=1, n_emitted=2, draft_ms=1.0, verify_ms=2.0, rollback_ms=0.0, iteration_ms=3.0,
            context_len=10 + 3 * it, generated_len=3 * it, t_start_s=float(it), t_end_s=it + 0.003))
    return out


def expected(recs: list[IterationRecord], show_rejected: bool) -> list[tuple[int, int]]:
    return [(r.iteration, t.token_id) for r in recs for t in r.tokens
            if show_rejected or t.status != TokenStatus.REJECTED]


def as_in_document(text: str) -> str:
    """A text as the document's text reads back in Python: a lone surrogate takes a position in the document
    but does not come back (the offsets are checked to count it)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "ignore")


def check(view, recs: list[IterationRecord]) -> None:
    """The tokens shown are the right ones, the document holds their text in order, and every token's
    characters map back to it."""
    shown = view.shown_tokens()
    assert [(it, t.token_id) for it, t in shown] == expected(recs, view.show_rejected)
    text = view.document().toPlainText()
    # block breaks every BLOCK_TOKENS tokens are extra newlines; without them the text is the tokens' text
    assert text.replace("\n", "") == as_in_document("".join(visible_text(t.text) for _, t in shown).replace("\n", ""))
    starts = view._starts
    assert len(starts) == len(shown)
    doc = view.document()
    ends = [*starts[1:], doc.characterCount() - 1]
    cursor = QTextCursor(doc)
    for (_, tok), a, b in zip(shown, starts, ends, strict=True):
        cursor.setPosition(a)
        cursor.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
        want = as_in_document(visible_text(tok.text)).replace("\n", PARAGRAPH)
        # the token's own characters, then a block break if one was put after it
        assert cursor.selectedText() in (want, want + PARAGRAPH), (tok.text, cursor.selectedText())
        assert view.token_at_offset(a)[1] is tok and view.token_at_offset(b - 1)[1] is tok


def test_hiding_and_showing_rejected_tokens_through_appends(qtbot):
    from specscope.app.widgets.token_view import TokenView

    view = TokenView()
    qtbot.addWidget(view)
    first = records(200, texts=WORDS) + records(20, start=200)  # 660 tokens, 600 without a newline
    view.append_records(first[:120])
    view.append_records(first[120:])
    check(view, first)
    assert view.document().blockCount() >= 600 // (2 * BLOCK_TOKENS) + 1  # the run of words was broken
    all_text = view.document().toPlainText()

    view.set_show_rejected(False)
    check(view, first)
    assert view.verticalScrollBar().value() == view.verticalScrollBar().maximum()  # at the end, as rebuilt

    more = records(50, start=220)  # appended while the rejected ones are hidden: both documents get them
    view.append_records(more)
    check(view, first + more)
    view.set_show_rejected(True)
    check(view, first + more)
    assert view.document().toPlainText().startswith(all_text)
    assert view.counts["rejected"] == sum(t.status == TokenStatus.REJECTED for r in first + more for t in r.tokens)

    view.clear_tokens()
    assert view.shown_tokens() == [] and view.document().toPlainText() == ""
    view.set_show_rejected(False)
    assert view.shown_tokens() == [] and view.document().toPlainText() == ""
    view.append_records(more[:5])
    check(view, more[:5])
