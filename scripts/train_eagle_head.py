"""Train the embedded demo's EAGLE-3 draft head for SmolLM2-135M-Instruct by self-distillation, on a CPU.

    nice -n 10 python scripts/train_eagle_head.py data    # the target answers ~500 prompts (batched)
    nice -n 10 python scripts/train_eagle_head.py train   # trains the head, writes resources/demo_eagle/
    python scripts/train_eagle_head.py all                # both
    python scripts/train_eagle_head.py eval --eval-from N # a saved head on training answers N.. (or held-out)

Data: the target's own answers to a varied, generated prompt set (prose, code, structured text), mostly
greedy (what greedy speculation sees) and some sampled (T 0.8, top-p 0.95). Generation returns, for free,
the target's hidden states at every position (the EAGLE-3 features: a low, a middle and a high layer) and
its logits (the labels: the target's own next token). A tenth of the prompts are held out; the bench
prompts in ``resources/prompts`` are never used.

Head: :class:`specscope.core.engine.drafters.eagle.Eagle3Head` (the serving engines' layout). The draft
vocabulary is the most frequent target tokens in the generated training text. Training uses
"training-time test" (EAGLE-3): the head is unrolled ``--ttt-steps`` steps, step j > 1 reading the head's
own previous hidden state instead of the target's features and attending to the real-feature keys up to
its base position plus its own earlier unrolled keys, exactly as at drafting time.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "resources" / "demo_eagle"
DATA_PATH = Path("/tmp/specscope_eagle_data.pt")

TOPICS = [
    "photosynthesis", "the water cycle", "black holes", "the French Revolution", "compound interest",
    "how vaccines work", "the history of the bicycle", "volcanoes", "machine learning", "the Roman Empire",
    "climate change", "how a refrigerator works", "honey bees", "plate tectonics", "the stock market",
    "coffee", "the moon landing", "electric cars", "recycling", "chess", "the human heart", "earthquakes",
    "the internet", "rainbows", "gardening", "the Olympic Games", "penguins", "the Great Wall of China",
    "solar panels", "the immune system", "jazz music", "ancient Egypt", "tea ceremonies", "hurricanes",
    "the periodic table", "dinosaurs", "the Amazon rainforest", "public libraries", "time zones",
    "the violin", "bread baking", "antibiotics", "glaciers", "the Renaissance", "lighthouses", "octopuses",
    "cryptography", "marathon running", "the printing of money", "wind turbines", "coral reefs",
    "the telephone", "origami", "the speed of light", "bees and pollination", "city parks", "submarines",
    "the Silk Road", "meditation", "airplanes", "mushrooms", "the decimal system", "snowflakes",
]
PROSE_TASKS = [
    "Explain {t} to a ten-year-old.", "Write a short paragraph about {t}.",
    "What are three interesting facts about {t}?", "Write a short story that involves {t}.",
    "Give me a brief summary of {t}.", "Why is {t} important? Answer in a few sentences.",
    "Write a friendly email to a colleague about {t}.", "Describe {t} in a poem of eight lines.",
    "What are the pros and cons of {t}?", "Write a blog post introduction about {t}.",
    "Answer a student's question: how does {t} work?", "Write a diary entry of someone who loves {t}.",
]
CODE_SUBJECTS = [
    "reverses a string", "checks if a number is prime", "returns the n-th Fibonacci number",
    "counts the words in a text file", "merges two sorted lists", "does a binary search",
    "flattens a nested list", "converts Celsius to Fahrenheit", "validates an email address",
    "sorts a list of dictionaries by a key", "computes the factorial of a number", "finds the maximum in a list",
    "checks whether a string is a palindrome", "counts vowels in a string", "computes the average of a list",
    "finds the greatest common divisor of two numbers", "removes whitespace from a string",
    "groups words by their first letter", "parses a date string", "returns the unique elements of a list",
    "reads a JSON file and prints its keys", "computes the median of a list", "transposes a matrix",
    "checks if two strings are anagrams", "converts a number to binary", "counts lines in a file",
    "generates a random password", "capitalises every word in a sentence", "finds all even numbers in a list",
    "implements bubble sort", "implements a queue with two stacks", "computes the sum of digits of a number",
]
CODE_TASKS = [
    "Write a Python function that {s}.", "Write a JavaScript function that {s}.",
    "Write a Python function that {s}, with a docstring and type hints.",
    "Write a Python function that {s}, and a few pytest tests for it.",
    "Write a C function that {s}.", "Explain step by step, with code, how to write a function that {s}.",
]
CODE_EXTRA = [
    "Write a Python class for a simple bank account with deposit and withdraw methods.",
    "Write a Python decorator that times a function.", "Write a Python generator that yields prime numbers.",
    "Write a bash script that backs up a directory into a dated tar file.",
    "Write a SQL query that selects the ten most recent orders from an orders table.",
    "Write a SQL query that counts users per country.", "Write a Python class representing a 2D point.",
    "Write an HTML page with a form that has name and email fields.",
    "Write a Python script that downloads nothing but prints the numbers 1 to 100 in FizzBuzz style.",
    "Write a Python dataclass for a book with title, author and year.",
    "Write a Python context manager that changes the working directory temporarily.",
    "Write a Rust function that adds two numbers.", "Write a Go program that prints hello world.",
    "Explain what a Python list comprehension is, with an example.",
    "Explain Python dictionaries with code examples.", "Show how to read a file line by line in Python.",
]
STRUCTURED_TASKS = [
    "Give a JSON object describing {t} with keys name, summary and three facts.",
    "Make a markdown table with three rows about {t}: columns Aspect and Description.",
    "List five key points about {t} as a numbered list.",
    "Write a YAML document describing {t} with a title and a list of facts.",
    "Write a CSV with a header row and four rows of data about {t}.",
    "Give a bulleted outline for a presentation about {t}.",
]
STRUCTURED_EXTRA = [
    "Write a YAML configuration for a web server with host, port, and logging settings.",
    "Convert this list into JSON: apples 3, pears 5, plums 7, cherries 12.",
    "Write a CSV with a header row and five rows of made-up employees (name, age, city).",
    "Write a JSON array of four books with title, author and year.",
    "Create an HTML list of the days of the week.", "Give a markdown checklist for packing for a trip.",
    "Write a JSON object for a user profile with name, email, age and a list of hobbies.",
    "Make a markdown table of the planets and their order from the sun.",
    "List the months of the year with their number of days, one per line.",
    "Write an XML document describing a library with two books.",
    "Write a docker-compose file for a web app with a database.",
    "Write a package.json for a small Node.js project.",
]

# Third round (more text against over-fitting): new topics and subjects, appended after the first two rounds.
TOPICS_3 = [
    "the Moon's phases", "sleep", "the Sahara desert", "the Eiffel Tower", "whales", "nuclear power",
    "the piano", "cheese making", "migration of birds", "the Industrial Revolution", "batteries", "tides",
    "the Vikings", "elephants", "3D printing", "the human brain", "rivers", "the first computers",
    "photography", "spiders", "the Mars rovers", "friendship", "board games", "the postal service",
    "trains", "sharks", "the Aztecs", "cloud computing", "fossils", "democracy", "the ocean floor",
    "cotton", "skyscrapers", "the Milky Way", "wolves", "vaccination campaigns", "pottery", "deserts at night",
    "the metric system", "bridges", "volunteering", "the Arctic", "chocolate", "clocks", "insulin",
    "the Beatles", "recycled paper", "learning a language",
]
CODE_SUBJECTS_3 = [
    "rotates a list by k positions", "counts the frequency of each character in a string",
    "checks whether a year is a leap year", "converts a Roman numeral to an integer",
    "finds the second largest number in a list", "splits a list into chunks of size n",
    "computes the dot product of two vectors", "removes duplicates from a list while keeping order",
    "checks whether brackets in a string are balanced", "returns the longest word in a sentence",
    "converts a string to snake_case", "computes compound interest", "finds the intersection of two lists",
    "computes the Levenshtein distance of two strings", "generates all permutations of a string",
    "checks whether a number is a perfect square", "counts the digits of an integer",
    "converts a hex string to an integer", "finds the mode of a list", "implements a stack class",
    "reverses the words in a sentence", "sums the numbers in a nested list", "computes a moving average",
    "validates a phone number with a regular expression",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def prompt_set(seed: int) -> list[tuple[str, str]]:
    """(kind, instruction) pairs, generated from templates and shuffled reproducibly."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for task in PROSE_TASKS:
        out += [("prose", task.format(t=t)) for t in rng.sample(TOPICS, 24)]
    for task in CODE_TASKS:
        out += [("code", task.format(s=s)) for s in rng.sample(CODE_SUBJECTS, 16)]
    out += [("code", t) for t in CODE_EXTRA]
    for task in STRUCTURED_TASKS:
        out += [("structured", task.format(t=t)) for t in rng.sample(TOPICS, 12)]
    out += [("structured", t) for t in STRUCTURED_EXTRA]
    rng.shuffle(out)
    # Second round: every template/topic pair the first round left out, in its own shuffle. It comes after
    # the first round so that the held-out prompts (the first ones) and a resumed cache stay what they were.
    used = set(out)
    rest = [("prose", task.format(t=t)) for task in PROSE_TASKS for t in TOPICS]
    rest += [("code", task.format(s=s)) for task in CODE_TASKS for s in CODE_SUBJECTS]
    rest += [("structured", task.format(t=t)) for task in STRUCTURED_TASKS for t in TOPICS]
    rest = [p for p in rest if p not in used]
    random.Random(seed + 1).shuffle(rest)
    # Third round, after the second for the same reason.
    third = [("prose", task.format(t=t)) for task in PROSE_TASKS for t in TOPICS_3]
    third += [("code", task.format(s=s)) for task in CODE_TASKS for s in CODE_SUBJECTS_3]
    third += [("structured", task.format(t=t)) for task in STRUCTURED_TASKS for t in TOPICS_3]
    random.Random(seed + 2).shuffle(third)
    return out + rest + third


