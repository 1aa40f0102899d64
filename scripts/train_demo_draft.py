"""Distil the embedded demo's draft model from SmolLM2-135M-Instruct, on a CPU, from offline text only.

    python scripts/train_demo_draft.py train      # ~30 min on 2 CPU cores; writes resources/demo_draft/
    python scripts/train_demo_draft.py measure    # greedy alpha, step costs and speed-ups (MEASUREMENTS.md)

The draft is a plain ``LlamaForCausalLM`` of the target's width with a few layers. It owns only its layers
and final norm; embeddings and LM head are the target's (SmolLM2 ties them), so they are not trained and
not shipped. Its layers start as copies of target layers (``--init-layers``) and learn to reproduce the
target's next-token distribution.

Data (all obtainable offline):
  * the target's own answers to varied instructions (prose, code, structured text), generated in batches,
    half greedy (what greedy speculation will see) and half sampled (diversity); the teacher's raw logits
    come for free from generation;
  * chunks of the Python standard library's sources, with a teacher pass for their logits.
The teacher's distribution at each position is cached as its top-K log-probabilities plus the pooled
probability of the rest. The loss is the cross-entropy from that coarse-grained teacher distribution to
the student's distribution pooled the same way (K named tokens + one "rest" bucket): KL(teacher || draft)
up to a constant, exact at the granularity it keeps.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "resources" / "demo_draft"
PROMPTS_DIR = ROOT / "resources" / "prompts"

TOPICS = [
    "photosynthesis", "the water cycle", "black holes", "the French Revolution", "compound interest",
    "how vaccines work", "the history of the bicycle", "volcanoes", "machine learning", "the Roman Empire",
    "climate change", "how a refrigerator works", "the printing press", "honey bees", "plate tectonics",
    "the stock market", "sleep", "coffee", "the moon landing", "electric cars", "recycling", "chess",
    "the human heart", "earthquakes", "the internet", "rainbows", "gardening", "the Olympic Games",
]
PROSE_TASKS = [
    "Explain {t} to a ten-year-old.", "Write a short paragraph about {t}.",
    "What are three interesting facts about {t}?", "Write a short story that involves {t}.",
    "Give me a brief summary of {t}.", "Why is {t} important? Answer in a few sentences.",
    "Write a friendly email to a colleague about {t}.", "Describe {t} in a poem of eight lines.",
]
CODE_TASKS = [
    "Write a Python function that reverses a string.",
    "Write a Python function to check if a number is prime.",
    "Write a Python class for a simple bank account with deposit and withdraw methods.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that counts the words in a text file.",
    "Write a Python script that reads a CSV file and prints the average of a column.",
    "Write a function in Python that merges two sorted lists.", "Write a Python function for binary search.",
    "Write a JavaScript function that removes duplicates from an array.",
    "Write a SQL query that selects the ten most recent orders from an orders table.",
    "Write a Python function that flattens a nested list.", "Write a Python decorator that times a function.",
    "Write a bash script that backs up a directory into a dated tar file.",
    "Write a Python function that converts Celsius to Fahrenheit, with a docstring.",
    "Write a Python generator that yields prime numbers.", "Write a Python function that validates an email.",
    "Explain what a Python list comprehension is, with an example.",
    "Write unit tests with pytest for a function add(a, b).",
    "Write a Python function that sorts a list of dictionaries by a key.",
    "Write a C function that computes the length of a string.",
]
STRUCTURED_TASKS = [
    "Give a JSON object describing {t} with keys name, summary and three facts.",
    "Make a markdown table with three rows about {t}: columns Aspect and Description.",
    "List five key points about {t} as a numbered list.",
    "Write a YAML configuration for a web server with host, port, and logging settings.",
    "Convert this list into JSON: apples 3, pears 5, plums 7, cherries 12.",
    "Write a CSV with a header row and five rows of made-up employees (name, age, city).",
    "Repeat the sentence 'The quick brown fox jumps over the lazy dog.' three times, numbered.",
    "Write a JSON array of four books with title, author and year.",
    "Create an HTML list of the days of the week.", "Give a markdown checklist for packing for a trip.",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def instructions(seed: int) -> list[tuple[str, str]]:
    """(kind, instruction) pairs: topics crossed with task templates, shuffled reproducibly."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for task in PROSE_TASKS:
        out += [("prose", task.format(t=t)) for t in rng.sample(TOPICS, 6)]
    out += [("code", task) for task in CODE_TASKS]
    for task in STRUCTURED_TASKS:
        if "{t}" in task:
            out += [("structured", task.format(t=t)) for t in rng.sample(TOPICS, 4)]
        else:
            out.append(("structured", task))
    rng.shuffle(out)
    return out


