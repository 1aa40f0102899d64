"""Prepacked CPU linears (core/cpu_linear): same numbers, the loop still exact, memory reported, opt-out works."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from specscope.core.controls import Controls
from specscope.core.engine import cpu_linear
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.memory.residency import format_residency, model_residency, prepacked_bytes
from specscope.core.records import ControlValues
from tests.models import perturbed, tiny_model

V = 64
PROMPTS = [[1, 2, 3], [7, 8, 9, 10, 11, 12], [40, 41, 40, 41]]

needs_onednn = pytest.mark.skipif(not cpu_linear.available(), reason="this PyTorch has no oneDNN")


def _linears(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


@needs_onednn
def test_packing_swaps_every_float32_linear_in_place_and_unpacking_restores_them() -> None:
    model = tiny_model(0, vocab_size=V)
    before = {name: (id(m), id(m.weight)) for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert cpu_linear.prepack_linears(model) is None
    after = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert set(after) == set(before)
    for name, module in after.items():
        assert type(module) is cpu_linear.PrepackedLinear
        assert (id(module), id(module.weight)) == before[name]  # the same objects: references stay valid
    weight_bytes = sum(m.weight.numel() * m.weight.element_size() for m in after.values())
    assert prepacked_bytes(model) >= weight_bytes
    cpu_linear.unpack_linears(model)
    assert all(type(m) is nn.Linear for m in _linears(model))
    assert prepacked_bytes(model) == 0


@needs_onednn
def test_tied_embeddings_stay_tied() -> None:
    model = tiny_model(0, vocab_size=V)
    model.lm_head.weight = model.model.embed_tokens.weight
    cpu_linear.prepack_linears(model)
    assert model.lm_head.weight is model.model.embed_tokens.weight


@needs_onednn
def test_one_token_is_the_default_kernel_bit_for_bit_and_more_tokens_agree_to_rounding() -> None:
    torch.manual_seed(0)
    dense = nn.Linear(96, 200)
    packed = nn.Linear(96, 200)
    packed.load_state_dict(dense.state_dict())
    assert cpu_linear.prepack_linears(packed) is None
    with torch.inference_mode():
        one = torch.randn(1, 1, 96)
        assert torch.equal(packed(one), dense(one))
        for rows in (2, 3, 9, 64):
            x = torch.randn(1, rows, 96)
            got, want = packed(x), dense(x)
            assert got.shape == want.shape == (1, rows, 200)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        strided = torch.randn(5, 2, 96).transpose(0, 1)  # not contiguous
        torch.testing.assert_close(packed(strided), dense(strided), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_training_still_differentiates_through_the_dense_weight() -> None:
    layer = nn.Linear(16, 8)
    cpu_linear.prepack_linears(layer)
    x = torch.randn(4, 16, requires_grad=True)
    layer(x).sum().backward()
    assert layer.weight.grad is not None and x.grad is not None


@needs_onednn
def test_a_model_that_would_not_fit_keeps_the_default_kernels_and_says_why() -> None:
    model = tiny_model(0, vocab_size=V)
    why = cpu_linear.prepack_linears(model, free_bytes=1024)
    assert why is not None and "host memory" in why and "default kernels" in why
    assert all(type(m) is nn.Linear for m in _linears(model))


def test_half_precision_and_hooked_linears_are_left_alone() -> None:
    half = tiny_model(0, vocab_size=V).to(torch.bfloat16)
    assert cpu_linear.packable_bytes(half) == 0
    assert cpu_linear.prepack_linears(half) is None
    assert all(type(m) is nn.Linear for m in _linears(half))


@needs_onednn
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_speculation_on_prepacked_models_equals_plain_greedy(k: int) -> None:
    target = tiny_model(0, vocab_size=V, logit_scale=3.0)
    drafts = {"perfect": target, "partial": perturbed(target, 0.03)}
    plain_target = tiny_model(0, vocab_size=V, logit_scale=3.0)  # never packed
    for draft in {id(d): d for d in (target, *drafts.values())}.values():
        assert cpu_linear.prepack_linears(draft) is None
    for name, draft in drafts.items():
        for prompt in PROMPTS:
            opts = DecodeOptions(max_new_tokens=30)
            plain = Decoder(plain_target, V).run(prompt, options=opts, plain=True).token_ids
            assert Decoder(target, V).run(prompt, options=opts, plain=True).token_ids == plain
            spec = Decoder(target, V, drafter=ModelDrafter(draft, V)).run(prompt, Controls(ControlValues(k=k)), opts)
            assert spec.token_ids == plain, (name, k, prompt)


@needs_onednn
def test_residency_counts_the_packed_copies_in_host_memory() -> None:
    model = tiny_model(0, vocab_size=V)
    dense = model_residency(model, "cpu")
    cpu_linear.prepack_linears(model)
    packed = model_residency(model, "cpu")
    assert packed.prepacked_bytes == prepacked_bytes(model) > 0
    assert packed.bytes_by_device["cpu"] == dense.bytes_by_device["cpu"] + packed.prepacked_bytes
    assert packed.total_bytes == dense.total_bytes + packed.prepacked_bytes
    assert not packed.warnings  # host copies of a CPU model are where it was asked to be
    assert "prepacked copies for multi-token passes" in format_residency("target", packed)


def test_the_opt_out_reaches_the_pair_spec() -> None:
    import argparse

    from specscope.core.commands.pair_arguments import add_pair_arguments, spec_from_args

    parser = argparse.ArgumentParser()
    add_pair_arguments(parser)
    assert spec_from_args(parser.parse_args(["--demo"])).prepack_cpu is True
    assert spec_from_args(parser.parse_args(["--demo", "--no-prepack"])).prepack_cpu is False


@pytest.fixture
def packed_calls(monkeypatch) -> list[int]:
    """Rows of every product that ran on a packed weight."""
    calls: list[int] = []
    real = cpu_linear._packed_product

    def counting(x, packed, bias):
        calls.append(x.shape[0])
        return real(x, packed, bias)

    monkeypatch.setattr(cpu_linear, "_packed_product", counting)
    return calls


@needs_onednn
def test_only_passes_of_two_or_more_rows_use_the_packed_weight(packed_calls) -> None:
    layer = nn.Linear(16, 8)
    cpu_linear.prepack_linears(layer)
    with torch.inference_mode():
        layer(torch.randn(1, 1, 16))
        layer(torch.randn(1, 3, 16))
        layer(torch.randn(2, 16).double().float())
    assert packed_calls == [3, 2]


@needs_onednn
def test_a_copied_model_packs_its_own_weights(packed_calls) -> None:
    import copy

    model = tiny_model(0, vocab_size=V)
    cpu_linear.prepack_linears(model)
    clone = copy.deepcopy(model)  # oneDNN's packed tensors cannot be copied themselves
    assert clone.lm_head.weight is not model.lm_head.weight
    assert clone.lm_head.packed_weight is not model.lm_head.packed_weight
    assert prepacked_bytes(clone) == prepacked_bytes(model)
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        torch.testing.assert_close(clone(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert packed_calls  # both ran on packed weights


@needs_onednn
def test_a_weight_paged_by_an_accelerate_hook_is_never_bypassed(packed_calls, tmp_path) -> None:
    from accelerate import disk_offload
    from accelerate.hooks import remove_hook_from_module

    model = tiny_model(0, vocab_size=V)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        want = model(ids).logits
    cpu_linear.prepack_linears(model)
    layer = model.model.layers[0]
    disk_offload(layer, str(tmp_path / "layer0"), execution_device="cpu")
    with torch.inference_mode():
        got = model(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    n_layer_linears = sum(isinstance(m, nn.Linear) for m in layer.modules())
    n_all = sum(isinstance(m, nn.Linear) for m in model.modules())
    assert len(packed_calls) == n_all - n_layer_linears  # the drilled layer read its weights through the hook
    remove_hook_from_module(layer, recurse=True)


def test_the_bench_report_names_the_kernels_its_passes_ran_on() -> None:
    from types import SimpleNamespace

    from specscope.core.commands.bench import _pair_line

    model = tiny_model(0, vocab_size=V)
    pair = SimpleNamespace(description="tiny", target=SimpleNamespace(model=model, name="tiny",
                                                                        device=torch.device("cpu")))
    assert _pair_line(pair).endswith("PyTorch's default CPU kernels for every pass")
    if cpu_linear.available():
        cpu_linear.prepack_linears(model)
        assert _pair_line(pair).endswith("multi-token passes on oneDNN weights prepacked at load")
        pair.target.one_token_kernels = {2: "one-token steps on oneDNN's packed weights (15.2 ms packed against "
                                            "31.3 ms default for the linears at 2 threads)"}
        assert _pair_line(pair).endswith("prepacked at load; target " + pair.target.one_token_kernels[2])


@needs_onednn
def test_a_weight_shared_by_two_models_is_packed_once() -> None:
    target = tiny_model(0, vocab_size=V)
    draft = tiny_model(1, vocab_size=V, layers=1)
    draft.lm_head.weight = target.lm_head.weight  # as the demo draft shares the target's head
    cpu_linear.prepack_linears(target)
    cpu_linear.prepack_linears(draft)
    assert draft.lm_head.packed_weight is target.lm_head.packed_weight
    assert draft.model.layers[0].mlp.up_proj.packed_weight is not target.model.layers[0].mlp.up_proj.packed_weight
    cpu_linear.unpack_linears(draft)
    cpu_linear.prepack_linears(draft)  # packs afresh after an unpack: nothing stale is served
    torch.testing.assert_close(cpu_linear._pack(draft.lm_head.weight).to_dense(),
                               draft.lm_head.packed_weight.to_dense())


@needs_onednn
def test_a_packing_failure_leaves_the_model_as_loaded_and_says_why(monkeypatch) -> None:
    model = tiny_model(0, vocab_size=V)
    real, calls = cpu_linear._pack, []

    def failing_after_two(weight):
        calls.append(1)
        if len(calls) > 2:
            raise RuntimeError("could not create a primitive descriptor\nmore detail")
        return real(weight)

    monkeypatch.setattr(cpu_linear, "_pack", failing_after_two)
    why = cpu_linear.prepack_linears(model)
    assert why == ("multi-token passes on CPU use PyTorch's default kernels: packing the weights failed "
                   "(could not create a primitive descriptor)")
    assert all(type(m) is nn.Linear for m in _linears(model)) and prepacked_bytes(model) == 0


@needs_onednn
def test_one_token_steps_take_the_packed_kernel_only_at_a_thread_count_chosen_for_it(packed_calls) -> None:
    torch.manual_seed(0)
    dense = nn.Linear(96, 200)
    packed = nn.Linear(96, 200)
    packed.load_state_dict(dense.state_dict())
    cpu_linear.prepack_linears(packed)
    threads = torch.get_num_threads()
    assert cpu_linear.one_row_choice(packed, threads) is None
    one = torch.randn(1, 1, 96)
    with torch.inference_mode():
        cpu_linear.set_one_row_kernel(packed, threads, True)
        torch.testing.assert_close(packed(one), dense(one), rtol=1e-5, atol=1e-5)
        assert packed_calls == [1]
        cpu_linear.set_one_row_kernel(packed, threads + 1, False)  # another count's choice leaves this one be
        assert cpu_linear.one_row_choice(packed, threads) is True
        cpu_linear.set_one_row_kernel(packed, threads, False)
        assert torch.equal(packed(one), dense(one))  # the default kernel again, bit for bit
        assert packed_calls == [1]
    cpu_linear.unpack_linears(packed)
    assert cpu_linear.one_row_choice(packed, threads) is None and "one_row_packed" not in packed.__dict__


@needs_onednn
def test_the_one_token_kernel_follows_its_timing_once_per_thread_count() -> None:
    model = tiny_model(0, vocab_size=V)
    assert cpu_linear.time_one_row(model) is None  # nothing packed: nothing to choose
    cpu_linear.prepack_linears(model)
    threads = torch.get_num_threads()
    timing = cpu_linear.choose_one_row_kernel(model)
    assert timing is not None and timing.threads == threads and timing.default_ms > 0 and timing.packed_ms > 0
    assert cpu_linear.one_row_choice(model, threads) is timing.packed_wins
    assert all(m.one_row_packed is model.lm_head.one_row_packed
               for m in model.modules() if isinstance(m, cpu_linear.PrepackedLinear))  # one choice per model
    assert cpu_linear.choose_one_row_kernel(model) is None  # timed once for this count
    assert ("oneDNN's packed weights" if timing.packed_wins else "PyTorch's default kernel") in timing.sentence()


def test_the_packed_kernel_must_be_clearly_faster_to_take_one_token_steps() -> None:
    assert cpu_linear.OneRowTiming(2, default_ms=40.0, packed_ms=24.0).packed_wins
    assert not cpu_linear.OneRowTiming(2, default_ms=40.0, packed_ms=39.0).packed_wins  # within the arms' spread
    assert not cpu_linear.OneRowTiming(1, default_ms=40.0, packed_ms=50.0).packed_wins
    assert "at 1 thread)" in cpu_linear.OneRowTiming(1, 40.0, 50.0).sentence()


@needs_onednn
@pytest.mark.parametrize("k", [1, 3])
def test_greedy_speculation_equals_plain_greedy_with_one_token_steps_packed_too(k: int) -> None:
    target = tiny_model(0, vocab_size=V, logit_scale=3.0)
    draft = perturbed(target, 0.03)
    plain_target = tiny_model(0, vocab_size=V, logit_scale=3.0)  # never packed
    threads = torch.get_num_threads()
    for model in (target, draft):
        cpu_linear.prepack_linears(model)
        cpu_linear.set_one_row_kernel(model, threads, True)
    for prompt in PROMPTS:
        opts = DecodeOptions(max_new_tokens=30)
        plain = Decoder(plain_target, V).run(prompt, options=opts, plain=True).token_ids
        assert Decoder(target, V).run(prompt, options=opts, plain=True).token_ids == plain
        spec = Decoder(target, V, drafter=ModelDrafter(draft, V)).run(prompt, Controls(ControlValues(k=k)), opts)
        assert spec.token_ids == plain, (k, prompt)


@needs_onednn
def test_a_run_times_its_thread_counts_one_token_kernel_and_records_it() -> None:
    from specscope.core.session import Session
    from tests.app_helpers import make_pair

    pair = make_pair("partial")
    cpu_linear.prepack_linears(pair.target.model)
    threads = torch.get_num_threads()
    session = Session(pair)  # the load's thread count may differ from the run's: the session makes sure
    sentence = pair.target.one_token_kernels[threads]
    assert cpu_linear.one_row_choice(pair.target.model, threads) is ("oneDNN's packed weights" in sentence)
    started = session.run_started([1, 2, 3])
    assert started.machine["target_one_token_kernel"] == sentence and started.machine["threads"] == threads
    Session(pair)  # a second run at the same count times nothing again
    assert list(pair.target.one_token_kernels) == [threads]


@needs_onednn
@pytest.mark.parametrize("mode", ["default", "packed"])
def test_the_user_can_name_the_one_token_kernel_instead_of_timing(mode: str, monkeypatch) -> None:
    from tests.app_helpers import make_pair

    pair = make_pair("partial")
    pair.one_token_kernel = mode
    cpu_linear.prepack_linears(pair.target.model)
    monkeypatch.setattr(cpu_linear, "time_one_row", lambda *_: pytest.fail("a named kernel is not timed"))
    cpu_linear.choose_one_token_kernels(pair)
    threads = torch.get_num_threads()
    assert cpu_linear.one_row_choice(pair.target.model, threads) is (mode == "packed")
    assert pair.target.one_token_kernels[threads].endswith(f"(--one-token-kernel {mode})")


def test_the_one_token_kernel_option_reaches_the_spec_and_a_contradiction_is_refused() -> None:
    import argparse

    from specscope.core.commands.pair_arguments import add_pair_arguments, spec_from_args
    from specscope.core.engine.pair_spec import ModelLoadError, validate_spec

    parser = argparse.ArgumentParser()
    add_pair_arguments(parser)
    assert spec_from_args(parser.parse_args(["--demo"])).one_token_kernel == "auto"
    assert spec_from_args(parser.parse_args(["--demo", "--one-token-kernel", "default"])).one_token_kernel == "default"
    spec = spec_from_args(parser.parse_args(["--demo", "--one-token-kernel", "packed", "--no-prepack"]))
    with pytest.raises(ModelLoadError, match="needs the packed weights that --no-prepack turns off"):
        validate_spec(spec)


@needs_onednn
def test_the_bench_chooses_the_one_token_kernel_at_each_thread_count_it_runs() -> None:
    """Its one-thread plain runs were on MKL's kernel while the load had chosen at two: EAGLE read x1.81 for x1.32."""
    from types import SimpleNamespace

    from specscope.core.commands.bench import _measure
    from specscope.core.commands.bench_runs import BenchPrompt, Method
    from tests.app_helpers import make_pair

    pair = make_pair("partial")
    cpu_linear.prepack_linears(pair.target.model)
    before = torch.get_num_threads()
    try:
        rows: list = []
        _measure(SimpleNamespace(threads=[1, 2], rounds=1, max_new_tokens=4), pair,
                 [BenchPrompt("p", "prose", [1, 2, 3])], [Method("plain", "plain")], rows)
    finally:
        torch.set_num_threads(before)
    assert sorted(r.threads for r in rows) == [1, 2]  # a plain run at each count
    assert sorted(pair.target.one_token_kernels) == [1, 2]
    assert all(cpu_linear.one_row_choice(pair.target.model, t) is not None for t in (1, 2))
