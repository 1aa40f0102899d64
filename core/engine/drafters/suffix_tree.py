"""A depth-limited suffix trie with occurrence counts, and the suffix-decoding proposal rule.

The structure behind suffix decoding (SuffixDecoding, Oliaro et al., NeurIPS 2025; Snowflake's Arctic
Inference; vLLM's ``method="suffix"``), written here from the published algorithm in plain Python:

- Every substring of length up to ``max_depth`` of the sequences added is a node; a node's count is the
  number of its occurrences. The root's count is the number of tokens. A child's count over its parent's is
  then the observed frequency of that continuation.
- Appending a token extends the (at most ``max_depth``) nodes of the sequence's current suffixes by one
  level, so insertion costs O(max_depth) per token and never rescans.
- Removing a sequence walks each of its suffixes once more and decrements; nodes that reach zero are freed,
  so a bounded cache of sequences stays bounded in memory.

Nodes live in flat arrays (count, one inline child) with a dict only for nodes that have two or more
children: most nodes of a depth-limited trie over text are links of a chain, and a Python object or dict
per node would cost ten times the memory.

The proposal (``speculate``): every match length of the context's suffix is tried, shortest first, until
one is not in the trie. A caller that follows a growing sequence keeps the matched nodes instead
(``extend_matches``, O(max_depth) per new token; ``suffix_nodes`` for a sequence in the tree itself) and
proposes from them (``speculate_matches``), so a proposal never walks the trie from the root again.
From the matched node the draft follows the most frequent child; each drafted token carries the product
of the count ratios along the way; drafting stops before a token whose product falls below
``min_token_prob``, or at ``min(max_tokens, floor(match_len * max_spec_factor))`` tokens, or at the trie's
depth. A draft's score is the sum of its tokens' products: the expected number of accepted tokens if the
products were acceptance probabilities. The best score wins; a tie goes to the longer match.

Each drafted token also carries a shrunk count ratio, count / (parent's count + 1) (``conditional``): a
continuation seen once after a context seen once is an even bet, not a certainty. Adaptive k
(``core/adaptive_suffix``) reads it as the token's chance of acceptance given the ones before it.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

NO_NODE = -1
ROOT = 0


@dataclass
class SuffixDraft:
    """A proposal and how it was found (empty: nothing matched, or nothing passed ``min_token_prob``)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # the running product of count ratios at each token
    score: float = 0.0  # sum of ``probs``: the expected number of accepted tokens
    match_len: int = 0  # how many of the context's last tokens matched
    # per token: count / (parent's count + 1), its chance of acceptance after the ones before it, shrunk
    conditional: list[float] = field(default_factory=list)