def load_target(threads: int) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    from specscope.core.engine.demo import ensure_demo_target, load_demo_tokenizer

    torch.set_num_threads(threads)
    target_dir = ensure_demo_target(lambda m, f: log(f"{m} ({f:.0%})"))
    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, load_demo_tokenizer(target_dir)


def chat_ids(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def aux_layer_ids(n_layers: int) -> list[int]:
    """The serving engines' default EAGLE-3 feature layers: low, middle, high."""
    return [2, n_layers // 2, n_layers - 3]


class _FeatureTap:
    """Forward pre-hooks capturing the hidden input of a few decoder layers at every pass (cheaper than
    ``output_hidden_states``, which keeps all layers for every generated step)."""

    def __init__(self, model: Any, layers: list[int]):
        self.rows: dict[int, list[torch.Tensor]] = {i: [] for i in layers}
        self.handles = [model.model.layers[i].register_forward_pre_hook(self._hook(i), with_kwargs=True)
                        for i in layers]

    def _hook(self, i: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            h = args[0] if args else kwargs["hidden_states"]
            self.rows[i].append(h.detach().to(torch.float16))
        return hook

    def fused(self) -> torch.Tensor:
        """(B, positions, 3H): the layers' inputs side by side, all passes concatenated along positions."""
        return torch.cat([torch.cat(self.rows[i], dim=1) for i in self.rows], dim=-1)

    def close(self) -> None:
        for h in self.handles:
            h.remove()


@torch.inference_mode()
def generate_batch(model: Any, tokenizer: Any, prompts: list[str], sample: bool, max_new: int,
                   layers: list[int], eos: frozenset[int], tag: str) -> list[dict[str, Any]]:
    """The target's answers with its fused features (T-1, 3H) fp16, its arg-max labels and its top tokens,
    no second pass.

    ``features[p]`` is the target's hidden input to each of ``layers`` at position p (HF's
    hidden_states[i], what vLLM captures as an EAGLE-3 auxiliary hidden state); ``labels`` are the target's
    arg-max after each position from the last prompt token on, taken from the raw logits (before any sampling
    warper, so it is the target's greedy token also in sampled batches).
    """
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 2)
    enc = [chat_ids(tokenizer, p) for p in prompts]
    width = max(len(e) for e in enc)
    ids = torch.tensor([[pad] * (width - len(e)) + e for e in enc])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc])
    tap = _FeatureTap(model, layers)
    try:
        gen = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=sample,
            temperature=0.8 if sample else None, top_p=0.95 if sample else None, top_k=None,
            return_dict_in_generate=True, output_logits=True,
            pad_token_id=pad, eos_token_id=sorted(eos),
        )
        feats = tap.fused()  # (B, width + steps - 1, 3H)
    finally:
        tap.close()
    # The target's own distribution (raw logits), its SOFT_TOP most likely tokens; the first is the label.
    soft_ids, soft_logp = zip(*(top_log_probs(step) for step in gen.logits), strict=True)
    soft_i, soft_l = torch.stack(soft_ids, dim=1), torch.stack(soft_logp, dim=1)  # (B, steps, SOFT_TOP)
    labels = soft_i[..., 0]  # (B, steps): after positions width-1, width, ...
    new = gen.sequences[:, width:]
    out: list[dict[str, Any]] = []
    for i, prompt_ids in enumerate(enc):
        toks = new[i].tolist()
        n = next((j + 1 for j, t in enumerate(toks) if t in eos), len(toks))
        pad_n = width - len(prompt_ids)
        seq = prompt_ids + toks[:n]
        f = feats[i, pad_n : pad_n + len(seq) - 1].clone()
        lab = labels[i, :n].to(torch.int32).clone()  # for positions P-1 .. P+n-2
        out.append({"ids": seq, "prompt_len": len(prompt_ids), "features": f, "labels": lab, "source": tag,
                    "soft_ids": soft_i[i, :n].clone(), "soft_logp": soft_l[i, :n].clone()})
    return out


