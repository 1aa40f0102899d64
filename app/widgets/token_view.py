"""The token stream: committed tokens coloured by fate, rejected ones struck through (or hidden).

Appends are incremental (one cursor insert per run of tokens of one status, batched per timer tick), and
hover maps the character under the mouse to a token through a sorted list of start offsets (bisect), so the
view stays fast with tens of thousands of tokens. Two documents are kept, with and without the rejected
tokens (app/widgets/token_document.py): hiding them swaps the document shown. Tooltips show iteration,
status, p(x), q(x), min(1, p/q) and the target's top 5 at that position, named by the texts the record carries.
"""

from __future__ import annotations

import bisect
import html
from collections.abc import Callable, Iterable

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QFont, QFontMetrics, QHelpEvent, QTextCharFormat
from PySide6.QtWidgets import QPlainTextEdit, QToolTip, QWidget

from specscope.app.theme import STATUS_STYLES, style_for
from specscope.app.widgets.token_document import Piece, TokenDocument, pieces, visible_text
from specscope.core.records import IterationRecord, TokenRecord

STATUS_NAMES = tuple(STATUS_STYLES)
MIN_LINES = 6  # the token stream is what a user watches: the splitter never squeezes it below this many lines

TokenDecoder = Callable[[int], "str | None"]


def char_format(status: str) -> QTextCharFormat:
    s = style_for(status)
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(s.colour))
    fmt.setBackground(QColor(s.background))
    fmt.setFontStrikeOut(s.strike)
    fmt.setFontUnderline(s.underline)
    fmt.setFontWeight(QFont.Weight.Bold if s.bold else QFont.Weight.Normal)
    fmt.setFontItalic(s.italic)
    return fmt


def readable(text: str) -> str:
    """A token's text for a tooltip: quoted so spaces show, specials and bytes as in the view."""
    shown = visible_text(text)
    return repr(shown) if shown == text else f"{shown} ({text!r})"


