"""Streamed chunks grouped into verify passes, and passes turned into ``IterationRecord``s (mode "attached").

A verify pass commits the accepted proposals plus one token of the target's own; the engines stream those
tokens together, so the pass is the unit an attached record describes (one record per pass, as one record
per iteration locally; ``metrics.checked_proposals`` and the α built on it read one pass per record).

How passes are found:
- **Counters on the chunks (llama.cpp):** every token of one pass carries the same cumulative
  ``draft_n``/``draft_n_accepted`` (the server counts the pass before sending its tokens). A pass ends when
  they change, or when it already holds accepted + 1 tokens and more arrive with unchanged counters (a step
  that drafted nothing). Drafted and accepted per pass are then exact, and their sums equal the server's own.
- **No counters (vLLM, SGLang):** one chunk is one engine step (vLLM streams each step's tokens as one chunk),
  so a chunk carrying n tokens is one pass that accepted n - 1. The number drafted is not on the wire: it is
  taken as the engine's configured draft length k (``draft_len``), which is what vLLM's draft-model and EAGLE
  proposers draft on every step; records built that way carry a flag saying so.

The first pass is the prompt pass (the target's first token, nothing drafted); it is kept as a record with
n_drafted = 0 so the token stream is complete, and flagged so time-per-token views can leave it out.
The engine reports no draft/verify/rollback split: those fields are NaN ("not reported"), never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specscope.core.attach.chunks import Chunk
from specscope.core.records import ATTACHED_MODE, ControlValues, IterationRecord, TokenRecord, TokenStatus

__all__ = ["ATTACHED_MODE"]  # re-exported: the mode the passes' records carry (declared in records)
NOT_REPORTED = math.nan  # draft_ms / verify_ms / rollback_ms: the engine does not split a pass's time
PROMPT_PASS_FLAG = "prompt pass: the target's first token after prompt processing (time includes the prompt)"
ASSUMED_DRAFT_FLAG = "drafted count assumed = the engine's draft length k (the engine does not send it per pass)"
NOTE_FLAGS = frozenset({PROMPT_PASS_FLAG, ASSUMED_DRAFT_FLAG})  # say how a record was read; not warnings
UNKNOWN_TOKEN_ID = -1  # the OpenAI-compatible stream carries text, not token ids


@dataclass
class Pass:
    chunks: list[Chunk] = field(default_factory=list)
    n_drafted: int = 0
    n_accepted: int = 0
    n_emitted: int = 0
    prompt_pass: bool = False
    drafted_assumed: bool = False

    @property
    def t_end_s(self) -> float:
        return self.chunks[-1].t_s

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)


def _chunk_tokens(chunk: Chunk, previous_total: int | None) -> int:
    """Tokens a chunk carries: the cumulative count's step where known, else 1 for a chunk with text."""
    if chunk.completion_tokens is not None:
        return max(0, chunk.completion_tokens - (previous_total or 0))
    return 1 if chunk.text else 0


class PassBuilder:
    """Feed chunks in arrival order; get passes back as soon as they are known to be complete."""

    def __init__(self, draft_len: int | None = None):
        self.draft_len = draft_len  # used only when the chunks carry no counters
        self._current: Pass | None = None
        self._key: tuple[int, int] = (0, 0)  # cumulative (drafted, accepted) at the current pass
        self._base: tuple[int, int] = (0, 0)  # the same at the end of the previous pass
        self._total: int | None = None  # cumulative tokens seen
        self._count = 0  # passes started

    def _start(self, chunk: Chunk, tokens: int) -> Pass:
        self._count += 1
        p = Pass(chunks=[chunk], n_emitted=tokens, prompt_pass=self._count == 1)
        self._current = p
        return p

    def add(self, chunk: Chunk) -> list[Pass]:
        tokens = _chunk_tokens(chunk, self._total)
        if chunk.completion_tokens is not None:
            self._total = max(self._total or 0, chunk.completion_tokens)
        elif tokens:
            self._total = (self._total or 0) + tokens
        closed: list[Pass] = []
        current = self._current
        if chunk.draft_n is not None and chunk.draft_n_accepted is not None:
            key = (chunk.draft_n, chunk.draft_n_accepted)
            if current is None:
                self._start(chunk, tokens)
            else:
                full = current.n_emitted >= (self._key[1] - self._base[1]) + 1
                if key != self._key or (tokens and full):
                    closed.append(self._close())
                    self._base = self._key
                    self._start(chunk, tokens)
                else:
                    current.chunks.append(chunk)
                    current.n_emitted += tokens
            self._key = key
            assert self._current is not None
            self._current.n_drafted = self._key[0] - self._base[0]
            self._current.n_accepted = self._key[1] - self._base[1]
            return closed
        # No counters: a chunk with tokens is a pass of its own; empty chunks (the final one) join the last.
        if current is None or tokens:
            if current is not None:
                closed.append(self._close())
            p = self._start(chunk, tokens)
            if not p.prompt_pass:
                p.n_accepted = max(0, tokens - 1)
                if self.draft_len:
                    p.n_drafted = max(self.draft_len, p.n_accepted)
                    p.drafted_assumed = True
                else:
                    p.n_drafted = p.n_accepted
                    p.drafted_assumed = True
        else:
            current.chunks.append(chunk)
        return closed

    def _close(self) -> Pass:
        assert self._current is not None
        p = self._current
        self._current = None
        return p

    def finish(self) -> list[Pass]:
        """The last pass (at the end of the stream, or with what arrived before it broke)."""
        return [self._close()] if self._current is not None else []