SOFT_TOP = 16  # target tokens kept per position for the distillation loss


def top_log_probs(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., SOFT_TOP) target ids (int32) and their log-probabilities (fp16) from raw logits."""
    logp, ids = torch.log_softmax(logits.float(), dim=-1).topk(SOFT_TOP, dim=-1)
    return ids.to(torch.int32), logp.to(torch.float16)


@torch.inference_mode()
def add_soft_labels(args: argparse.Namespace) -> None:
    """Teacher-forced target passes give the answers made before soft labels were recorded their
    distributions. The arg-max must match the recorded label; a mismatch is counted (fp near-ties)."""
    data = torch.load(args.data)
    todo = [e for e in data["examples"] if "soft_ids" not in e]
    log(f"soft labels: {len(todo)} answers need a teacher-forced pass")
    if not todo:
        return
    model, _ = load_target(args.threads)
    t0 = time.time()
    mismatch = total = 0
    for n, e in enumerate(todo):
        ids = torch.tensor([e["ids"]])
        hidden = model.model(input_ids=ids).last_hidden_state[0]
        p0 = e["prompt_len"] - 1
        logits = model.lm_head(hidden[p0 : p0 + len(e["labels"])])
        e["soft_ids"], e["soft_logp"] = top_log_probs(logits)
        mismatch += int((e["soft_ids"][:, 0] != e["labels"]).sum())
        total += len(e["labels"])
        if n % 100 == 99:
            log(f"  {n + 1}/{len(todo)} answers ({time.time() - t0:.0f}s), arg-max mismatches {mismatch}/{total}")
    torch.save(data, args.data)
    log(f"soft labels added in {time.time() - t0:.0f}s; arg-max mismatches {mismatch} of {total} positions")


def make_data(args: argparse.Namespace) -> None:
    """Held-out answers first, then training answers (every fourth batch sampled) until the budget ends.

    The cache is rewritten after every batch, so a stopped run keeps what it made.
    """
    from specscope.core.engine.demo import demo_eos_ids

    t0 = time.time()
    model, tokenizer = load_target(args.threads)
    eos = demo_eos_ids(model, tokenizer)
    layers = aux_layer_ids(model.config.num_hidden_layers)
    prompts = [t for _, t in prompt_set(args.seed)]
    held_out, train_prompts = prompts[: args.heldout], prompts[args.heldout :]
    log(f"{len(prompts)} prompts ({len(held_out)} held out); feature layers {layers}")
    torch.manual_seed(args.seed)
    data: list[dict[str, Any]] = []
    if args.resume and args.data.is_file():  # keep the answers already made; continue after them
        # Answers are made in prompt order, so answer i belongs to prompt i.
        data = torch.load(args.data)["examples"]
        log(f"resuming after {len(data)} answers")
    done = len(data)
    plan: list[tuple[list[str], bool, str]] = []
    for b in range(min(done, len(held_out)), len(held_out), args.gen_batch):
        plan.append((held_out[b : b + args.gen_batch], False, "heldout"))
    rest = train_prompts[max(0, done - len(held_out)):]
    for n, b in enumerate(range(0, len(rest), args.gen_batch)):
        sample = n % 4 == 3
        plan.append((rest[b : b + args.gen_batch], sample, "sampled" if sample else "greedy"))
    for batch_prompts, sample, tag in plan:
        if tag != "heldout" and time.time() - t0 > args.gen_minutes * 60:
            log("generation budget reached")
            break
        data += generate_batch(model, tokenizer, batch_prompts, sample, args.max_new, layers, eos, tag)
        torch.save({"layers": layers, "examples": data}, args.data)
        n_train = sum(len(e["labels"]) for e in data if e["source"] != "heldout")
        n_held = sum(len(e["labels"]) for e in data if e["source"] == "heldout")
        log(f"  {tag} batch done: {n_train} training tokens, {n_held} held-out ({time.time() - t0:.0f}s)")
        if n_train >= args.gen_tokens:
            break
    log(f"saved {args.data} in {time.time() - t0:.0f}s")

# ---- training ------------------------------------------------------------------------------------------
def choose_draft_vocab(examples: list[dict[str, Any]], vocab: int, size: int) -> tuple[torch.Tensor, dict[int, float]]:
    """The ``size`` target ids the target most often predicts in the training text; coverage by size."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for e in examples:
        counts.index_add_(0, e["labels"].long(), torch.ones(len(e["labels"]), dtype=torch.long))
    ranked = counts.argsort(descending=True)
    total = float(counts.sum())
    coverage = {n: float(counts[ranked[:n]].sum()) / total for n in (512, 1024, 2048, 3072, 4096, 8192)}
    return ranked[:size].sort().values, coverage


