"""Names shared by the engine, the CLI and the app, declared once and free of torch (the GUI imports it at start).

A drafter kind is added here and nowhere else; the CLI's choices, the app's lists and the loaders' checks
read these tuples.
"""

from __future__ import annotations

# How proposals are made: a small draft model, n-gram lookup in the context, suffix decoding (the context and
# earlier responses), the target's own early layers, an EAGLE-3 head, the target's own multi-token-prediction
# (MTP) layers.
DRAFTER_KINDS: tuple[str, ...] = ("model", "lookup", "suffix", "early-exit", "eagle", "mtp")
DEFAULT_DRAFTER = "model"
# Drafters that need no weights beyond the target's (the context, or the target's own layers and MTP heads):
# a loaded pair switches to one of them in place, without loading the target again.
IN_PLACE_DRAFTERS: frozenset[str] = frozenset({"lookup", "suffix", "early-exit", "mtp"})
# The drafters a user can pick when they have no draft model, as the refusals name them.
NO_DRAFT_NEEDED = "lookup, suffix, early-exit or mtp"
DEMO_DRAFTER = "eagle"  # the embedded demo's default: its EAGLE-3 head (resources/demo_eagle)


def default_drafter(target: str) -> str:
    """The drafter used when none is chosen: the demo's EAGLE-3 head for the demo, a draft model otherwise."""
    return DEMO_DRAFTER if target == "demo" else DEFAULT_DRAFTER


# What k means for the MTP drafter, said once for the CLI's help, the app and the docs.
MTP_K_MEANING = ("the target's own multi-token-prediction (MTP) layers propose (DeepSeek-V3, GLM-4.5 and other "
                 "families whose config declares num_mtp_layers): proposal i comes from MTP layer i; past the "
                 "last layer (k > num_mtp_layers) that layer drafts on, fed its own output, as vLLM's MTP does")

DRAFTER_HELP = {
    "model": "a small draft model proposes tokens",
    "lookup": "prompt lookup: continue an n-gram already in the context (no draft model)",
    "suffix": "suffix decoding: the most frequent continuation of the context's suffix, in this run and in "
              "earlier responses (no draft model)",
    "early-exit": "the target's first layers and its head propose (self-speculation)",
    "eagle": "an EAGLE-3 head reads the target's hidden states and proposes from a reduced vocabulary",
    "mtp": MTP_K_MEANING,
}
# Drafters whose cost does not grow with the number of proposals (a lookup finds a whole continuation at
# once): the cost model charges them per iteration, not per proposal.
DRAFT_COST_PER_ITERATION: frozenset[str] = frozenset({"lookup", "suffix"})


def draft_cost_per_token(drafter: str) -> bool:
    return drafter not in DRAFT_COST_PER_ITERATION

# Drafters for which adaptive k is on unless the user turns it off (prompt lookup: its adaptive k proposes only
# the part of a match that is predicted to pay, and nothing where nothing pays).
ADAPTIVE_BY_DEFAULT: frozenset[str] = frozenset({"lookup"})


def adaptive_k_default(drafter: str) -> bool:
    return drafter in ADAPTIVE_BY_DEFAULT


# The k a run starts at when the user has not chosen one. An EAGLE-3 head's acceptance falls off after
# its first proposals (the demo's head is trained two steps deep), so it starts lower than a draft model;
# the serving engines' EAGLE-3 examples draft 3. The app's "which k" plot then says where the optimum is.
DEFAULT_K = 4
# Suffix decoding caps each draft itself (match length x max_spec_factor, min_token_prob): k is only its ceiling.
# MTP: SGLang's DeepSeek-V3 NEXTN example drafts 3 (--speculative-num-steps 3) with the one layer it ships;
# past the layers a chain's acceptance falls off like an EAGLE head's.
DEFAULT_K_BY_DRAFTER: dict[str, int] = {"eagle": 3, "suffix": 8, "mtp": 3}


def default_k(drafter: str) -> int:
    return DEFAULT_K_BY_DRAFTER.get(drafter, DEFAULT_K)
