"""One rendering of the token stream: a text document with every token, or every token but the rejected ones.

The token view keeps both and shows one (``TokenView.set_show_rejected`` swaps them), so hiding rejected tokens
costs a document swap, not a rebuild: re-inserting 190,000 tokens took 0.4 s of the GUI thread. Appends are
incremental: the tokens of a batch go in as runs, one insert per run of one status, and each token's start
offset is counted as it goes (in UTF-16 code units, as the document counts).
"""

from __future__ import annotations

import re

from PySide6.QtGui import QFont, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QPlainTextDocumentLayout, QWidget

from specscope.core.records import TokenRecord

# QPlainTextEdit lays out text per block (paragraph); one endless block makes every append O(length).
# A long run without newlines is therefore broken into blocks at a word boundary after this many tokens.
BLOCK_TOKENS = 256


SPECIAL_TOKEN = re.compile(r"^<\|?(/?[\w.:-]+)\|?>$")  # <|im_end|>, </s>, <s>, <|endoftext|>, <eos>
BYTE_FRAGMENT = "\ufffd"  # what a tokenizer decodes part of a multi-byte character to


def visible_text(text: str) -> str:
    """Token text as shown: special tokens as ⟨name⟩, a byte fragment (part of a multi-byte character the
    next token completes) as ⟨byte⟩, carriage returns dropped, an empty token as a visible marker."""
    special = SPECIAL_TOKEN.match(text) if text[:1] == "<" else None
    if special:
        return f"⟨{special.group(1)}⟩"
    if BYTE_FRAGMENT in text:
        text = text.replace(BYTE_FRAGMENT, "⟨byte⟩")
    text = text.replace("\r", "")
    return text if text else "·"


def document_length(text: str) -> int:
    """The positions ``text`` takes in a QTextDocument: UTF-16 code units (a character outside the BMP is two;
    a newline, turned into a block break, is one; so is a lone surrogate, which a broken trace can hold)."""
    return len(text) if text.isascii() else len(text.encode("utf-16-le", "surrogatepass")) // 2


# A token as both documents take it: (iteration, token, status, text as shown, its length in the document),
# worked out once per token rather than once per document.
Piece = tuple[int, TokenRecord, str, str, int]


def pieces(items: list[tuple[int, TokenRecord]]) -> list[Piece]:
    out = []
    for it, tok in items:
        text = visible_text(tok.text)
        out.append((it, tok, tok.status.value, text, document_length(text)))
    return out


class TokenDocument:
    """The tokens appended so far as a document, with the start offset of each token it shows."""

    def __init__(self, parent: QWidget, font: QFont, formats: dict[str, QTextCharFormat],
                 hide_rejected: bool) -> None:
        self.document = QTextDocument(parent)  # owned by the view: swapping documents deletes neither
        self.document.setDocumentLayout(QPlainTextDocumentLayout(self.document))
        self.document.setDefaultFont(font)
        self.formats = formats
        self.hide_rejected = hide_rejected
        self.starts: list[int] = []  # document offset where each shown token starts
        self.shown: list[tuple[int, TokenRecord]] = []  # (iteration, token) for each shown token
        self._block_tokens = 0  # tokens in the current (last) block

    def clear(self) -> None:
        self.document.clear()
        self.starts.clear()
        self.shown.clear()
        self._block_tokens = 0

    def append(self, items: list[Piece]) -> None:
        cursor = QTextCursor(self.document)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        pos = cursor.position()
        run: list[str] = []
        run_status = ""

        def flush() -> None:
            if run:
                cursor.insertText("".join(run), self.formats.get(run_status, self.formats["plain"]))
                run.clear()

        for it, tok, status, text, length in items:
            if status == "rejected" and self.hide_rejected:
                continue
            if self._block_tokens >= BLOCK_TOKENS and (text[0].isspace() or self._block_tokens >= 2 * BLOCK_TOKENS):
                flush()
                cursor.insertBlock()
                pos += 1
                self._block_tokens = 0
            elif status != run_status:
                flush()
            run_status = status
            self._block_tokens = 0 if "\n" in text else self._block_tokens + 1
            self.starts.append(pos)
            self.shown.append((it, tok))
            run.append(text)
            pos += length
        flush()
        cursor.endEditBlock()