def build_head(target: Any, layers: list[int], draft_ids: torch.Tensor, intermediate: int, seed: int) -> Any:
    from specscope.core.engine.drafters.eagle import Eagle3Config, Eagle3Head

    tc = target.config
    rope = getattr(tc, "rope_parameters", None) or {}
    theta = float(rope.get("rope_theta", getattr(tc, "rope_theta", 10000.0)))
    cfg = Eagle3Config(
        hidden_size=tc.hidden_size, num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads, intermediate_size=intermediate, vocab_size=tc.vocab_size,
        draft_vocab_size=len(draft_ids), aux_layer_ids=list(layers), head_dim=tc.hidden_size // tc.num_attention_heads,
        rms_norm_eps=tc.rms_norm_eps, rope_theta=theta, max_position_embeddings=tc.max_position_embeddings,
    )
    torch.manual_seed(seed)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
        head.midlayer.self_attn.o_proj.weight.mul_(0.1)
        head.midlayer.mlp.down_proj.weight.mul_(0.1)
        head.set_draft_vocab(draft_ids)
        # Start from the target's own read-out: its final norm and (tied) head rows of the draft vocabulary.
        head.norm.weight.copy_(target.model.norm.weight)
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[head.target_ids()])
    head.use_embeddings(target.get_input_embeddings())
    return head


