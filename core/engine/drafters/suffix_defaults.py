"""The suffix drafter's default settings, without the drafter (torch): the command line's --help and the pair
spec read them, and neither should have to import torch for five numbers (see ``suffix`` for what they mean)."""

# vLLM's names (``suffix_decoding_*``). Its tree depth and minimum probability; not its factor (1.0) or its
# 10,000 cached responses. On this machine's CPU a verify pass of up to ~10 tokens costs about one plain step
# (docs/bench-demo-suffix.md §2), so longer drafts are nearly free: a replay of recorded greedy outputs put
# factor 3 ahead of 1 and 2 on every prompt kind. Where longer passes cost more, adaptive k
# (core/adaptive_suffix) trims the draft by its own count ratios and the measured verify costs. The cache is
# smaller: a Python trie costs more per node than vLLM's C++ one, and a desktop session holds tens of runs,
# not a server's thousands of requests.
DEFAULT_MAX_TREE_DEPTH = 24
DEFAULT_MAX_SPEC_FACTOR = 3.0
DEFAULT_MIN_TOKEN_PROB = 0.1
DEFAULT_MAX_CACHED_REQUESTS = 64
DEFAULT_BACKOFF = True  # not vLLM's: see suffix's docstring


def check_suffix_parameters(max_tree_depth: int, max_spec_factor: float, min_token_prob: float,
                            max_cached_requests: int) -> None:
    """ValueError naming the first parameter out of range (one sentence, for the CLI and the loaders)."""
    if max_tree_depth < 2:
        raise ValueError(f"max_tree_depth must be at least 2 (a match and one drafted token), got {max_tree_depth}")
    if not max_spec_factor > 0.0 or max_spec_factor != max_spec_factor or max_spec_factor == float("inf"):
        raise ValueError(f"max_spec_factor must be a positive number, got {max_spec_factor}")
    if not 0.0 <= min_token_prob <= 1.0:
        raise ValueError(f"min_token_prob must be between 0 and 1, got {min_token_prob}")
    if max_cached_requests < 0:
        raise ValueError(f"max_cached_requests must be 0 (no cache) or more, got {max_cached_requests}")
