"""What a model directory holds, read without loading its weights: the folder (local or in the hub cache), its
weights' format, its config and its tokenizer, and the checks that a target and a draft can be paired.

Vocabulary widths (padded embeddings). Many checkpoints pad the embedding and LM head to a round number of
rows (a multiple of 64 or 128), so the logits are wider than the tokenizer. Rows past the tokenizer are no
token at all, so the pair runs with ``ModelPair.vocab_size`` = the tokenizer's width (highest id + 1) and the
loop and the drafters cut every logits row to that width before any arg-max, softmax or sampling: a padded
row can never be chosen, and p and q live on the same support. Two models whose logit widths differ are
therefore fine as long as their tokenizers agree; a tokenizer wider than a model's logits is refused (that
model could never score its top ids).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specscope.core.engine.pair_spec import ModelLoadError
from specscope.core.model_config import config_problem

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.bin")


class IncompatibleTokenizers(ModelLoadError):
    """The target and draft tokenizers do not give the same id for every token."""


def hf_hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time (HF_HUB_CACHE, then HF_HOME)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def model_path_problem(name: str) -> str | None:
    """Why ``name`` can name no model (a file, or a path with nothing there, or no hub id either), or None when
    it is a folder or may be a hub id. Reads no model and needs no torch: the CLI and the worker ask it before
    the engine's imports."""
    path = Path(name).expanduser()
    if path.exists():
        return None if path.is_dir() else f"{name} is a file, not a model directory"
    looks_like_path = name.startswith((".", "/", "~")) or os.sep + os.sep in name or name.count("/") > 1
    if looks_like_path or not _HUB_ID.match(name):
        return f"no model directory at {name}"
    return None


def resolve_model_dir(name: str, local_files_only: bool = True, allow_pickle: bool = False,
                      trust_remote_code: bool = False) -> Path:
    """A local model directory for ``name``: an existing path, or a hub id found in the local HF cache."""
    problem = model_path_problem(name)
    if problem is not None:
        raise ModelLoadError(problem)
    path = Path(name).expanduser()
    if path.exists():
        return path.resolve()
    from huggingface_hub import snapshot_download

    cache = hf_hub_cache_dir()
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]
    if allow_pickle:
        patterns += ["*.bin", "*.pt"]
    if trust_remote_code:
        patterns += ["*.py"]
    try:
        found = snapshot_download(name, cache_dir=str(cache), local_files_only=local_files_only,
                                  allow_patterns=patterns)
    except Exception as exc:  # hub errors come in many classes; all mean "not available"
        kind = type(exc).__name__
        if local_files_only:
            message = (f"{name} is neither a local directory nor in the Hugging Face cache at {cache}; "
                       f"download it first (hf download {name}) or allow network access")
        else:
            message = f"could not get {name} from the Hugging Face hub ({kind}: {str(exc).splitlines()[0]})"
    else:
        return Path(found)
    raise ModelLoadError(message)


def check_weights(directory: Path, allow_pickle: bool) -> None:
    """Refuse a folder without weights, or with pickle weights only unless the user trusts them."""
    names = {p.name for p in directory.iterdir()}
    if any(n.endswith(".safetensors") or n == "model.safetensors.index.json" for n in names):
        return
    pickled = sorted(n for n in names if n in _PICKLE_WEIGHTS or n.endswith((".bin", ".pt")))
    if pickled:
        if allow_pickle:
            return
        raise ModelLoadError(f"{directory} has only pickle weights ({pickled[0]}); pickle can run code while "
                             "loading, so pass --allow-pickle if you trust this model")
    raise ModelLoadError(f"no weights in {directory} (expected model.safetensors)")