def ttt_attention(q: torch.Tensor, k1: torch.Tensor, v1: torch.Tensor, extra: list[tuple[torch.Tensor, torch.Tensor]]
                  ) -> torch.Tensor:
    """Step j of training-time test: causal attention over the real-feature keys plus, at each base
    position, that position's own keys from unrolled steps 2..j (what the drafter's cache holds then)."""
    groups = q.shape[1] // k1.shape[1]

    def rep(t: torch.Tensor) -> torch.Tensor:
        return t.repeat_interleave(groups, dim=1) if groups > 1 else t

    scale = 1.0 / math.sqrt(q.shape[-1])
    t = q.shape[2]
    main = (q @ rep(k1).transpose(-1, -2)) * scale
    main = main.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    diag = [((q * rep(k)).sum(-1, keepdim=True) * scale) for k, _ in extra]
    probs = torch.softmax(torch.cat([main, *diag], dim=-1), dim=-1)
    out = probs[..., :t] @ rep(v1)
    for i, (_, v) in enumerate(extra):
        out = out + probs[..., t + i : t + i + 1] * rep(v)
    return out


def make_batch(group: list[dict[str, Any]], t2d_index: torch.Tensor, steps: int) -> dict[str, torch.Tensor]:
    """Right-padded tokens, features and per-step draft-id labels (-100: no label or outside the vocab)."""
    width = max(len(e["ids"]) for e in group)
    t = width - 1
    ids = torch.zeros(len(group), width, dtype=torch.long)
    feats = torch.zeros(len(group), t, group[0]["features"].shape[-1])
    target_next = torch.full((len(group), t), -1, dtype=torch.long)  # target's arg-max after position p
    soft_ids = torch.full((len(group), t, SOFT_TOP), -1, dtype=torch.long)  # its top tokens there
    soft_p = torch.zeros(len(group), t, SOFT_TOP)
    for i, e in enumerate(group):
        n = len(e["ids"])
        ids[i, :n] = torch.tensor(e["ids"])
        feats[i, : n - 1] = e["features"].float()
        p0 = e["prompt_len"] - 1
        target_next[i, p0 : p0 + len(e["labels"])] = e["labels"].long()
        if "soft_ids" in e:
            soft_ids[i, p0 : p0 + len(e["labels"])] = e["soft_ids"].long()
            soft_p[i, p0 : p0 + len(e["labels"])] = e["soft_logp"].float().exp()
    # Soft labels per step, in the draft vocabulary: the target's top tokens that are in it, renormalised.
    # A position without them (no soft labels recorded) falls back to its one-hot hard label.
    draft_soft = t2d_index[soft_ids.clamp_min(0)]
    soft_p = torch.where((soft_ids >= 0) & (draft_soft >= 0), soft_p, torch.zeros_like(soft_p))
    labels, soft = [], []
    vd = int(t2d_index.max()) + 1
    for j in range(1, steps + 1):  # step j at base p predicts the target's token after position p + j
        lab = torch.full((len(group), t), -100, dtype=torch.long)
        shifted = target_next[:, j:]
        mapped = torch.where(shifted >= 0, t2d_index[shifted.clamp_min(0)], torch.full_like(shifted, -100))
        lab[:, : t - j] = torch.where(mapped >= 0, mapped, torch.full_like(mapped, -100))
        labels.append(lab)
        dense = torch.zeros(len(group), t, vd)
        dense[:, : t - j].scatter_add_(-1, draft_soft[:, j:].clamp_min(0), soft_p[:, j:])
        mass = dense.sum(-1, keepdim=True)
        one_hot = F.one_hot(lab.clamp_min(0), vd).float()
        soft.append(torch.where(mass > 0, dense / mass.clamp_min(1e-9), one_hot))
    # in-vocabulary misses count for the held-out rate: -2 marks "the target's token is outside the vocab"
    known = []
    for j in range(1, steps + 1):
        k = torch.zeros(len(group), t, dtype=torch.bool)
        k[:, : t - j] = target_next[:, j:] >= 0
        known.append(k)
    return {"ids": ids, "feats": feats, "labels": torch.stack(labels), "known": torch.stack(known),
            "soft": torch.stack(soft)}