@dataclass
class Example:
    ids: list[int]
    loss_start: int  # positions >= loss_start - 1 predict tokens we distil (prompt positions are context)
    top_idx: torch.Tensor  # (n, K) int32: teacher's top-K token ids at positions loss_start-1 .. len-2
    top_logp: torch.Tensor  # (n, K) float16: their log-probabilities
    source: str


def compress(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.log_softmax(logits.float(), dim=-1)
    vals, idx = torch.topk(logp, k, dim=-1)
    return idx.to(torch.int32), vals.to(torch.float16)


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


@torch.inference_mode()
def generate_examples(model: Any, tokenizer: Any, prompts: list[str], sample: bool, max_new: int,
                      batch: int, k: int, seed: int) -> list[Example]:
    """The target's own answers, with its raw logits at every generated position (no second pass)."""
    from specscope.core.engine.demo import demo_eos_ids

    eos = demo_eos_ids(model, tokenizer)
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 2)
    torch.manual_seed(seed)
    out: list[Example] = []
    for b in range(0, len(prompts), batch):
        enc = [chat_ids(tokenizer, p) for p in prompts[b : b + batch]]
        width = max(len(e) for e in enc)
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in enc])
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc])
        gen = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=sample,
            temperature=0.8 if sample else None, top_p=0.95 if sample else None, top_k=None,
            output_logits=True, return_dict_in_generate=True, pad_token_id=pad,
            eos_token_id=sorted(eos),
        )
        logits = torch.stack(gen.logits, dim=1)  # (B, steps, V) raw, before any warper
        new = gen.sequences[:, width:]
        for i, prompt_ids in enumerate(enc):
            toks = new[i].tolist()
            n = next((j + 1 for j, t in enumerate(toks) if t in eos), len(toks))
            idx, lp = compress(logits[i, :n], k)
            out.append(Example(prompt_ids + toks[:n], len(prompt_ids), idx, lp,
                               "sampled" if sample else "greedy"))
        log(f"  generated {min(b + batch, len(prompts))}/{len(prompts)} "
            f"({'sampled' if sample else 'greedy'}; {sum(len(e.ids) - e.loss_start for e in out)} tokens)")
    return out


def stdlib_chunks(tokenizer: Any, n_chunks: int, length: int, seed: int) -> list[list[int]]:
    """Token chunks of Python standard-library sources (the interpreter's own lib directory)."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.glob("*.py") if p.stat().st_size > 4000)
    rng = random.Random(seed)
    rng.shuffle(files)
    chunks: list[list[int]] = []
    for path in files:
        if len(chunks) >= n_chunks:
            break
        ids = tokenizer(path.read_text(errors="replace"))["input_ids"]
        if len(ids) < length:
            continue
        start = rng.randrange(0, len(ids) - length + 1)
        chunks.append([int(t) for t in ids[start : start + length]])
    return chunks


@torch.inference_mode()
def teacher_examples(model: Any, chunks: list[list[int]], k: int, batch: int) -> list[Example]:
    out: list[Example] = []
    for b in range(0, len(chunks), batch):
        ids = torch.tensor(chunks[b : b + batch])
        logits = model(ids).logits[:, :-1]
        for i in range(ids.shape[0]):
            idx, lp = compress(logits[i], k)
            out.append(Example(chunks[b + i], 1, idx, lp, "stdlib"))
        log(f"  teacher pass {min(b + batch, len(chunks))}/{len(chunks)} stdlib chunks")
    return out


def make_draft(target: Any, n_layers: int, init_layers: list[int]) -> Any:
    """A LlamaForCausalLM of the target's width: own layers (copied) + norm; shared embedding, head."""
    import copy

    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = copy.deepcopy(target.config)
    config.num_hidden_layers = n_layers
    for attr in ("quantization_config", "_name_or_path"):
        if hasattr(config, attr):
            delattr(config, attr)
    with torch.device("meta"):
        draft = LlamaForCausalLM(config)
    draft.model.layers = torch.nn.ModuleList(copy.deepcopy(target.model.layers[i]) for i in init_layers)
    for i, layer in enumerate(draft.model.layers):
        layer.self_attn.layer_idx = i  # each layer's slot in the KV cache
    draft.model.norm = copy.deepcopy(target.model.norm)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.lm_head = target.lm_head
    draft.model.rotary_emb = LlamaRotaryEmbedding(config=config)
    return draft


