"""``specscope verify``: check that speculation keeps the target's output on the user's own pair.

Two checks over a prompt set:

* Greedy: speculative output equals plain decoding token for token, for several k. A difference is
  reported with the target's near-tie gap at that position (two candidates within rounding of each other
  can swap between a one-token and a (k+1)-token pass: a numerics effect, not a rule error).
* Sampling: at real contexts (the end of each prompt, and a few greedy tokens further), the first token
  the acceptance rule emits is drawn many times (vectorised: proposals from q, accepted when u < p/q, the
  rest drawn from the residual) and compared with the target's p by a chi-square test over the most likely
  tokens plus a pooled remainder. The same draws go through two wrong rules (resample from p after a
  rejection; keep the draft's token regardless of p) to show the test would catch them there, and each
  context reports TV(p, q): where the draft already equals the target, no rule can be told apart.

The draws and the test are in ``verify_statistics``; this module runs the checks, reports them and parses
the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from specscope.core.commands.cli_checks import (
    EXIT_FAILURE,
    MAX_NEW_TOKENS,
    CliError,
    Interrupted,
    SignalGuard,
    check_writable,
    emit,
    print_error,
    progress_line,
)
from specscope.core.commands.verify_arguments import (  # noqa: F401 - the CLI's names
    MAX_DRAWS,
    MAX_OFFSETS,
    add_arguments,
)
from specscope.core.commands.verify_statistics import (
    RULES,
    chi_square_top,
    simulate_first_token,
    total_variation,
    wrong_rule_gaps,
)
from specscope.core.controls import K_MAX, K_MIN, Controls
from specscope.core.engine.neartie import first_difference, near_tie_report
from specscope.core.engine.pair import ModelPair
from specscope.core.engine.sampling import processed_probs
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.progress import Progress, report_progress
from specscope.core.prompts import Prompt, load_prompt_file, load_prompt_sets
from specscope.core.records import ControlValues
from specscope.core.trace.errors import TraceError
from specscope.core.trace.files import atomic_text_files


# ---- report -----------------------------------------------------------------------------------------
@dataclass
class GreedyCheck:
    prompt_id: str
    k: int
    n_tokens: int
    equal: bool
    first_difference: int | None = None  # position in the generated text
    detail: str = ""


@dataclass
class SamplingCheck:
    prompt_id: str
    context_len: int
    tv: float  # total variation between p and q at this context
    draws: int
    pvalues: dict[str, float] = field(default_factory=dict)  # rule -> chi-square p-value
    gaps: dict[str, float] = field(default_factory=dict)  # wrong rule -> exact TV of its output from p
    bins: int = 0
    note: str = ""

    def passed(self, alpha: float) -> bool:
        return self.pvalues.get("correct", 1.0) >= alpha

    def wrong_rules_caught(self, alpha: float) -> bool:
        return all(self.pvalues.get(r, 1.0) < alpha for r in RULES[1:])

    def power_text(self, alpha: float) -> str:
        parts = []
        for rule in RULES[1:]:
            if self.pvalues.get(rule, 1.0) < alpha:
                parts.append(f"{rule} caught")
            elif self.gaps.get(rule, 1.0) < 0.01:
                parts.append(f"{rule} indistinguishable here (its output is within TV "
                             f"{self.gaps[rule]:.3f} of p)")
            else:
                parts.append(f"{rule} NOT caught")
        return "; ".join(parts)


@dataclass
class VerifyReport:
    greedy: list[GreedyCheck]
    sampling: list[SamplingCheck]
    alpha: float
    controls: ControlValues
    description: str = ""
    stopped_by: str = ""  # the signal that stopped the checks before the last ("SIGINT"), if one did

    @property
    def greedy_ok(self) -> bool:
        return all(g.equal for g in self.greedy)

    @property
    def sampling_ok(self) -> bool:
        return all(s.passed(self.alpha) for s in self.sampling if s.pvalues)

    @property
    def ok(self) -> bool:
        return self.greedy_ok and self.sampling_ok

    @property
    def sampling_ran(self) -> bool:
        """Some context got a chi-square test (contexts where the drafter proposed nothing test nothing)."""
        return any(s.pvalues for s in self.sampling)

    def result_line(self) -> str:
        """The verdict, naming a check that did not run: a pass is never claimed for a check that was skipped."""
        if not self.ok:
            return "Result: MISMATCH FOUND" + (f" (then stopped by {self.stopped_by})" if self.stopped_by else "")
        if self.stopped_by:
            n = len(self.greedy) + len(self.sampling)
            return (f"Result: stopped by {self.stopped_by} after {n} check{'s' * (n != 1)}, none of which found a "
                    "mismatch; the checks left were not run")
        sampling_missing = ("no context was tested: --draws 0 or no --offsets" if not self.sampling
                            else "the drafter proposed nothing at any tested context")
        missing = ["the greedy check did not run (--no-greedy)"] if not self.greedy else []
        if not self.sampling_ran:
            missing.append(f"the sampling check did not run ({sampling_missing})")
        if len(missing) == 2:
            return "Result: nothing was checked: " + "; ".join(missing)
        if missing:
            ran = "sampling" if not self.greedy else "greedy"
            return f"Result: speculation keeps the target's output in the {ran} check; {missing[0]}"
        return "Result: speculation keeps the target's output"

    def to_dict(self) -> dict[str, Any]:
        return {"description": self.description, "alpha": self.alpha, "controls": asdict(self.controls),
                "greedy": [asdict(g) for g in self.greedy], "sampling": [asdict(s) for s in self.sampling],
                "checks_run": {"greedy": bool(self.greedy), "sampling": self.sampling_ran},
                "stopped_by": self.stopped_by or None, "ok": self.ok and not self.stopped_by,
                "result": self.result_line().removeprefix("Result: ")}

    def lines(self) -> list[str]:
        out = [f"Pair: {self.description}"]
        if self.greedy:
            same = sum(g.equal for g in self.greedy)
            out.append(f"Greedy: {same} of {len(self.greedy)} speculative runs identical to plain decoding")
            out += [f"  {g.prompt_id} k={g.k}: differs at token {g.first_difference} ({g.detail})"
                    for g in self.greedy if not g.equal]
        if self.sampling:
            c = self.controls
            out.append(f"Sampling (temperature {c.temperature:g}, top-k {c.top_k}, top-p {c.top_p:g}): "
                       f"first-token chi-square, alpha {self.alpha:g}; p-values for the correct rule | "
                       "resample from p | keep the draft's token")
            for s in self.sampling:
                if not s.pvalues:
                    out.append(f"  {s.prompt_id} @{s.context_len}: {s.note}")
                    continue
                verdict = "ok" if s.passed(self.alpha) else "FAIL"
                pv = " | ".join(f"{s.pvalues[r]:.3g}" for r in RULES)
                out.append(f"  {s.prompt_id} @{s.context_len}: TV(p,q)={s.tv:.3f}  p={pv}  {verdict}; "
                           f"{s.power_text(self.alpha)}")
        out.append(self.result_line())
        return out


# ---- the checks -------------------------------------------------------------------------------------
def _near_tie_detail(pair: ModelPair, prompt_ids: list[int], spec_ids: list[int], plain_ids: list[int],
                     position: int) -> str:
    tie = near_tie_report(pair.target.model, prompt_ids, spec_ids, plain_ids)
    if tie is None:
        return (f"speculative {spec_ids[position] if position < len(spec_ids) else 'ended'} vs plain "
                f"{plain_ids[position] if position < len(plain_ids) else 'ended'}")
    return str(tie.explain(pair.token_text(tie.token_a), pair.token_text(tie.token_b)))


@torch.inference_mode()
def _target_probs(pair: ModelPair, context: list[int], controls: ControlValues) -> torch.Tensor:
    model = pair.target.model
    inp = torch.tensor([context], dtype=torch.long, device=pair.target.device)
    logits = model(inp, logits_to_keep=1).logits[0, -1, : pair.vocab_size]
    return processed_probs(logits.unsqueeze(0), controls)[0].double().cpu()


def _draft_probs(pair: ModelPair, context: list[int], controls: ControlValues,
                 generator: torch.Generator) -> torch.Tensor | None:
    """The distribution the drafter really proposes its first token from here (one-hot if deterministic)."""
    pair.drafter.reset(context)
    with torch.inference_mode():
        layers = pair.drafter.feature_layers
        if layers and len(context) > 1:  # a feature-reading drafter (EAGLE-3) needs the target's pass first
            inp = torch.tensor([context[:-1]], dtype=torch.long, device=pair.target.device)
            hidden = pair.target.model(inp, output_hidden_states=True, logits_to_keep=1).hidden_states
            pair.drafter.observe_target_features(0, torch.cat([hidden[i][0] for i in layers], dim=-1))
        proposal = pair.drafter.propose(list(context), 1, controls, generator)
    pair.drafter.reset(context)  # drop the cache it built for this probe
    if not proposal.tokens:
        return None
    if proposal.q_probs is not None:
        return proposal.q_probs[0, : pair.vocab_size].double().cpu()
    q = torch.zeros(pair.vocab_size, dtype=torch.float64)
    q[proposal.tokens[0]] = 1.0
    return q


def sampling_check(pair: ModelPair, prompt_id: str, context: list[int], controls: ControlValues,
                   draws: int, top_n: int, seed: int) -> SamplingCheck:
    gen = torch.Generator().manual_seed(seed)
    p = _target_probs(pair, context, controls)
    q = _draft_probs(pair, context, controls, gen)
    if q is None:
        return SamplingCheck(prompt_id, len(context), 0.0, 0,
                             note="the drafter proposes nothing here: a plain step, exact by construction")
    check = SamplingCheck(prompt_id, len(context), total_variation(p, q), draws, gaps=wrong_rule_gaps(p, q))
    for rule in RULES:
        counts = simulate_first_token(p, q, draws, rule, gen)
        result = chi_square_top(counts, p, top_n)
        check.pvalues[rule] = result.pvalue
        check.bins = result.df + 1
    return check


def verify_pair(
    pair: ModelPair,
    prompts: Sequence[Prompt],
    k_values: Sequence[int] = (2, 4),
    max_new_tokens: int = 48,
    sampling: ControlValues | None = None,
    context_offsets: Sequence[int] = (0, 8),
    draws: int = 200_000,
    top_n: int = 60,
    alpha: float = 1e-3,
    seed: int = 0,
    greedy: bool = True,
    progress: Progress | None = None,
    report: VerifyReport | None = None,
) -> VerifyReport:
    """Greedy equality for each prompt and k, then the first-token sampling test at real contexts.

    Contexts are each prompt plus the first ``offset`` tokens of its plain greedy continuation. Each check is
    added to ``report`` (a new one if None) as it ends, so a caller that a signal interrupts keeps those done.
    """
    controls = sampling or ControlValues(temperature=1.0)
    decoder = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter, token_text=pair.token_text)
    opts = DecodeOptions(max_new_tokens=max_new_tokens, eos_token_ids=pair.eos_token_ids, record_tokens=False)
    report = report if report is not None else VerifyReport([], [], alpha, controls, pair.description)
    steps = len(prompts) * ((1 + len(k_values)) if greedy else 1) + len(prompts) * len(context_offsets)
    done = 0

    def tick(message: str) -> None:
        nonlocal done
        done += 1
        report_progress(progress, message, done / max(1, steps))

    need_plain = greedy or any(o > 0 for o in context_offsets)
    for prompt in prompts:
        ids = pair.encode_prompt(prompt.text)
        plain_ids: list[int] = []
        if need_plain:
            plain_ids = decoder.run(ids, Controls(ControlValues(k=1)), opts, plain=True).token_ids
            tick(f"{prompt.id}: plain decoding")
        if greedy:
            for k in k_values:
                spec_ids = decoder.run(ids, Controls(ControlValues(k=k)), opts).token_ids
                diff = first_difference(spec_ids, plain_ids)
                detail = "" if diff is None else _near_tie_detail(pair, ids, spec_ids, plain_ids, diff)
                report.greedy.append(GreedyCheck(prompt.id, k, len(plain_ids), diff is None, diff, detail))
                tick(f"{prompt.id}: speculative k={k}")
        if draws > 0:
            for offset in context_offsets:
                context = ids + plain_ids[:offset]
                report.sampling.append(sampling_check(pair, prompt.id, context, controls, draws, top_n,
                                                      seed + len(report.sampling)))
                tick(f"{prompt.id}: sampling test at {len(context)} tokens")
    return report


# ---- command line -----------------------------------------------------------------------------------
def _int_list(text: str, name: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} takes comma-separated integers, got {text!r}") from None


def select_prompts(choice: str, limit: int = 0) -> list[Prompt]:
    if Path(choice).suffix.lower() in (".json", ".txt") or os.path.lexists(choice):
        return load_prompt_file(choice)  # says why a path that is missing, a FIFO or too large cannot be used
    sets = load_prompt_sets()
    kinds = list(sets) if choice == "all" else [c.strip() for c in choice.split(",") if c.strip()]
    unknown = [k for k in kinds if k not in sets]
    if unknown:
        raise ValueError(f"unknown prompt set {unknown[0]!r}: choose from {', '.join(sets)} or all")
    return [p for k in kinds for p in (sets[k][:limit] if limit > 0 else sets[k])]


def main(args: argparse.Namespace) -> int:
    from specscope.core.commands.pair_arguments import spec_from_args
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import ModelLoadError

    def progress(message: str, fraction: float) -> None:
        progress_line(f"[{fraction:4.0%}] {message}")

    try:
        k_values = _int_list(args.k, "k")
        offsets = _int_list(args.offsets, "offsets")
        if not k_values or any(not K_MIN <= k <= K_MAX for k in k_values):
            raise ValueError(f"--k takes draft lengths from {K_MIN} to {K_MAX}, got {args.k!r}")
        if any(not 0 <= o <= MAX_NEW_TOKENS for o in offsets) or len(offsets) > MAX_OFFSETS:
            raise ValueError(f"--offsets takes up to {MAX_OFFSETS} whole numbers from 0 to {MAX_NEW_TOKENS:,}, "
                             f"got {args.offsets!r}")
        if not offsets and args.draws > 0:
            raise ValueError("--offsets is empty, so the sampling test would test nothing: give contexts such as "
                             "0,8, or --draws 0 to skip the sampling test")
        if args.no_greedy and args.draws == 0:
            raise ValueError("--no-greedy with --draws 0 leaves nothing to check: drop one of them")
        prompts = select_prompts(args.prompts, args.limit)
        if not prompts:
            raise ValueError(f"--prompts {args.prompts} holds no prompts: give a set or a file with at least one")
        controls = ControlValues(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
        if controls.greedy and args.draws > 0:
            raise ValueError("the sampling test needs --temperature above 0 (or --draws 0)")
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json_path:
        check_writable(Path(args.json_path), "--json")
    try:
        pair = load_pair(spec_from_args(args), progress)
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    for warning in pair.target.warnings:
        print(f"specscope: warning: {warning}", file=sys.stderr)
    report = VerifyReport([], [], args.alpha, controls, pair.description)
    with SignalGuard().installed() as guard:  # the first SIGINT or SIGTERM stops the checks at once
        try:
            verify_pair(pair, prompts, k_values=k_values, max_new_tokens=args.max_new_tokens, sampling=controls,
                        context_offsets=offsets, draws=args.draws, top_n=args.top_n, alpha=args.alpha,
                        seed=args.seed, greedy=not args.no_greedy, progress=progress, report=report)
        except Interrupted as exc:  # the check under way is left out; those done are reported
            report.stopped_by = exc.signal_name
            stopped: Interrupted | None = exc
        else:
            stopped = None
        finally:
            guard.raising = False  # from here a signal is only noted: the checks done are written first
        pair.release()
        emit("\n".join(report.lines()))
        if args.json_path:
            try:
                with atomic_text_files([Path(args.json_path)]) as (f,):
                    f.write(json.dumps(report.to_dict(), indent=1))
            except TraceError as exc:
                done = "the checks done are above" if stopped is not None else "the report above is complete"
                raise CliError(f"could not write the JSON report: {exc} ({done})", exit_code=EXIT_FAILURE) from None
        if stopped is not None:
            n = len(report.greedy) + len(report.sampling)
            print_error(f"stopped by {stopped.signal_name} after {n} check{'s' * (n != 1)}; the checks done are "
                        "above" + (f" and in {args.json_path}" if args.json_path else ""))
            return stopped.exit_code
        if guard.late is not None:
            print_error(f"{guard.late.signal_name} received after the checks ended; the report above is complete")
            return guard.late.exit_code
    return 0 if report.ok else 1