def unrolled_logits(head: Any, batch: dict[str, torch.Tensor], steps: int) -> list[torch.Tensor]:
    ids, feats = batch["ids"], batch["feats"]
    b, t = feats.shape[0], feats.shape[1]
    pos = torch.arange(t).unsqueeze(0).expand(b, t)
    hidden = head.fc(feats)
    q, k1, v1, resid = head.project(head.embed(ids[:, 1:]), hidden, pos)
    out = ttt_attention(q, k1, v1, [])
    normed, prenorm = head.finish(out, resid)
    logits = [head.draft_logits(normed)]
    extra: list[tuple[torch.Tensor, torch.Tensor]] = []
    for j in range(2, steps + 1):
        tok = torch.zeros(b, t, dtype=torch.long)
        tok[:, : t + 1 - j] = ids[:, j:]
        q, k, v, resid = head.project(head.embed(tok), prenorm, pos + (j - 1))
        extra.append((k, v))
        out = ttt_attention(q, k1, v1, extra)
        normed, prenorm = head.finish(out, resid)
        logits.append(head.draft_logits(normed))
    return logits


def group_batches(examples: list[dict[str, Any]], tokens: int, rng: random.Random) -> list[list[dict[str, Any]]]:
    order = sorted(examples, key=lambda e: len(e["ids"]))
    out: list[list[dict[str, Any]]] = []
    cur: list[dict[str, Any]] = []
    for e in order:
        if cur and (len(cur) + 1) * len(e["ids"]) > tokens:
            out.append(cur)
            cur = []
        cur.append(e)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def draft_index(head: Any, vocab_size: int) -> torch.Tensor:
    """Draft id of each target id (-1: outside the draft vocabulary)."""
    index = torch.full((vocab_size,), -1, dtype=torch.long)
    ids = head.target_ids()
    index[ids] = torch.arange(int(ids.numel()))
    return index


def in_vocab_share(head: Any, examples: list[dict[str, Any]]) -> float:
    """The share of the target's next tokens in ``examples`` that the draft vocabulary holds."""
    tokens = sum(len(e["labels"]) for e in examples)
    return float(sum(int(head.t2d[e["labels"].long()].sum()) for e in examples)) / max(tokens, 1)


@torch.no_grad()
def evaluate(head: Any, batches: list[dict[str, torch.Tensor]], steps: int) -> list[float]:
    """Top-1 agreement with the target per unrolled step, over answer positions (out-of-vocab = miss)."""
    hits = [0] * steps
    total = [0] * steps
    for batch in batches:
        for j, lg in enumerate(unrolled_logits(head, batch, steps)):
            known = batch["known"][j]
            hits[j] += int(((lg.argmax(-1) == batch["labels"][j]) & known).sum())
            total[j] += int(known.sum())
    return [h / max(n, 1) for h, n in zip(hits, total, strict=True)]