def own_state(draft: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().to(torch.float16).contiguous() for n, p in draft.named_parameters()
            if n.startswith(("model.layers.", "model.norm."))}


def distil_loss(logits: torch.Tensor, top_idx: torch.Tensor, top_logp: torch.Tensor) -> torch.Tensor:
    """Cross-entropy from the teacher (top-K + pooled rest) to the student pooled the same way, per row."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    logq_top = logq.gather(-1, top_idx.long())
    p_top = top_logp.float().exp()
    p_rest = (1.0 - p_top.sum(-1)).clamp_min(0.0)
    q_rest = (1.0 - logq_top.exp().sum(-1)).clamp_min(1e-6)
    return -(p_top * logq_top).sum(-1) - p_rest * q_rest.log()


def batches(examples: list[Example], tokens_per_batch: int, rng: random.Random) -> list[list[Example]]:
    """Length-sorted buckets (little padding), shuffled."""
    order = sorted(examples, key=lambda e: len(e.ids))
    out: list[list[Example]] = []
    cur: list[Example] = []
    for e in order:
        if cur and (len(cur) + 1) * len(e.ids) > tokens_per_batch:
            out.append(cur)
            cur = []
        cur.append(e)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def batch_loss(draft: Any, group: list[Example]) -> tuple[torch.Tensor, int, int]:
    """Mean distillation loss over the group's distilled positions; also argmax agreements and count."""
    width = max(len(e.ids) for e in group)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in group])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in group])
    hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state
    rows = torch.cat([hidden[i, e.loss_start - 1 : len(e.ids) - 1] for i, e in enumerate(group)])
    top_idx = torch.cat([e.top_idx for e in group])
    top_logp = torch.cat([e.top_logp for e in group])
    logits = draft.lm_head(rows)
    loss = distil_loss(logits, top_idx, top_logp).mean()
    agree = int((logits.argmax(-1) == top_idx[:, 0].long()).sum())
    return loss, agree, rows.shape[0]


@torch.no_grad()
def agreement(draft: Any, examples: list[Example], tokens_per_batch: int) -> tuple[float, float]:
    """Teacher-forced top-1 agreement and mean loss on held-out examples (a proxy for greedy alpha)."""
    agree = total = 0
    loss_sum = 0.0
    for group in batches(examples, tokens_per_batch, random.Random(0)):
        loss, a, n = batch_loss(draft, group)
        agree += a
        total += n
        loss_sum += float(loss) * n
    return agree / max(total, 1), loss_sum / max(total, 1)