class SuffixTree:
    """Substrings up to ``max_depth`` tokens of any number of sequences (by id), with occurrence counts."""

    def __init__(self, max_depth: int):
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        self.max_depth = max_depth
        self._count = array("q", [0])
        self._child_token = array("q", [NO_NODE])  # the first child, inline (most nodes have one)
        self._child_node = array("q", [NO_NODE])
        self._more: dict[int, dict[int, int]] = {}  # further children of nodes with two or more
        self._free: list[int] = []
        self._seqs: dict[int, list[int]] = {}
        # Per sequence: the nodes of its current suffixes of length 1 .. max_depth, longest first.
        self._active: dict[int, list[int]] = {}

    # ---- size ------------------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        """Live nodes, the root included."""
        return len(self._count) - len(self._free)

    @property
    def n_tokens(self) -> int:
        return self._count[ROOT]

    def sequence_ids(self) -> list[int]:
        return list(self._seqs)

    def sequence(self, seq_id: int) -> list[int]:
        return list(self._seqs[seq_id])

    def suffix_nodes(self, seq_id: int) -> list[int]:
        """The nodes of a sequence's current suffixes that a match may use (lengths 1 .. max_depth - 1,
        shortest first): what ``speculate_matches`` takes, kept up to date by ``append`` at no extra cost."""
        active = self._active.get(seq_id, [])
        return active[::-1][: self.max_depth - 1]

    # ---- node storage ----------------------------------------------------------------------------------
    def child(self, node: int, token: int) -> int:
        if self._child_token[node] == token and self._child_node[node] != NO_NODE:
            return self._child_node[node]
        more = self._more.get(node)
        return more.get(token, NO_NODE) if more else NO_NODE

    def children(self, node: int) -> list[tuple[int, int]]:
        """(token, child node) pairs, the inline child first, then in insertion order."""
        if self._child_node[node] == NO_NODE:
            return []
        out = [(self._child_token[node], self._child_node[node])]
        more = self._more.get(node)
        if more:
            out += more.items()
        return out

    def count(self, node: int) -> int:
        return self._count[node]

    def _new_node(self) -> int:
        if self._free:
            node = self._free.pop()
            self._count[node] = 0
            self._child_token[node] = NO_NODE
            self._child_node[node] = NO_NODE
            return node
        self._count.append(0)
        self._child_token.append(NO_NODE)
        self._child_node.append(NO_NODE)
        return len(self._count) - 1

    def _add_child(self, node: int, token: int) -> int:
        new = self._new_node()
        if self._child_node[node] == NO_NODE:
            self._child_token[node] = token
            self._child_node[node] = new
        else:
            self._more.setdefault(node, {})[token] = new
        return new

    def _drop_child(self, node: int, token: int) -> None:
        more = self._more.get(node)
        if self._child_token[node] == token and self._child_node[node] != NO_NODE:
            if more:  # promote another child to the inline slot
                t, c = next(iter(more.items()))
                del more[t]
                self._child_token[node], self._child_node[node] = t, c
            else:
                self._child_token[node] = self._child_node[node] = NO_NODE
        elif more is not None:
            more.pop(token, None)
        if more is not None and not more:
            del self._more[node]

    # ---- sequences -------------------------------------------------------------------------------------
    def extend(self, seq_id: int, tokens: list[int]) -> None:
        for t in tokens:
            self.append(seq_id, int(t))

    def append(self, seq_id: int, token: int) -> None:
        """Add one token to a sequence (a new sequence if the id is unknown): O(max_depth)."""
        seq = self._seqs.setdefault(seq_id, [])
        active = self._active.setdefault(seq_id, [])
        seq.append(token)
        self._count[ROOT] += 1
        # a suffix already max_depth long cannot grow; every other one grows by this token, and the token
        # itself starts a new suffix at the root
        grown = active[1:] if len(active) >= self.max_depth else active
        extended: list[int] = []
        for node in (*grown, ROOT):
            nxt = self.child(node, token)
            if nxt == NO_NODE:
                nxt = self._add_child(node, token)
            self._count[nxt] += 1
            extended.append(nxt)
        self._active[seq_id] = extended

    def remove(self, seq_id: int) -> None:
        """Take a sequence out: every count it added is taken back; nodes left with none are freed."""
        seq = self._seqs.pop(seq_id, None)
        self._active.pop(seq_id, None)
        if seq is None:
            return
        depth = self.max_depth
        for start in range(len(seq)):
            self._count[ROOT] -= 1
            node = ROOT
            for token in seq[start : start + depth]:
                nxt = self.child(node, token)
                self._count[nxt] -= 1
                if self._count[nxt] == 0:
                    self._drop_child(node, token)
                    self._free_subtree(nxt)
                    break
                node = nxt

    def _free_subtree(self, node: int) -> None:
        # Every count below a node is at most the node's, so a node at zero has only zero-count descendants.
        stack = [node]
        while stack:
            n = stack.pop()
            stack += [c for _, c in self.children(n)]
            self._more.pop(n, None)
            self._child_token[n] = self._child_node[n] = NO_NODE
            self._count[n] = 0
            self._free.append(n)

    # ---- matching and drafting -------------------------------------------------------------------------
    def match(self, pattern: list[int]) -> int:
        """The node of ``pattern`` (NO_NODE if it never occurred or is longer than the trie is deep)."""
        if len(pattern) > self.max_depth:
            return NO_NODE
        node = ROOT
        for token in pattern:
            node = self.child(node, token)
            if node == NO_NODE:
                return NO_NODE
        return node

    def best_path(self, node: int, max_tokens: int, min_token_prob: float) -> SuffixDraft:
        """Follow the most frequent child from ``node``; stop at ``max_tokens``, at a leaf, or before a
        token whose running probability falls below ``min_token_prob``."""
        draft = SuffixDraft()
        prob = 1.0
        while len(draft.tokens) < max_tokens:
            best_token, best_node, best_count = NO_NODE, NO_NODE, 0
            for token, c in self.children(node):
                if self._count[c] > best_count:  # strict: the first of equally frequent children wins
                    best_token, best_node, best_count = token, c, self._count[c]
            if best_node == NO_NODE:
                break
            parent_count = self._count[node]
            prob *= best_count / parent_count
            if prob < min_token_prob:
                break
            draft.tokens.append(best_token)
            draft.probs.append(prob)
            draft.conditional.append(best_count / (parent_count + 1))
            draft.score += prob
            node = best_node
        return draft

    def match_suffixes(self, context: list[int]) -> list[int]:
        """The nodes of the context's suffixes that occur, lengths 1, 2, … (shortest first), at most
        ``max_depth - 1`` long (a match must leave room for one more level)."""
        nodes: list[int] = []
        for match_len in range(1, min(len(context), self.max_depth - 1) + 1):
            node = self.match(context[len(context) - match_len :])
            if node == NO_NODE:
                break  # a longer suffix cannot occur where a shorter one does not
            nodes.append(node)
        return nodes

    def extend_matches(self, nodes: list[int], token: int) -> list[int]:
        """``match_suffixes`` of a context one ``token`` longer, from that of the context (O(max_depth)):
        each matched suffix grows by the token, and the token alone is the new shortest one."""
        out: list[int] = []
        for node in (ROOT, *nodes[: self.max_depth - 2]):
            nxt = self.child(node, token)
            if nxt == NO_NODE:
                break
            out.append(nxt)
        return out

    def speculate_matches(self, nodes: list[int], max_tokens: int, max_spec_factor: float,
                          min_token_prob: float) -> SuffixDraft:
        """The best draft from matched suffix nodes (``nodes[i]`` matches the context's last i + 1 tokens)."""
        best = SuffixDraft()
        for match_len, node in enumerate(nodes, start=1):
            cap = min(max_tokens, int(match_len * max_spec_factor + 1e-6))
            if cap <= 0:
                continue
            draft = self.best_path(node, cap, min_token_prob)
            if draft.tokens and draft.score >= best.score:
                draft.match_len = match_len
                best = draft
        return best

    def speculate(self, context: list[int], max_tokens: int, max_spec_factor: float,
                  min_token_prob: float) -> SuffixDraft:
        """The best draft over every match length (see the module's docstring)."""
        return self.speculate_matches(self.match_suffixes(context), max_tokens, max_spec_factor, min_token_prob)