def train(args: argparse.Namespace) -> None:
    from specscope.core.engine.drafters.eagle import save_head

    t_start = time.time()
    model, _ = load_target(args.threads)
    data = torch.load(args.data)
    layers, examples = data["layers"], data["examples"]
    held = [e for e in examples if e["source"] == "heldout"]
    train_set = [e for e in examples if e["source"] != "heldout"]
    n_train_tokens = sum(len(e["labels"]) for e in train_set)
    n_held_tokens = sum(len(e["labels"]) for e in held)
    log(f"data: {len(train_set)} training answers ({n_train_tokens} generated tokens), {len(held)} held out "
        f"({n_held_tokens} tokens)")
    draft_ids, coverage = choose_draft_vocab(train_set, model.config.vocab_size, args.draft_vocab)
    held_cov = choose_draft_vocab(held, model.config.vocab_size, 1)[1]
    log("draft-vocabulary coverage of the target's next tokens (train): "
        + ", ".join(f"{n}: {c:.3f}" for n, c in coverage.items()))
    head = build_head(model, layers, draft_ids, args.intermediate, args.seed)
    t2d_index = draft_index(head, model.config.vocab_size)
    in_vocab_held = in_vocab_share(head, held)
    log(f"draft vocabulary {len(draft_ids)}: covers {in_vocab_held:.3f} of held-out target tokens "
        f"(largest sizes on held-out: {held_cov})")
    params = [p for n, p in head.named_parameters() if not n.startswith("embed_tokens")]
    for p in params:
        p.requires_grad_(True)
    rng = random.Random(args.seed)
    held_batches = [make_batch(g, t2d_index, args.ttt_steps) for g in group_batches(held, args.batch_tokens, rng)]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    batches_per_epoch = len(group_batches(train_set, args.batch_tokens, rng))
    plan = {"total": batches_per_epoch * args.epochs}  # shrunk after a few steps if the budget is shorter
    warmup = max(1, plan["total"] // 25)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / plan["total"]))))
    step_weights = [0.8**j for j in range(args.ttt_steps)]
    history: list[dict[str, Any]] = []
    best: tuple[float, dict[str, torch.Tensor]] | None = None
    deadline = t_start + args.minutes * 60
    acc0 = evaluate(head, held_batches, args.ttt_steps)
    log(f"initial held-out agreement by step: {[round(a, 3) for a in acc0]}")
    step = 0
    t_train = time.time()
    for epoch in range(args.epochs):
        head.train()
        loss_sum = hit = seen = 0.0
        logged = 0
        for group in group_batches(train_set, args.batch_tokens, rng):
            batch = make_batch(group, t2d_index, args.ttt_steps)
            logits = unrolled_logits(head, batch, args.ttt_steps)
            loss = torch.zeros(())
            for j, lg in enumerate(logits):
                lab = batch["labels"][j]
                ok = lab >= 0
                if ok.any():
                    hard = F.cross_entropy(lg[ok], lab[ok])
                    soft = -(batch["soft"][j][ok] * torch.log_softmax(lg[ok], dim=-1)).sum(-1).mean()
                    loss = loss + step_weights[j] * ((1 - args.soft_weight) * hard + args.soft_weight * soft)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            if step == 10:  # fit the cosine schedule to the steps the wall budget allows
                per_step = (time.time() - t_train) / 10
                affordable = int((deadline - t_train) / per_step * 0.85)  # leave room for evaluations
                plan["total"] = max(20, min(plan["total"], affordable))
                log(f"  {per_step:.1f}s per step: planning {plan['total']} steps "
                    f"({plan['total'] / batches_per_epoch:.1f} epochs)")
            with torch.no_grad():
                lab0 = batch["labels"][0]
                ok = lab0 >= 0
                hit += float((logits[0].argmax(-1)[ok] == lab0[ok]).sum())
                seen += float(ok.sum())
            loss_sum += float(loss.detach())
            logged += 1
            if step % 20 == 0:
                log(f"  epoch {epoch + 1} step {step}/{plan['total']}: loss {loss_sum / logged:.3f}, "
                    f"step-1 train agreement (in-vocab) {hit / max(seen, 1):.3f}")
                loss_sum, logged = 0.0, 0
            if time.time() > deadline or step >= plan["total"]:
                break
        head.eval()
        acc = evaluate(head, held_batches, args.ttt_steps)
        train_acc = evaluate(head, [make_batch(g, t2d_index, args.ttt_steps)
                                    for g in group_batches(train_set[: len(held) * 2], args.batch_tokens, rng)],
                             args.ttt_steps)
        history.append({"epoch": epoch + 1, "heldout_agreement_by_step": acc, "train_agreement_by_step": train_acc,
                        "elapsed_s": round(time.time() - t_start)})
        log(f"epoch {epoch + 1}: held-out agreement by step {[round(a, 3) for a in acc]}, "
            f"train {[round(a, 3) for a in train_acc]} ({time.time() - t_start:.0f}s)")
        if best is None or acc[0] > best[0]:
            best = (acc[0], {n: t.detach().clone() for n, t in head.state_dict().items()})
        if time.time() > deadline or step >= plan["total"]:
            log("time budget reached" if time.time() > deadline else "planned steps done")
            break
    assert best is not None
    head.load_state_dict(best[1])
    out_dir = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    save_head(head, out_dir)
    summary = {
        "feature_layers": layers, "draft_vocab_size": len(draft_ids), "intermediate_size": args.intermediate,
        "ttt_steps": args.ttt_steps, "train_answers": len(train_set), "train_tokens": n_train_tokens,
        "heldout_answers": len(held), "heldout_tokens": n_held_tokens, "coverage_train": coverage,
        "heldout_in_vocab": in_vocab_held, "initial_heldout_agreement": acc0, "history": history,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "phase"},
        "minutes": round((time.time() - t_start) / 60, 1),
    }
    (out_dir / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    log(f"wrote {out_dir} ({sum(f.stat().st_size for f in out_dir.iterdir()) / 1e6:.1f} MB)")


@torch.no_grad()
def evaluate_head(args: argparse.Namespace) -> None:
    """A saved head's agreement on the held-out answers, or on the training answers from ``--eval-from`` on:
    answers generated after a head was trained are text it never saw, a larger held-out set for that head."""
    from specscope.core.engine.drafters.eagle import load_head

    model, _ = load_target(args.threads)
    data = torch.load(args.data)
    examples = data["examples"]
    if args.eval_from is None:
        chosen, what = [e for e in examples if e["source"] == "heldout"], "held-out answers"
    else:
        train_set = [e for e in examples if e["source"] != "heldout"]
        chosen, what = train_set[args.eval_from:], f"training answers {args.eval_from}–{len(train_set) - 1}"
    if not chosen:
        raise SystemExit(f"no answers to evaluate ({what}); the data holds {len(examples)}")
    head = load_head(args.head, model, model.config.vocab_size, device="cpu", dtype=torch.float32)
    t2d_index = draft_index(head, model.config.vocab_size)
    batches = [make_batch(g, t2d_index, args.ttt_steps)
               for g in group_batches(chosen, args.batch_tokens, random.Random(args.seed))]
    tokens = sum(len(e["labels"]) for e in chosen)
    in_vocab = in_vocab_share(head, chosen)
    acc = evaluate(head, batches, args.ttt_steps)
    log(f"{args.head}: on {len(chosen)} {what} ({tokens} tokens; draft vocabulary covers {in_vocab:.3f}) "
        f"agreement by step {[round(a, 3) for a in acc]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["data", "labels", "train", "all", "eval"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: spinning threads lose on a shared CPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new", type=int, default=144)
    ap.add_argument("--gen-batch", type=int, default=64)
    ap.add_argument("--resume", action="store_true", help="continue a stopped generation from --data")
    ap.add_argument("--heldout", type=int, default=24, help="prompts held out (answered first)")
    ap.add_argument("--gen-minutes", type=float, default=40.0, help="wall budget for generating training text")
    ap.add_argument("--gen-tokens", type=int, default=60000, help="stop generating after this many tokens")
    ap.add_argument("--draft-vocab", type=int, default=3072)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--ttt-steps", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--data", type=Path, default=DATA_PATH, help="generated data (features, labels) cache")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--minutes", type=float, default=25.0, help="wall budget for training")
    ap.add_argument("--soft-weight", type=float, default=0.5,
                    help="weight of the distillation loss on the target's top-16 distribution (0: arg-max only)")
    ap.add_argument("--head", type=Path, default=OUT_DIR, help="eval: the head to evaluate")
    ap.add_argument("--eval-from", type=int, default=None,
                    help="eval: the training answers from this index on (default: the held-out answers)")
    args = ap.parse_args()
    if args.phase == "eval":
        evaluate_head(args)
    if args.phase in ("data", "all"):
        make_data(args)
    if args.phase in ("labels", "all"):
        add_soft_labels(args)
    if args.phase in ("train", "all"):
        train(args)


if __name__ == "__main__":
    main()
