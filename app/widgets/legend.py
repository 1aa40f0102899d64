"""The token legend and the 'show rejected' switch, drawn from the same theme styles as the tokens."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QSizePolicy, QWidget

from specscope.app.theme import style_for
from specscope.app.widgets.steady_label import SteadyLabel

LEGEND_ORDER = ("accepted", "rejected", "correction", "bonus", "target")


def legend_html(counts: dict[str, int] | None = None) -> str:
    """The five fates in their styles, each with its count when ``counts`` is given ("accepted 9"): the counts
    inside the chips, not in a label beside them that a 1280-px window cut to "bonus 44 t…"."""
    parts = []
    for status in LEGEND_ORDER:
        s = style_for(status)
        deco = [d for d, on in (("line-through", s.strike), ("underline", s.underline)) if on]
        css = (f"color:{s.colour}; background-color:{s.background};"
               f"text-decoration:{' '.join(deco) or 'none'};"
               f"font-weight:{'bold' if s.bold else 'normal'};"
               f"font-style:{'italic' if s.italic else 'normal'}")
        count = f"&nbsp;{counts.get(status, 0)}" if counts is not None else ""
        parts.append(f'<span style="{css}">&nbsp;{html.escape(s.label)}{count}&nbsp;</span>')
    return "&nbsp; ".join(parts)  # a breakable space between entries: the legend wraps in a narrow column


def legend_tooltip() -> str:
    return "<br>".join(f"<b>{s}</b>: {html.escape(style_for(s).description)}" for s in LEGEND_ORDER)


class TokenLegend(QWidget):
    show_rejected_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(2, 0, 2, 0)
        # Both wrap or shrink: a fixed-width legend held the token column (tokens beside the plots) at ~800 px.
        self.label = SteadyLabel(legend_html())  # its counts change ten times a second while a run is live
        self.label.setWordWrap(True)
        # as wide as its row leaves it (it wraps), never what makes the row wide; and with its width ignored,
        # new counts are measured by their wrapped height alone (SteadyLabel)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.label.setToolTip(legend_tooltip())
        self.counts_text = ""  # the counts as plain words ("accepted 9  rejected 2 …"), as the chips show them
        self.show_rejected = QCheckBox("show rejected")
        self.show_rejected.setChecked(True)
        self.show_rejected.setToolTip("Rejected proposals are not in the output; hide them to read the text")
        self.show_rejected.toggled.connect(self.show_rejected_changed)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.show_rejected)

    def set_counts(self, counts: dict[str, int]) -> None:
        text = "  ".join(f"{s} {counts.get(s, 0)}" for s in LEGEND_ORDER)
        if text != self.counts_text:
            self.counts_text = text
            self.label.setText(legend_html(counts))