def _fmt_prob(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def match_line(record: IterationRecord) -> str | None:
    """What the drafter matched for this iteration's proposal (prompt lookup, suffix decoding), or None."""
    if record.match_len is None:
        return None
    what = "n-gram" if record.drafter == "lookup" else "match"
    line = f"{record.drafter} {what} of {record.match_len} token{'s' * (record.match_len != 1)}"
    if record.expected_accepted is not None:
        line += f", expected accepted {record.expected_accepted:.2f} of {record.n_drafted} drafted"
    return line


def tooltip_html(iteration: int, tok: TokenRecord, decode: TokenDecoder | None, match: str | None = None) -> str:
    status = tok.status.value if hasattr(tok.status, "value") else str(tok.status)
    rows = [
        f"<b>{html.escape(readable(tok.text))}</b> (id {tok.token_id})",
        f"iteration {iteration}, position {tok.position}, <b>{status}</b>",
        f"p(x) = {_fmt_prob(tok.p)} &nbsp; q(x) = {_fmt_prob(tok.q)} &nbsp; "
        f"min(1, p/q) = {_fmt_prob(tok.accept_prob)}",
    ]
    if match:
        rows.append(html.escape(match))
    if tok.top5:
        rows.append("target top 5:")
        # The record's own texts first (the worker decoded them); a decoder only for traces without them.
        recorded = tok.top5_text if len(tok.top5_text) == len(tok.top5) else [None] * len(tok.top5)
        for (tid, prob), recorded_text in zip(tok.top5, recorded, strict=True):
            text = recorded_text if recorded_text is not None else decode(tid) if decode is not None else None
            label = f"{readable(text)} (id {tid})" if text is not None else f"id {tid} (text unknown)"
            rows.append(f"&nbsp;&nbsp;{prob:.4f} &nbsp; {html.escape(label)}")
    return "<br>".join(rows)


class TokenView(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setMouseTracking(True)
        self.viewport().setMouseTracking(True)
        self.viewport().installEventFilter(self)
        font = QFont("DejaVu Sans Mono")
        font.setStyleHint(QFont.StyleHint.Monospace)
        font.setPointSize(10)
        self._formats = {s: char_format(s) for s in STATUS_NAMES}
        self._documents = {shown: TokenDocument(self, font, self._formats, hide_rejected=not shown)
                           for shown in (True, False)}
        self.show_rejected = True
        # What the document not on screen has still to take: it is brought up to date when it is shown, not
        # at each append (each append lays its text out: half the token view's cost while a run is live).
        self._backlog: dict[bool, list[Piece]] = {True: [], False: []}
        self.setDocument(self._shown_document.document)
        # Not below MIN_LINES, whatever the splitter's saved sizes or the lines a live run adds above the plots
        # (app/live_layout.py gives those lines' room from the tokens): at 1280x720 it had come down to ~4.
        margins = self.contentsMargins()
        self.setMinimumHeight(MIN_LINES * QFontMetrics(font).lineSpacing() + margins.top() + margins.bottom()
                              + 2 * int(self.document().documentMargin()) + 2)
        self.decode: TokenDecoder | None = None  # set when a pair is loaded (top-5 ids -> text)
        self._seen_text: dict[int, str] = {}  # id -> text of every token shown: names top-5 ids in a replay
        self._matches: dict[int, str] = {}  # iteration -> what its drafter matched (lookup, suffix)
        self.counts: dict[str, int] = {}

    @property
    def _shown_document(self) -> TokenDocument:
        return self._documents[self.show_rejected]

    @property
    def _starts(self) -> list[int]:
        return self._shown_document.starts

    # ---- content -------------------------------------------------------------------------------------
    def clear_tokens(self) -> None:
        for doc in self._documents.values():
            doc.clear()
        for backlog in self._backlog.values():
            backlog.clear()
        self.counts.clear()
        self._seen_text.clear()
        self._matches.clear()

    def append_records(self, records: Iterable[IterationRecord]) -> None:
        records = list(records)
        for r in records:
            line = match_line(r)
            if line is not None:
                self._matches[r.iteration] = line
        items = [(r.iteration, t) for r in records for t in r.tokens]
        if not items:
            return
        for _, t in items:
            self.counts[t.status.value] = self.counts.get(t.status.value, 0) + 1
            self._seen_text[t.token_id] = t.text
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        shown = pieces(items)
        self._shown_document.append(shown)
        self._backlog[not self.show_rejected].extend(shown)
        if at_bottom:
            bar.setValue(bar.maximum())

    def set_show_rejected(self, show: bool) -> None:
        """Show the other document (kept up to date all along), at its end as a rebuilt one was."""
        if show == self.show_rejected:
            return
        self.show_rejected = show
        backlog, self._backlog[show] = self._backlog[show], []
        if backlog:
            self._shown_document.append(backlog)
        self.setDocument(self._shown_document.document)
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    # ---- queries (tests, hover) ----------------------------------------------------------------------
    def shown_tokens(self) -> list[tuple[int, TokenRecord]]:
        return list(self._shown_document.shown)

    def token_at_offset(self, offset: int) -> tuple[int, TokenRecord] | None:
        doc = self._shown_document
        i = bisect.bisect_right(doc.starts, offset) - 1
        if i < 0:
            return None
        end = doc.starts[i + 1] if i + 1 < len(doc.starts) else doc.document.characterCount() - 1
        return doc.shown[i] if offset < end else None

    def tooltip_for_offset(self, offset: int) -> str | None:
        hit = self.token_at_offset(offset)
        if hit is None:
            return None
        return tooltip_html(hit[0], hit[1], self.decode or self._seen_text.get, self._matches.get(hit[0]))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.viewport() and event.type() == QEvent.Type.ToolTip:
            assert isinstance(event, QHelpEvent)
            cursor = self.cursorForPosition(event.pos())
            rect = self.cursorRect(cursor)
            # cursorForPosition snaps to the nearest gap; the token is the char left or right of it.
            offset = cursor.position() if event.pos().x() >= rect.x() else cursor.position() - 1
            tip = self.tooltip_for_offset(max(0, offset))
            if tip:
                QToolTip.showText(event.globalPos(), tip, self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().eventFilter(watched, event)