def read_config(directory: Path, trust_remote_code: bool) -> Any:
    """The model's config, checked to be a causal LM transformers knows (or opted-in remote code)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    problem = config_problem(directory)  # the app's model dialog runs the same checks when a folder is chosen
    if problem is not None:
        raise ModelLoadError(problem)

    def refusal(exc: Exception) -> str:
        if "trust_remote_code" in str(exc):
            return (f"{directory} needs custom code from the model's repository to load; pass "
                    "--trust-remote-code only if you trust it")
        if "does not recognize this architecture" in str(exc) or "model type" in str(exc):
            return (f"transformers does not know the architecture named in {directory / 'config.json'}; "
                    f"specscope needs a causal language model that transformers can load\n{library_detail(exc)}")
        return f"the model config in {directory} cannot be read\n{library_detail(exc)}"

    config = read_or_refuse(lambda: AutoConfig.from_pretrained(str(directory), trust_remote_code=trust_remote_code,
                                                               local_files_only=True), refusal)
    model_type = getattr(config, "model_type", "")
    remote = trust_remote_code and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {})
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not remote:
        text = config.get_text_config(decoder=True)
        if text is not config:  # an image (or audio) model around a language model
            architecture = (getattr(config, "architectures", None) or [type(config).__name__])[0]
            raise ModelLoadError(f"{directory} holds a vision-language model ({architecture}) that transformers "
                                 "loads only as a whole, not as a causal language model; use a text-only "
                                 f"checkpoint of its language model ({text.model_type}) instead")
        raise ModelLoadError(f"unsupported architecture {model_type!r} in {directory}: specscope needs a "
                             "causal language model that transformers can load")
    return config


def read_tokenizer(directory: Path, trust_remote_code: bool, role: str) -> Any:
    """The folder's tokenizer, read offline (``role`` names the model in the sentence when it cannot be)."""
    from transformers import AutoTokenizer

    files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if not any((directory / f).is_file() for f in files):
        raise ModelLoadError(f"no tokenizer for the {role} in {directory} (expected tokenizer.json)")

    def refusal(exc: Exception) -> str:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"could not load the {role}'s tokenizer from {directory} ({first[:160]})"

    return read_or_refuse(lambda: AutoTokenizer.from_pretrained(str(directory), trust_remote_code=trust_remote_code,
                                                                local_files_only=True), refusal)


def read_or_refuse(read: Callable[[], Any], refusal: Callable[[Exception], str]) -> Any:
    """``read()``, or a ModelLoadError with ``refusal(exc)``: raised after the handler, so the library's
    exception (and the objects its traceback holds) is not chained to ours."""
    message = ""
    try:
        return read()
    except Exception as exc:  # a library's errors come in many classes; each is one sentence for the user
        message = refusal(exc)
    raise ModelLoadError(message)


def library_detail(exc: BaseException) -> str:
    """The library's own words, whole, for a second line under our sentence (its first line; no advice
    to disable safety checks is ours)."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    return f"detail ({type(exc).__name__}): {first or 'no message'}"


# ---- tokenizers -------------------------------------------------------------------------------------
def tokenizer_width(tokenizer: Any) -> int:
    """Highest token id + 1 (added and special tokens included): the width logits are cut to."""
    vocab = tokenizer.get_vocab()
    return max(max(vocab.values()) + 1, len(tokenizer)) if vocab else len(tokenizer)


def check_tokenizers(target_tok: Any, draft_tok: Any) -> None:
    """Refuse a pair whose tokenizers do not map every token to the same id (added/special tokens too).

    Only the id mapping matters: the target's tokenizer encodes, and the draft reads the same ids, so
    normalisation or pre-tokenisation settings may differ. Raises :class:`IncompatibleTokenizers` naming the
    first differing id and how many more differ.
    """
    by_id_t = {i: t for t, i in target_tok.get_vocab().items()}
    by_id_d = {i: t for t, i in draft_tok.get_vocab().items()}
    if by_id_t == by_id_d:
        return
    differing = sorted(i for i in by_id_t.keys() | by_id_d.keys() if by_id_t.get(i) != by_id_d.get(i))
    first = differing[0]

    def show(tok: str | None, where: str) -> str:
        return f"missing from the {where}" if tok is None else f"{tok!r} in the {where}"

    more = f" (and {len(differing) - 1:,} more)" if len(differing) > 1 else ""
    raise IncompatibleTokenizers(
        f"tokenizers differ: id {first} is {show(by_id_t.get(first), 'target')} but "
        f"{show(by_id_d.get(first), 'draft')}{more}"
    )


def logit_width(config: Any) -> int:
    """The width of the model's logits (its config's vocab_size; 0 when the config does not say)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "vocab_size", 0) or 0)


def check_vocab_width(width: int, logit_width: int, role: str) -> None:
    if logit_width and width > logit_width:
        raise ModelLoadError(f"the tokenizer has {width:,} token ids but the {role}'s logits have only "
                             f"{logit_width:,} columns: they do not belong together")