@dataclass
class RecordContext:
    """What every record of one attached request shares."""

    drafter: str  # e.g. "llama.cpp draft" — the engine and its drafter as reported
    controls: ControlValues
    prompt_tokens: int | None  # None when the engine did not say
    t_request_s: float  # time.monotonic() when the request was sent


class RecordMaker:
    """Passes → IterationRecords, numbering them and carrying positions and lengths forward."""

    def __init__(self, context: RecordContext):
        self.ctx = context
        self.iteration = 0
        self.generated = 0
        self.t_prev = context.t_request_s

    def record(self, p: Pass, finished: bool = False, finish_reason: str = "") -> IterationRecord:
        tokens: list[TokenRecord] = []
        statuses = self._statuses(p)
        texts = self._token_texts(p)
        for i, (text, status) in enumerate(zip(texts, statuses, strict=True)):
            tokens.append(TokenRecord(token_id=UNKNOWN_TOKEN_ID, text=text, status=status,
                                      position=self.generated + i))
        self.generated += p.n_emitted
        flags: list[str] = []
        if p.prompt_pass:
            flags.append(PROMPT_PASS_FLAG)
        if p.drafted_assumed and not p.prompt_pass:
            flags.append(ASSUMED_DRAFT_FLAG)
        t_end = p.t_end_s
        rec = IterationRecord(
            iteration=self.iteration,
            mode=ATTACHED_MODE,
            drafter=self.ctx.drafter,
            controls=self.ctx.controls,
            tokens=tokens,
            n_drafted=p.n_drafted,
            n_accepted=p.n_accepted,
            n_emitted=p.n_emitted,
            draft_ms=NOT_REPORTED,
            verify_ms=NOT_REPORTED,
            rollback_ms=NOT_REPORTED,
            iteration_ms=(t_end - self.t_prev) * 1000.0,
            context_len=(self.ctx.prompt_tokens or 0) + self.generated,
            generated_len=self.generated,
            t_start_s=self.t_prev,
            t_end_s=t_end,
            finished=finished,
            finish_reason=finish_reason,
            flags=flags,
        )
        self.iteration += 1
        self.t_prev = t_end
        return rec

    @staticmethod
    def _statuses(p: Pass) -> list[TokenStatus]:
        if p.prompt_pass:
            return [TokenStatus.PLAIN] * p.n_emitted
        accepted = min(p.n_accepted, p.n_emitted)
        last = TokenStatus.BONUS if p.n_drafted and p.n_accepted >= p.n_drafted else TokenStatus.CORRECTION
        out = [TokenStatus.ACCEPTED] * accepted + [last] * (p.n_emitted - accepted)
        return out[: p.n_emitted]

    @staticmethod
    def _token_texts(p: Pass) -> list[str]:
        """One text per token: chunks carrying one token map one-to-one; a multi-token chunk's text goes to
        its first token (the stream does not say where one token's text ends)."""
        out: list[str] = []
        total: int | None = None
        for c in p.chunks:
            n = c.completion_tokens - total if c.completion_tokens is not None and total is not None else None
            if c.completion_tokens is not None:
                total = c.completion_tokens
            if n is None:
                n = 1 if c.text else 0
            if n <= 0:
                if out and c.text:
                    out[-1] += c.text
                continue
            out.append(c.text)
            out.extend([""] * (n - 1))
        out.extend([""] * (p.n_emitted - len(out)))
        return out[: p.n_emitted]
