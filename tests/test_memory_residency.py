"""Residency of real tiny CPU models: bytes per device, meta, offload hooks, device maps, KV-cache bytes."""

from __future__ import annotations

import torch
from accelerate import cpu_offload, dispatch_model
from transformers import DynamicCache

from specscope.core.memory.residency import format_residency, kv_cache_bytes, model_residency
from tests.models import tiny_model


def nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_bytes_add_up_to_parameters_and_buffers() -> None:
    model = tiny_model(0)
    r = model_residency(model, expected_device="cpu", name="target")
    n_params = sum(p.numel() for p in model.parameters())
    assert r.param_bytes == n_params * 4  # float32
    assert r.buffer_bytes == nbytes(list(model.buffers())) > 0  # rotary inv_freq
    assert r.bytes_by_device == {"cpu": r.param_bytes + r.buffer_bytes}
    assert not r.offloaded and r.warnings == []


def test_dtype_size_counts() -> None:
    model = tiny_model(0).to(torch.bfloat16)
    r = model_residency(model)
    assert r.param_bytes == sum(p.numel() for p in model.parameters()) * 2


def test_part_on_meta_is_reported() -> None:
    model = tiny_model(0)
    head = model.lm_head.weight.numel() * 4
    model.lm_head.to("meta")
    r = model_residency(model, expected_device="cpu", name="draft")
    assert r.bytes_by_device["meta"] == head
    assert r.bytes_by_device["cpu"] + head == r.total_bytes
    assert not r.offloaded
    assert any("meta device" in w for w in r.warnings)
    assert any("not on cpu as asked" in w for w in r.warnings)


def test_cpu_offload_hooks_are_reported_and_the_model_still_runs() -> None:
    model = tiny_model(1)
    params = sum(p.numel() for p in model.parameters()) * 4
    cpu_offload(model, execution_device=torch.device("cpu"))
    assert next(model.parameters()).device.type == "meta"  # what a naive check would see
    r = model_residency(model, name="draft")
    assert r.offloaded and r.offloaded_bytes == params
    assert "meta" not in r.bytes_by_device  # the weights live in the hook's host copy
    assert r.bytes_by_device["cpu"] == r.total_bytes
    assert r.execution_devices == ["cpu"]
    assert any("offload hooks" in w for w in r.warnings)
    line = format_residency("draft", r)
    assert "offloaded" in line and "\n" not in line
    with torch.no_grad():
        assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 64)


def test_dispatch_model_with_disk_entries(tmp_path) -> None:
    model = tiny_model(2)
    layer1 = nbytes(list(model.model.layers[1].parameters()))
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                  "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    dispatch_model(model, device_map=device_map, offload_dir=str(tmp_path))
    r = model_residency(model, expected_device="cpu", name="target")
    assert r.bytes_by_device["disk"] == layer1
    assert r.offloaded_bytes == layer1
    assert r.device_map["model.layers.1"] == "disk"
    assert any("on disk" in w for w in r.warnings)


def test_mixed_device_map_without_hooks_warns() -> None:
    model = tiny_model(3)
    model.hf_device_map = {"model": 0, "lm_head": "cpu"}  # as left by a loader that split the model
    r = model_residency(model, name="target")
    assert r.offloaded
    assert r.device_map == {"model": "cuda:0", "lm_head": "cpu"}
    assert any("device map" in w for w in r.warnings)


def test_expected_device_mismatch() -> None:
    r = model_residency(tiny_model(0), expected_device="cuda", name="target")
    assert any("not on cuda:0 as asked" in w for w in r.warnings)


def test_kv_cache_bytes() -> None:
    model = tiny_model(0)
    cache = DynamicCache(config=model.config)
    assert kv_cache_bytes(None) == 0
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3, 4, 5]]), cache=cache, use_cache=True)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    per_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * 4
    assert kv_cache_bytes(cache) == 5 * per_token
    cache.crop(-2)
    assert kv_cache_bytes(cache) == 3 * per_token


def test_format_residency_names_each_device() -> None:
    model = tiny_model(0)
    model.lm_head.to("meta")
    line = format_residency("draft", model_residency(model, name="draft"))
    assert line.startswith("draft: ") and "cpu" in line and "meta" in line and line.endswith("[!]")
