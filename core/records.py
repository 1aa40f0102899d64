"""Record types: what one iteration of the loop reports.

Plain dataclasses of Python scalars: no torch tensors survive an iteration, so records are cheap to keep,
safe to hand to another thread and trivially serialisable. Every consumer (CLI, metrics, trace files, GUI)
reads these; nothing recomputes what the loop already measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any


class TokenStatus(str, Enum):
    """The fate of a token in one iteration."""

    ACCEPTED = "accepted"  # a draft proposal the target kept
    REJECTED = "rejected"  # a draft proposal discarded (not part of the output)
    CORRECTION = "correction"  # the target's own token after a rejection
    BONUS = "bonus"  # the target's own token after every proposal was accepted
    TARGET = "target"  # the target's own token in an iteration with no proposals (a plain step through the loop)
    PLAIN = "plain"  # a token from plain (target-only) decoding

    @property
    def committed(self) -> bool:
        return self is not TokenStatus.REJECTED


@dataclass(frozen=True)
class ControlValues:
    """The control values one iteration ran with (a snapshot, never shared mutable state)."""

    k: int = 4
    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    adaptive_k: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class TokenRecord:
    """One token seen in an iteration (committed or rejected).

    ``p`` is the target's processed probability of the token at its position, ``q`` the drafter's proposal
    probability (None for tokens the target supplied). Under greedy decoding p and q are the softmax of the
    raw logits, reported for information; the rule itself compares arg-maxes.
    """

    token_id: int
    text: str
    status: TokenStatus
    position: int  # index in the generated continuation (0 = first new token)
    p: float | None = None
    q: float | None = None
    top5: list[tuple[int, float]] = field(default_factory=list)  # target's top 5 (id, prob) at this position
    # The top 5's decoded texts, in the same order: they travel with the record because a remote worker's or a
    # replay's reader has no tokenizer to name the ids (empty in traces written before they were recorded).
    top5_text: list[str] = field(default_factory=list)

    @property
    def accept_prob(self) -> float | None:
        """min(1, p/q) for a proposal; None for target-supplied tokens."""
        if self.p is None or self.q is None:
            return None
        if self.q <= 0.0:
            return 1.0
        return min(1.0, self.p / self.q)


SPECULATIVE_MODE = "speculative"  # this loop drafted and verified: every time is split and measured
PLAIN_MODE = "plain"  # one target step, nothing drafted
# A serving engine's verify pass, read while attached: drafted and accepted counts are the engine's, its time is
# the client's view of the whole pass (no draft/verify split), so it counts for acceptance and never for costs.
ATTACHED_MODE = "attached"
JUDGING_MODES = frozenset({SPECULATIVE_MODE, ATTACHED_MODE})  # records whose proposals were judged


@dataclass
class IterationRecord:
    """Everything one iteration did and cost. Times in milliseconds; ``t_*_s`` are time.monotonic()."""

    iteration: int
    mode: str  # SPECULATIVE_MODE, PLAIN_MODE or ATTACHED_MODE
    drafter: str
    controls: ControlValues
    tokens: list[TokenRecord]
    n_drafted: int
    n_accepted: int
    n_emitted: int
    draft_ms: float
    verify_ms: float
    rollback_ms: float
    iteration_ms: float
    context_len: int  # committed tokens (prompt + generated) after this iteration
    generated_len: int  # generated tokens after this iteration
    t_start_s: float
    t_end_s: float
    finished: bool = False
    finish_reason: str = ""  # "eos", "max_new_tokens", "stop", "error"
    # Joined by the session (observations, never derived numbers: those are the measurement's snapshot)
    memory: dict[str, float] = field(default_factory=dict)  # joined memory sample (flat, units in names)
    flags: list[str] = field(default_factory=list)  # paging-detector and machine-busy sentences
    # Process CPU time during the iteration (all threads) and involuntary context switches: a step that got
    # far less CPU than its wall time while being preempted ran on a busy machine (see core/measure/busy.py).
    cpu_ms: float | None = None
    preempted: int | None = None
    # Why k was what it was: ``explore`` marks an iteration run at another k to measure a verify pass length
    # never timed yet (issue: verify costs from real passes); ``k_note`` is the adaptive controller's reason
    # when it did not simply take the best predicted k (exploring, probing, hysteresis).
    explore: bool = False
    k_note: str = ""
    # What the drafter matched, for the proposal it made (None: nothing proposed, or a drafter that does not
    # match): prompt lookup's n-gram size or suffix decoding's match length, in tokens; and suffix decoding's
    # expected number of accepted tokens (the sum of its drafted tokens' estimated probabilities).
    match_len: int | None = None
    expected_accepted: float | None = None

    @property
    def k(self) -> int:
        return self.controls.k

    @property
    def draft_step_ms(self) -> float | None:
        return self.draft_ms / self.n_drafted if self.n_drafted else None

    @property
    def committed_tokens(self) -> list[TokenRecord]:
        return [t for t in self.tokens if t.status.committed]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["controls"] = asdict(self.controls)
        d["tokens"] = [asdict(t) for t in self.tokens]
        return d


@dataclass
class BaselineRecord:
    """Plain target steps measured on the live context and thrown away: how traces written before baselines
    committed their tokens hold them (read and replayed, never produced now: a baseline is now a run of plain
    iterations in the stream)."""

    iterations_done: int  # when the plain steps ran (older traces: after_iteration; the readers take both)
    context_len: int
    step_ms: list[float]  # one plain step each
    verify_ms_by_len: dict[int, float] = field(default_factory=dict)  # pass length -> ms (optional sweep)
    t_s: float = 0.0

    @property
    def median_step_ms(self) -> float:
        s = sorted(self.step_ms)
        n = len(s)
        if n == 0:
            return float("nan")
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


@dataclass
class DrillEvent:
    """A paging drill started or ended at an iteration boundary (an event in the record stream).

    ``iterations_done`` is how many iterations the run had done when the state changed, which is also the
    number of the first iteration in the new state (iterations count from 0). The same state is also in every
    iteration's memory sample as ``drill_{model}_layers_count``, so a trace keeps it.
    """

    kind: str  # "start" or "end"
    model: str  # "draft" or "target"
    layers: int  # layers moved
    total_layers: int
    place: str  # where they went: "disk" (from a CPU) or "cpu" (host memory, from an accelerator)
    iterations_done: int  # older traces name it before_iteration; the event log reader takes both
    moved_bytes: int = 0
    t_s: float = 0.0  # time.monotonic()
    error: str = ""  # why the drill could not start or end ("" when it did)

    @property
    def label(self) -> str:
        if self.error:
            return f"drill failed: {self.error}"
        where = "disk" if self.place == "disk" else "host memory"
        if self.kind == "start":
            return f"drill: {self.model} {self.layers}/{self.total_layers} layers → {where}"
        return f"drill end: {self.model} layers back"


@dataclass
class RunResult:
    """The outcome of a whole run (also returned when stopped early)."""

    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    iterations: list[IterationRecord]
    finish_reason: str
    elapsed_s: float

    @property
    def n_drafted(self) -> int:
        return sum(r.n_drafted for r in self.iterations)

    @property
    def n_accepted(self) -> int:
        return sum(r.n_accepted for r in self.iterations)

    # Rates (α, tokens/s, speed-ups) are not here: core/measure/measurement.py owns every derived number.