def train(args: argparse.Namespace) -> None:
    t_start = time.time()
    model, tokenizer = load_target(args.threads)
    data_path = Path(args.data_cache)
    if data_path.is_file():
        log(f"reusing cached teacher data {data_path}")
        examples = [Example(**d) for d in torch.load(data_path)]
    else:
        insts = instructions(args.seed)[: args.limit or None]
        log(f"{len(insts)} instructions; generating the target's answers")
        texts = [t for _, t in insts]
        examples = generate_examples(model, tokenizer, texts, False, args.max_new, args.gen_batch, args.top_k,
                                     args.seed)
        examples += generate_examples(model, tokenizer, texts, True, args.max_new, args.gen_batch, args.top_k,
                                      args.seed + 1)
        chunks = stdlib_chunks(tokenizer, args.stdlib_chunks, args.chunk_len, args.seed)
        examples += teacher_examples(model, chunks, args.top_k, 4)
        torch.save([vars(e) for e in examples], data_path)  # plain dicts: loadable with weights_only
    rng = random.Random(args.seed)
    rng.shuffle(examples)
    n_val = max(8, len(examples) // 12)
    val, train_set = examples[:n_val], examples[n_val:]
    n_tokens = sum(len(e.ids) - e.loss_start for e in train_set)
    log(f"data: {len(train_set)} train examples ({n_tokens} distilled tokens), {len(val)} held out; "
        f"{time.time() - t_start:.0f}s so far")

    init_layers = [int(x) for x in args.init_layers.split(",")]
    draft = make_draft(model, len(init_layers), init_layers)
    params = [p for n, p in draft.named_parameters() if n.startswith(("model.layers.", "model.norm."))]
    for p in params:
        p.requires_grad_(True)
    acc0, loss0 = agreement(draft, val, args.batch_tokens)
    log(f"initial (target layers {init_layers} + final norm): held-out top-1 agreement {acc0:.3f}, "
        f"loss {loss0:.3f}")

    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.98))
    plan = [batches(train_set, args.batch_tokens, rng) for _ in range(args.epochs)]
    total_steps = sum(len(p) for p in plan)
    warmup = max(1, total_steps // 20)
    step = 0
    history: list[dict[str, float]] = []
    deadline = t_start + args.minutes * 60
    draft.train()
    stopped_early = False
    best: tuple[float, int, dict[str, torch.Tensor]] | None = None
    for epoch, groups in enumerate(plan):
        run_loss, run_agree, run_n = 0.0, 0, 0
        for group in groups:
            lr = args.lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            for g in opt.param_groups:
                g["lr"] = lr
            loss, a, n = batch_loss(draft, group)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            run_loss += float(loss.detach()) * n
            run_agree += a
            run_n += n
            if step % 20 == 0:
                log(f"  epoch {epoch} step {step}/{total_steps} loss {run_loss / run_n:.3f} "
                    f"agree {run_agree / run_n:.3f} lr {lr:.2e}")
            if time.time() > deadline:
                stopped_early = True
                break
        draft.eval()
        acc, vloss = agreement(draft, val, args.batch_tokens)
        draft.train()
        history.append({"epoch": epoch, "train_loss": run_loss / max(run_n, 1), "val_agree": acc,
                        "val_loss": vloss, "elapsed_s": time.time() - t_start})
        if best is None or vloss < best[0]:  # keep the epoch that generalises best, not the last
            best = (vloss, epoch, {n: t.detach().clone() for n, t in draft.state_dict().items()
                                   if n.startswith(("model.layers.", "model.norm."))})
        log(f"epoch {epoch}: held-out agreement {acc:.3f}, loss {vloss:.3f} ({time.time() - t_start:.0f}s)")
        if stopped_early:
            log(f"time budget of {args.minutes} min reached at step {step}/{total_steps}")
            break
    draft.eval()
    assert best is not None
    draft.load_state_dict(best[2], strict=False)
    log(f"keeping epoch {best[1]} (lowest held-out loss {best[0]:.3f})")
    save(draft, args, {"kept_epoch": best[1],
        "init_layers": init_layers, "initial_val_agree": acc0, "initial_val_loss": loss0,
        "history": history, "steps": step, "planned_steps": total_steps, "stopped_early": stopped_early,
        "train_examples": len(train_set), "train_tokens": n_tokens, "val_examples": len(val),
        "sources": {s: sum(1 for e in examples if e.source == s) for s in ("greedy", "sampled", "stdlib")},
        "wall_s": time.time() - t_start, "args": vars(args),
    })


def save(draft: Any, args: argparse.Namespace, info: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from specscope.core.engine.demo import compress_draft_weights

    weights = out / "draft_layers.safetensors"
    save_file(own_state(draft), str(weights),
              metadata={"format": "pt", "shares": "model.embed_tokens, lm_head with SmolLM2-135M-Instruct"})
    compress_draft_weights(weights)  # shipped as .xz (lossless); the loader unpacks it into the cache once
    weights.unlink()
    draft.config.save_pretrained(out)
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    log(f"saved the draft to {out} ({size / 1e6:.1f} MB)")


# ---- measurement ---------------------------------------------------------------------------------------

FALLBACK_PROMPTS = [
    {"id": "p1", "kind": "prose", "title": "tides", "text": "Explain why the sea has tides."},
    {"id": "c1", "kind": "code", "title": "palindrome", "text": "Write a Python function that checks "
                                                                 "whether a string is a palindrome."},
    {"id": "s1", "kind": "structured", "title": "planets json", "text": "Give a JSON list of the four inner "
                                                                        "planets with name and order."},
]


def load_prompts() -> list[dict[str, str]]:
    prompts: list[dict[str, str]] = []
    for path in sorted(PROMPTS_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict):  # {"kind": ..., "prompts": [{"id", "title", "text"}, ...]}
            data = [{"kind": data.get("kind", path.stem)} | p for p in data.get("prompts", [])]
        prompts += [p for p in data if isinstance(p, dict) and {"kind", "text"} <= p.keys()]
    return prompts or FALLBACK_PROMPTS


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


@torch.inference_mode()
def step_costs(pair: Any, reps: int) -> dict[str, float]:
    """Median ms of one cached decoding step at ~100 tokens of context: target, draft, head alone."""
    from transformers import DynamicCache

    def one(model: Any) -> float:
        cache = DynamicCache(config=model.config)
        model(torch.arange(100, 200).unsqueeze(0), cache=cache, use_cache=True, logits_to_keep=1)
        times = []
        for i in range(reps):
            t0 = time.perf_counter()
            model(torch.tensor([[300 + i]]), cache=cache, use_cache=True, logits_to_keep=1)
            times.append((time.perf_counter() - t0) * 1000)
        return median(times)

    target, draft = pair.target.model, pair.draft.model
    h = torch.randn(1, 1, target.config.hidden_size)
    head = []
    for _ in range(reps):
        t0 = time.perf_counter()
        target.lm_head(h)
        head.append((time.perf_counter() - t0) * 1000)
    costs = {"target": 0.0, "draft": 0.0}
    for _ in range(2):  # interleaved
        costs["target"] += one(target) / 2
        costs["draft"] += one(draft) / 2
    costs["head"] = median(head)
    return costs


def measure(args: argparse.Namespace) -> None:
    from specscope.core.controls import Controls
    from specscope.core.engine.demo import load_demo_pair
    from specscope.core.engine.speculative import DecodeOptions, Decoder
    from specscope.core.measure.measurement import run_summary
    from specscope.core.records import ControlValues

    torch.set_num_threads(args.threads)
    pair = load_demo_pair("model")
    prompts = load_prompts()
    if args.per_kind:
        prompts = [p for i, p in enumerate(prompts)
                   if sum(q["kind"] == p["kind"] for q in prompts[:i]) < args.per_kind]
    opts = DecodeOptions(max_new_tokens=args.new_tokens, eos_token_ids=pair.eos_token_ids)
    costs = step_costs(pair, 40)
    log(f"step costs (ms): {costs}")
    plain_dec = Decoder(pair.target.model, pair.vocab_size, token_text=pair.token_text)
    spec_dec = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter, token_text=pair.token_text)
    ks = [int(k) for k in args.ks.split(",")]
    rows: list[dict[str, Any]] = []
    mismatches: list[str] = []
    for p in prompts:
        ids = pair.encode_prompt(p["text"])
        for rep in range(args.reps):
            plain = plain_dec.run(ids, Controls(ControlValues(k=1)), opts, plain=True)
            row: dict[str, Any] = {"id": p.get("id", "?"), "kind": p["kind"], "rep": rep,
                                   "plain_s": plain.elapsed_s, "n": len(plain.token_ids),
                                   "plain_step_ms": median([r.iteration_ms for r in plain.iterations])}
            for k in ks:  # interleaved with the plain run of the same prompt
                res = spec_dec.run(ids, Controls(ControlValues(k=k)), opts)
                if res.token_ids != plain.token_ids:
                    mismatches.append(f"{p.get('id')} k={k}")
                summary = run_summary(res.iterations)  # the measurement owner's α (accepted / judged)
                row[f"alpha_{k}"] = summary["alpha"]
                row[f"tpi_{k}"] = summary["tokens_per_iteration"]
                row[f"s_{k}"] = res.elapsed_s
                row[f"draft_step_ms_{k}"] = sum(r.draft_ms for r in res.iterations) / max(res.n_drafted, 1)
                row[f"verify_ms_{k}"] = median([r.verify_ms for r in res.iterations])
            rows.append(row)
            log(f"  {row['id']} ({row['kind']}) rep {rep}: plain {plain.elapsed_s:.2f}s "
                + " ".join(f"k={k}: a={row[f'alpha_{k}']:.2f} x{plain.elapsed_s / row[f's_{k}']:.2f}"
                           for k in ks))
    report = {"costs_ms": costs, "ks": ks, "rows": rows, "mismatches": mismatches,
              "threads": args.threads, "new_tokens": args.new_tokens, "reps": args.reps,
              "command": " ".join(["python", *sys.argv])}
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print_summary(report)


def print_summary(report: dict[str, Any]) -> None:
    costs, ks, rows = report["costs_ms"], report["ks"], report["rows"]
    print(f"\nstep (ms, median): target {costs['target']:.1f}, draft {costs['draft']:.1f} "
          f"(c = {costs['draft'] / costs['target']:.2f}), head alone {costs['head']:.1f} "
          f"({costs['head'] / costs['draft']:.0%} of the draft step)")
    plain_ms = median([r["plain_step_ms"] for r in rows])
    print("in the loop (median over runs): plain step " f"{plain_ms:.1f} ms; "
          + "; ".join(f"k={k}: draft step {median([r[f'draft_step_ms_{k}'] for r in rows]):.1f} ms, "
                      f"verify pass {median([r[f'verify_ms_{k}'] for r in rows]):.1f} ms" for k in ks))
    print("\n| kind | prompts | " + " | ".join(f"α k={k} | tok/it k={k} | speed-up k={k}" for k in ks) + " |")
    print("|---|---|" + "---|---|---|" * len(ks))
    kinds = [*sorted({r["kind"] for r in rows}), "all"]
    for kind in kinds:
        sel = [r for r in rows if kind in ("all", r["kind"])]
        cells = []
        for k in ks:
            alpha = statistics.mean(r[f"alpha_{k}"] for r in sel if r[f"alpha_{k}"] is not None)
            tpi = statistics.mean(r[f"tpi_{k}"] for r in sel)
            speed = sum(r["plain_s"] for r in sel) / sum(r[f"s_{k}"] for r in sel)
            cells.append(f"{alpha:.2f} | {tpi:.2f} | {speed:.2f}×")
        print(f"| {kind} | {len({r['id'] for r in sel})} | " + " | ".join(cells) + " |")
    print(f"\ngreedy output equal to plain decoding: "
          f"{'yes, every run' if not report['mismatches'] else 'NO: ' + ', '.join(report['mismatches'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train", help="generate teacher data and distil the draft")
    tr.add_argument("--init-layers", default="0,1,2", help="target layers copied into the draft")
    tr.add_argument("--threads", type=int, default=1, help="1 avoids OpenMP thrashing on a shared CPU")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--max-new", type=int, default=128, help="tokens per generated answer")
    tr.add_argument("--gen-batch", type=int, default=22)
    tr.add_argument("--top-k", type=int, default=32, help="teacher log-probs kept per position")
    tr.add_argument("--limit", type=int, default=0, help="use only this many instructions (smoke tests)")
    tr.add_argument("--stdlib-chunks", type=int, default=64)
    tr.add_argument("--chunk-len", type=int, default=256)
    tr.add_argument("--epochs", type=int, default=16)
    tr.add_argument("--batch-tokens", type=int, default=1024)
    tr.add_argument("--lr", type=float, default=1e-3)
    tr.add_argument("--minutes", type=float, default=33.0, help="wall-time budget; training stops early")
    tr.add_argument("--data-cache", default="/tmp/specscope_demo_draft_data.pt")
    tr.add_argument("--out", default=str(OUT_DIR))
    me = sub.add_parser("measure", help="alpha per prompt kind, step costs, speed-up vs plain decoding")
    me.add_argument("--threads", type=int, default=2)
    me.add_argument("--ks", default="1,2,4,6")
    me.add_argument("--new-tokens", type=int, default=64)
    me.add_argument("--reps", type=int, default=1)
    me.add_argument("--per-kind", type=int, default=0, help="at most this many prompts per kind (0 = all)")
    me.add_argument("--json", default="/tmp/specscope_demo_measure.json")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    train(args) if args.cmd == "train" else measure(args)


if __name__ == "__main__":
    main()
