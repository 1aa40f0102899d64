"""Sentences the window shows about a run's end and a failed load, worded once for every surface."""

from __future__ import annotations

# Why a run ended, as the end of "Finished: …" (the run panel shows the same words in brackets).
FINISH_WORDS = {"eos": "the model ended its answer", "max_new_tokens": "max new tokens reached",
                "context_window": "the context window is full", "stop": "stopped", "interrupted": "interrupted",
                "terminated": "terminated", "error": "failed",
                "killed": "the run's process ended without an end record (killed or crashed)"}
NO_END_REASON = "killed"  # a trace without RunFinished: its process never wrote one


def full_stop(text: str) -> str:
    """``text`` as a sentence: stripped, ending in a full stop unless it already ends a sentence."""
    text = text.strip()
    return text if not text or text.endswith((".", "!", "?", "…")) else text + "."


def finish_sentence(reason: str, elapsed_s: float, iterations: int) -> str:
    """'Finished after 152.2 s and 96 iterations: the model ended its answer.' / 'Stopped after …'."""
    took = f"after {elapsed_s:.1f} s and {iterations:,} iteration{'s' if iterations != 1 else ''}"
    if reason in ("stop", "interrupted", "terminated"):
        return f"Stopped {took}."
    return f"Finished {took}: {FINISH_WORDS.get(reason, reason)}."
