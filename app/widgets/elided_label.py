"""A one-line label that never cuts a word in half: text too wide for the label ends in "…", and the full
text is the tooltip.

A QLabel with an ignored horizontal size policy clips its text at whatever pixel the layout leaves it
("3,072-token draft voc", "drafter: lo"). This label keeps the same layout behaviour (it never widens its
row) but elides instead. A label can be made of spans, some bold, of which only the ones marked
``elide`` shrink: "pair: <long description…> · drafter: lookup" keeps the drafter whole.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

ELLIPSIS = "…"


@dataclass(frozen=True)
class Span:
    text: str
    bold: bool = False
    elide: bool = False  # this span shrinks (with "…") when the whole line does not fit


def elide_spans(spans: list[Span], width: int, plain: QFontMetrics, bold: QFontMetrics,
                mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight) -> list[str]:
    """Each span's text so that the line fits ``width`` pixels: the fixed spans whole, the elidable ones
    sharing what is left (in order; a later one gives way first). A span that cannot show a letter is
    reduced to "…"."""
    def advance(s: Span, text: str) -> int:
        return (bold if s.bold else plain).horizontalAdvance(text)

    texts = [s.text for s in spans]
    total = sum(advance(s, t) for s, t in zip(spans, texts, strict=True))
    if total <= width:
        return texts
    for i in reversed(range(len(spans))):  # the last elidable span gives way first
        s = spans[i]
        if not s.elide:
            continue
        others = total - advance(s, texts[i])
        room = max(0, width - others)
        texts[i] = (bold if s.bold else plain).elidedText(s.text, mode, room) or ELLIPSIS
        total = others + advance(s, texts[i])
        if total <= width:
            break
    return texts


class ElidedLabel(QLabel):
    """One line, elided with "…" to the label's width; the full text on hover whenever it is elided.

    ``setText`` takes plain text (the whole line may shrink); ``set_spans`` takes spans (some bold, only
    the ``elide`` ones shrink). ``full_text`` is what the label holds, whatever is on screen."""

    def __init__(self, text: str = "", parent: QWidget | None = None,
                 mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight) -> None:
        super().__init__(parent)
        self._mode = mode
        self._spans: list[Span] = []
        self._shown: list[str] = []
        self._tooltip = ""  # a tooltip the owner set; the full text is shown when there is none
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens its row
        self.setMinimumWidth(40)
        self.setText(text)

    # ---- content ---------------------------------------------------------------------------------------
    def setText(self, text: str) -> None:
        self.set_spans([Span(text, elide=True)] if text else [])

    def set_spans(self, spans: list[Span]) -> None:
        self._spans = list(spans)
        self._render()

    def setToolTip(self, text: str) -> None:
        """A tooltip shown always (in place of the full text an elided label shows on hover)."""
        self._tooltip = text
        self._render()

    def text(self) -> str:  # type: ignore[override]
        """The whole text, as plain text (what is on screen may end in "…"; see ``shown_text``)."""
        return self.full_text

    @property
    def full_text(self) -> str:
        return "".join(s.text for s in self._spans)

    @property
    def shown_text(self) -> str:
        """The plain text on screen now (with any "…")."""
        return "".join(self._shown)

    @property
    def is_elided(self) -> bool:
        return self.shown_text != self.full_text

    # ---- layout ----------------------------------------------------------------------------------------
    def resizeEvent(self, ev: QResizeEvent) -> None:
        super().resizeEvent(ev)
        self._render()

    def _render(self) -> None:
        margins = self.contentsMargins()
        width = self.width() - margins.left() - margins.right() - 2 * self.margin() - 2
        plain_font = QFont(self.font())
        bold_font = QFont(self.font())
        bold_font.setBold(True)
        self._shown = elide_spans(self._spans, max(0, width), QFontMetrics(plain_font), QFontMetrics(bold_font),
                                  self._mode)
        parts = []
        for span, text in zip(self._spans, self._shown, strict=True):
            escaped = html.escape(text)
            parts.append(f"<b>{escaped}</b>" if span.bold else escaped)
        super().setText("<span style='white-space:pre'>" + "".join(parts) + "</span>" if parts else "")
        tip = self._tooltip or (html.escape(self.full_text) if self.is_elided else "")
        super().setToolTip(tip)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        hint.setWidth(self.minimumWidth())
        return hint
