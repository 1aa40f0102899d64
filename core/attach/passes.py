"""Streamed chunks grouped into verify passes, and passes turned into ``IterationRecord``s (mode "attached").

A verify pass commits the accepted proposals plus one token of the target's own; the engines stream those
tokens together, so the pass is the unit an attached record describes (one record per pass, as one record
per iteration locally; ``metrics.checked_proposals`` and the α built on it read one pass per record).

How passes are found:
- **Counters on the chunks (llama.cpp):** every token of one pass carries the same cumulative
  ``draft_n``/``draft_n_accepted`` (the server counts the pass before sending its tokens). A pass ends when
  they change, or when it already holds accepted + 1 tokens and more arrive with unchanged counters (a step
  that drafted nothing). Drafted and accepted per pass are then exact, and their sums equal the server's own.
- **No counters (vLLM, SGLang):** one chunk is usually one engine step, so a chunk carrying n tokens is one
  pass that accepted n - 1. The number drafted is not on the wire: it is taken as the engine's configured
  draft length k (``draft_len``), what vLLM's draft-model and EAGLE proposers draft on every step (n-gram,
  suffix and budget-trimmed drafts draft fewer); records built that way carry a flag saying so. When the HTTP
  side lags (or ``--stream-interval``) vLLM merges several steps into one chunk: a chunk of more than k + 1
  tokens is split into the fewest passes that can carry it, and flagged. These records are estimates; the
  client checks them against the engine's counters (``reconcile``).
- **The engine's per-step report (vLLM ``--per-request-spec-decode-metrics detailed``):** at the end of the
  stream ``passes_from_steps`` rebuilds every pass from ``per_step_accepted`` / ``per_step_drafted``, placing
  the steps on the chunks by their token counts: drafted and accepted are exact; merged steps share their
  chunk's time.

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
MERGED_CHUNK_FLAG = ("one of several engine steps the server streamed as one chunk: split into passes of k + 1 "
                     "tokens (an estimate)")
SHARED_CHUNK_FLAG = "one of several engine steps streamed in one chunk: the chunk's time is split evenly among them"
TRIMMED_FLAG = "the engine accepted more tokens in this pass than it sent (max_tokens or a stop string cut it)"
UNDRAFTED_FLAG = "a step that drafted nothing (the engine reports only the steps that drafted)"
NOTE_FLAGS = frozenset({PROMPT_PASS_FLAG, ASSUMED_DRAFT_FLAG, MERGED_CHUNK_FLAG, SHARED_CHUNK_FLAG, TRIMMED_FLAG,
                        UNDRAFTED_FLAG})  # say how a record was read; not warnings
UNKNOWN_TOKEN_ID = -1  # the OpenAI-compatible stream carries text, not token ids


@dataclass
class Pass:
    chunks: list[Chunk] = field(default_factory=list)
    n_drafted: int = 0
    n_accepted: int = 0
    n_emitted: int = 0
    prompt_pass: bool = False
    drafted_assumed: bool = False
    t_end: float | None = None  # set where several passes share a chunk; else the last chunk's arrival
    flags: list[str] = field(default_factory=list)

    @property
    def t_end_s(self) -> float:
        return self.t_end if self.t_end is not None else self.chunks[-1].t_s

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
        self._t_last = 0.0  # arrival of the previous chunk (merged steps share the time since)
        self.max_chunk_tokens = 0  # the most tokens one chunk carried (more than k + 1: merged steps)

    def _start(self, chunk: Chunk, tokens: int) -> Pass:
        self._count += 1
        p = Pass(chunks=[chunk], n_emitted=tokens, prompt_pass=self._count == 1)
        self._current = p
        return p

    def add(self, chunk: Chunk) -> list[Pass]:
        try:
            return self._add(chunk)
        finally:
            self._t_last = chunk.t_s

    def _add(self, chunk: Chunk) -> list[Pass]:
        tokens = _chunk_tokens(chunk, self._total)
        self.max_chunk_tokens = max(self.max_chunk_tokens, tokens)
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
        # No counters: a chunk with tokens is a pass of its own (or several, when it holds more than k + 1
        # tokens: merged steps); empty chunks (the final usage chunk) join the last.
        if current is None or tokens:
            if current is not None:
                closed.append(self._close())
            if current is None and self.draft_len and tokens > 1:  # the first token and steps after it
                prompt = self._start(chunk, 1)
                closed.append(prompt)
                closed.extend(self._split_merged(chunk, tokens - 1, first_chunk=True))
            elif current is None or not self.draft_len or tokens <= self.draft_len + 1:
                p = self._start(chunk, tokens)
                if not p.prompt_pass:
                    p.n_accepted = max(0, tokens - 1)
                    p.n_drafted = max(self.draft_len or 0, p.n_accepted)
                    p.drafted_assumed = True
            else:
                closed.extend(self._split_merged(chunk, tokens))
        else:
            current.chunks.append(chunk)
        return closed

    def _split_merged(self, chunk: Chunk, tokens: int, first_chunk: bool = False) -> list[Pass]:
        """A chunk of more than k + 1 tokens: the fewest passes of at most k + 1 tokens that carry it (full
        passes first), sharing the time since the previous chunk (none for the stream's first chunk, whose text the
        prompt pass keeps). All but the last are returned closed."""
        assert self.draft_len
        step = self.draft_len + 1
        sizes = [step] * (tokens // step) + ([tokens % step] if tokens % step else [])
        t_from = chunk.t_s if first_chunk else self._t_last
        made: list[Pass] = []
        for i, size in enumerate(sizes):
            p = self._start(chunk, size)
            if i or first_chunk:
                p.chunks = []  # the chunk's text stays with the first of its passes
            p.n_accepted, p.n_drafted, p.drafted_assumed = size - 1, self.draft_len, True
            p.t_end = t_from + (chunk.t_s - t_from) * (i + 1) / len(sizes)
            p.flags.append(MERGED_CHUNK_FLAG)
            made.append(p)
        self._current = made[-1]
        return made[:-1]

    def _close(self) -> Pass:
        assert self._current is not None
        p = self._current
        self._current = None
        return p

    def finish(self) -> list[Pass]:
        """The last pass (at the end of the stream, or with what arrived before it broke)."""
        return [self._close()] if self._current is not None else []


def chunk_token_counts(chunks: list[Chunk]) -> list[int]:
    """Tokens each chunk carried, in order (see ``_chunk_tokens``)."""
    counts: list[int] = []
    total: int | None = None
    for c in chunks:
        counts.append(_chunk_tokens(c, total))
        if c.completion_tokens is not None:
            total = max(total or 0, c.completion_tokens)
        elif counts[-1]:
            total = (total or 0) + counts[-1]
    return counts


MAX_PLACEMENT_CELLS = 4_000_000  # steps x undrafted steps: beyond this the placement is greedy (and said so)


def _place_undrafted(sizes: list[int], undrafted: int, boundaries: list[int]) -> tuple[list[bool], bool]:
    """The order of the drafted steps (False; their own order is the engine's) and the ``undrafted`` one-token
    steps (True) after the first token, such that no step's tokens straddle a chunk boundary (one step's tokens
    arrive in one chunk). Returns one such order and whether it is the only one. Counted by dynamic
    programming over (drafted steps placed, undrafted placed), capped at 2 ways."""
    n = len(sizes)
    if undrafted == 0:
        return [False] * n, True
    if (n + 1) * (undrafted + 1) > MAX_PLACEMENT_CELLS:
        return [False] * n + [True] * undrafted, False
    cuts = set(boundaries)
    start = [1]
    for size in sizes:
        start.append(start[-1] + size)

    def fits(i: int, j: int) -> bool:  # drafted step i placed after j undrafted ones straddles no boundary
        p = start[i] + j
        return not any(b in cuts for b in range(p + 1, p + sizes[i]))

    ways = [[0] * (undrafted + 2) for _ in range(n + 2)]
    ways[n][undrafted] = 1
    for i in range(n, -1, -1):
        for j in range(undrafted, -1, -1):
            if i == n and j == undrafted:
                continue
            w = ways[i + 1][j] if i < n and fits(i, j) else 0
            w += ways[i][j + 1] if j < undrafted else 0
            ways[i][j] = min(w, 2)
    if ways[0][0] == 0:  # the chunks fit no order (a step split over chunks): greedy, not exact
        return [False] * n + [True] * undrafted, False
    order: list[bool] = []
    i = j = 0
    while i < n or j < undrafted:
        if i < n and fits(i, j) and ways[i + 1][j]:
            order.append(False)
            i += 1
        else:
            order.append(True)
            j += 1
    return order, ways[0][0] == 1


def passes_from_steps(chunks: list[Chunk], per_step_accepted: list[int],
                      per_step_drafted: list[int]) -> tuple[list[Pass], bool]:
    """Every pass of a request rebuilt from the engine's own per-step lists (vLLM ``detailed``), and whether
    every pass's place in the stream is certain.

    The stream's first token is the prompt pass; then the steps in the engine's order, each sending accepted + 1
    tokens. The engine lists only steps that drafted: tokens the steps do not explain are single-token steps
    that drafted nothing, placed so that no step's tokens straddle two chunks (``_place_undrafted``; where
    several places fit, one is taken and the result says so). A merged chunk's steps share its time evenly. A
    step that sent fewer tokens than it accepted + 1 (``max_tokens``) keeps the engine's counts and is flagged."""
    steps = list(zip(per_step_accepted, per_step_drafted, strict=True))
    counts = chunk_token_counts(chunks)
    total = sum(counts)
    boundaries, at = [], 0
    for n in counts:
        at += n
        boundaries.append(at)
    undrafted = max(0, total - 1 - sum(a + 1 for a, _ in steps))
    order, certain = _place_undrafted([a + 1 for a, _ in steps], undrafted, boundaries)
    # (pass, index of the chunk its last token arrived in; None: nothing sent)
    placed: list[tuple[Pass, int | None]] = []

    def chunk_of(token: int) -> int:
        return next(i for i, b in enumerate(boundaries) if b > token)

    if total:
        placed.append((Pass(n_emitted=1, prompt_pass=True), chunk_of(0)))
    position, si = 1, 0
    for is_undrafted in order:
        if is_undrafted:
            p, size = Pass(n_emitted=1, flags=[UNDRAFTED_FLAG]), 1
        else:
            accepted, drafted = steps[si]
            si += 1
            p, size = Pass(n_drafted=drafted, n_accepted=accepted), accepted + 1
        p.n_emitted = max(0, min(size, total - position))
        if p.n_emitted < size:
            p.flags.append(TRIMMED_FLAG)
        placed.append((p, chunk_of(position + p.n_emitted - 1) if p.n_emitted else None))
        position += p.n_emitted
    passes: list[Pass] = []
    t_prev: float | None = None
    for ci, chunk in enumerate(chunks):
        group = [p for p, c in placed if c == ci]
        if not group:
            if passes:
                passes[-1].chunks.append(chunk)  # an empty chunk (the final usage chunk) joins the last pass
            continue
        t_from = chunk.t_s if t_prev is None else t_prev
        for i, p in enumerate(group):
            p.chunks = [chunk] if i == 0 else []
            if len(group) > 1:
                p.t_end = t_from + (chunk.t_s - t_from) * (i + 1) / len(group)
                if not p.prompt_pass:
                    p.flags.append(SHARED_CHUNK_FLAG)
        passes.extend(group)
        t_prev = chunk.t_s
    for p, c in placed:  # steps whose tokens were all cut: counted by the engine, never sent
        if c is None and passes:
            p.t_end = passes[-1].t_end_s
            passes.append(p)
    return passes, certain


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
        flags.extend(f for f in p.flags if f not in flags)
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
