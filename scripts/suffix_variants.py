"""Suffix-drafter variants that were measured and not shipped (issue 30; docs/bench-demo-suffix.md §1).

Each is the shipped drafter with one rule changed, so a replay (scripts/suffix_replay.py --methods ideas)
compares rules, not implementations:

- ``extend="tree"``: a draft cut short by the cap (match length × max_spec_factor) goes on along the most
  frequent children up to k (the cap only chooses among match lengths);
- ``extend="recent"``: a draft of the run's shorter than k goes on with what followed the most recent earlier
  occurrence of the longest suffix of context + draft (positional locality: copying a table or a YAML file);
- ``score="shrunk"``: match lengths compared by the expected accepted count of the shrunk count ratios
  (count / (parent's count + 1)) instead of the raw ones, which favours continuations seen more than once;
- ``score="longest"``: the longest match with a draft wins, whatever its counts;
- ``substitute=True``: where nothing matches, the context's last token is taken as a substitute for another
  (a delimiter changed by the reformatting): the context without it is matched and the draft goes on from
  the most frequent other continuation; the backoff's guess only if that finds nothing.
"""

from __future__ import annotations

from specscope.core.engine.drafters.suffix import LOCAL_SEQ, SuffixDrafter
from specscope.core.engine.drafters.suffix_tree import SuffixDraft, SuffixTree


def recent_continuation(seq: list[int], want: int, max_n: int = 24) -> list[int]:
    """What followed the most recent earlier occurrence of the longest suffix of ``seq`` (up to ``max_n``
    tokens), ``want`` tokens of it, copying on from the copy itself where it runs into the end."""
    size = len(seq)
    for n in range(min(max_n, size - 1), 0, -1):
        pattern = seq[size - n:]
        for end in range(size - 2, n - 2, -1):
            if seq[end - n + 1 : end + 1] == pattern:
                out = list(seq)
                for i in range(want):
                    out.append(out[end + 1 + i])
                return out[size:]
    return []


class VariantDrafter(SuffixDrafter):
    def __init__(self, extend: str = "", score: str = "", substitute: bool = False, **kwargs: object):
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.extend, self.score, self.substitute = extend, score, substitute

    def _tree_of(self, source: str) -> tuple[SuffixTree, list[int]]:
        if source == "run":
            return self._local, self._local.suffix_nodes(LOCAL_SEQ)
        return self.cache.tree, self._cache_nodes()

    def _scored(self, tree: SuffixTree, nodes: list[int], k: int) -> SuffixDraft:
        best, best_value = SuffixDraft(), -1.0
        for match_len, node in enumerate(nodes, start=1):
            draft = tree.best_path(node, min(k, int(match_len * self.max_spec_factor + 1e-6)), self.min_token_prob)
            if not draft.tokens:
                continue
            value, p = float(match_len), 1.0
            if self.score == "shrunk":
                value = 0.0
                for c in draft.conditional:
                    p *= c
                    value += p
            if value >= best_value:
                draft.match_len, best, best_value = match_len, draft, value
        return best

    def _substituted(self, k: int) -> SuffixDraft:
        tree, last = self._local, self._tokens[-1]
        best = SuffixDraft()
        for match_len, node in enumerate(tree.match_suffixes(self._tokens[:-1][-self.max_tree_depth:]), start=1):
            others = [(tree.count(child), child) for token, child in tree.children(node) if token != last]
            if not others:
                continue
            draft = tree.best_path(max(others)[1], min(k, int(match_len * self.max_spec_factor + 1e-6)),
                                   self.min_token_prob)
            if draft.tokens and draft.score >= best.score:
                draft.match_len, best = match_len, draft
        return best

    def speculate(self, context_ids: list[int], k: int) -> SuffixDraft:
        if self.score:
            self._sync(context_ids)
            run = self._scored(*self._tree_of("run"), k)
            cached = self._scored(*self._tree_of("cache"), k) if len(self.cache) else SuffixDraft()
            use_cache = bool(cached.tokens) and (not run.tokens or cached.match_len > run.match_len)
            self.last_draft, self.last_source = (cached, "cache") if use_cache else (run, "run" if run.tokens else "")
            return self.last_draft
        draft = super().speculate(context_ids, k)
        tokens = list(draft.tokens)
        if self.substitute and self.last_source == "backoff" and self._tokens:
            found = self._substituted(k)
            if found.tokens:
                self.last_draft, self.last_source = found, "run"
                return found
        if not tokens or len(tokens) >= k or self.last_source not in ("run", "cache"):
            return draft
        if self.extend == "tree":
            tree, nodes = self._tree_of(self.last_source)
            tokens = list(tree.best_path(nodes[draft.match_len - 1], k, self.min_token_prob).tokens)
        elif self.extend == "recent" and self.last_source == "run":
            tokens += recent_continuation(self._tokens + tokens, k - len(tokens))
        out = SuffixDraft(tokens=tokens, match_len=draft.match_len, score=draft.score)
        self.last_draft = out
        return out


def anywhere_ceiling(prompt: list[int], output: list[int], earlier: list[list[int]], k: int = 8) -> int:
    """Target passes of a drafter with foresight that may copy from any position of the run (prompt and
    output so far) or of the earlier answers: each pass sends the k tokens, from anywhere, that match the
    output furthest. A bound on every copying rule that sends one draft per pass (matched or not)."""
    context, pos, passes = list(prompt), 0, 0
    while pos < len(output):
        future = output[pos : pos + k]
        best = 0
        for seq in (context, *earlier):
            for start, token in enumerate(seq):
                if token == future[0]:
                    n = 1
                    while n < len(future) and start + n < len(seq) and seq[start + n] == future[n]:
                        n += 1
                    best = max(best, n)
        step = min(best + 1, len(output) - pos)
        context += output[pos : pos + step]
        pos += step
        passes += 1
    return passes
