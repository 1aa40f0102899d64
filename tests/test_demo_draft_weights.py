"""The demo draft's weights ship xz-compressed and are unpacked once into the cache.

These tests build a small safetensors file of their own, so they need neither the demo target nor its
package; the shipped file itself is loaded by tests/test_demo.py's model-drafter pair.
"""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from specscope.core.engine import demo

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def weights() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {"model.layers.0.mlp.up_proj.weight": torch.randn(48, 16, generator=gen).to(torch.float16),
            "model.norm.weight": torch.ones(16, dtype=torch.float16)}


@pytest.fixture
def shipped_dir(tmp_path: Path, weights: dict[str, torch.Tensor]) -> Path:
    """A draft folder as the package ships it: only the .xz."""
    folder = tmp_path / "demo_draft"
    folder.mkdir()
    raw = folder / demo.DRAFT_WEIGHTS
    save_file(weights, str(raw))
    packed = demo.compress_draft_weights(raw)
    assert packed.name == demo.DRAFT_WEIGHTS_XZ
    assert lzma.decompress(packed.read_bytes()) == raw.read_bytes()
    raw.unlink()
    return folder


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_compressed_weights_are_unpacked_into_the_cache_once(
    shipped_dir: Path, weights: dict[str, torch.Tensor], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    said: list[str] = []
    assert _same(demo.load_draft_weights(shipped_dir, lambda message, _fraction: said.append(message)), weights)
    assert said == ["Unpacking the demo draft into the cache (once)"]  # the one slow first load says why
    unpacked = list((tmp_path / "cache" / "demo").glob("draft_layers-*.safetensors"))
    assert len(unpacked) == 1
    assert not list((tmp_path / "cache" / "demo").glob(".draft_layers.*")), "a temporary file was left"

    def no_decompress(data: bytes) -> bytes:
        raise AssertionError("decompressed again although the cache holds the weights")

    monkeypatch.setattr(demo.lzma, "decompress", no_decompress)
    assert _same(demo.load_draft_weights(shipped_dir, lambda message, _fraction: said.append(message)), weights)
    assert len(said) == 1


def test_a_changed_shipped_file_is_unpacked_again(
    shipped_dir: Path, weights: dict[str, torch.Tensor], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    demo.load_draft_weights(shipped_dir)
    changed = {k: v + 1 for k, v in weights.items()}
    save_file(changed, str(shipped_dir / demo.DRAFT_WEIGHTS))
    demo.compress_draft_weights(shipped_dir / demo.DRAFT_WEIGHTS)
    (shipped_dir / demo.DRAFT_WEIGHTS).unlink()
    assert _same(demo.load_draft_weights(shipped_dir), changed)
    # the earlier file's unpacked copy is gone: one copy per shipped file, not one per release ever installed
    assert len(list((tmp_path / "cache" / "demo").glob("draft_layers-*.safetensors"))) == 1


def test_an_unwritable_cache_still_loads_from_memory(
    shipped_dir: Path, weights: dict[str, torch.Tensor], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(blocker))
    assert _same(demo.load_draft_weights(shipped_dir), weights)


def test_a_freshly_trained_raw_file_wins_over_the_shipped_one(
    shipped_dir: Path, weights: dict[str, torch.Tensor], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    fresh = {k: v * 2 for k, v in weights.items()}
    save_file(fresh, str(shipped_dir / demo.DRAFT_WEIGHTS))
    assert _same(demo.load_draft_weights(shipped_dir), fresh)


def test_missing_weights_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(demo.DemoUnavailable, match=r"draft_layers\.safetensors\.xz"):
        demo.load_draft_weights(tmp_path)


def test_the_shipped_resources_stay_within_30_mb() -> None:
    files = [p for p in (ROOT / "resources").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    # A raw draft left by a local training run is git-ignored and not shipped.
    files = [p for p in files if p.name != demo.DRAFT_WEIGHTS]
    total = sum(p.stat().st_size for p in files)
    assert total <= 30_000_000, f"resources/ holds {total / 1e6:.1f} MB"
    assert (ROOT / "resources" / "demo_draft" / demo.DRAFT_WEIGHTS_XZ).is_file()
