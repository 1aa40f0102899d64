"""The paging drill and the paging evidence on a small real pair: layers really go to disk through accelerate's
hooks, the detector flags the drill's iterations and no others, tokens do not change, residency adds up, and
a model loaded under a memory cap is flagged from its first iteration."""

from __future__ import annotations

import pytest
import torch

from specscope.core.commands.cli import main as cli_main
from specscope.core.controls import Controls
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.models import load_pair
from specscope.core.engine.pair import LoadedModel, ModelPair
from specscope.core.engine.pair_spec import ModelLoadError, PairSpec
from specscope.core.engine.placement import parse_max_memory
from specscope.core.memory.detector import streaming_sentence
from specscope.core.memory.drill import DrillError, DrillSpec, PagingDrill, parse_drill
from specscope.core.memory.residency import model_residency
from specscope.core.records import ControlValues, DrillEvent, IterationRecord
from specscope.core.session import Session, SessionOptions
from specscope.core.units import GIB, MIB
from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer

VOCAB = 256
CPU = torch.device("cpu")
PAGING_WORDS = ("streamed", "likely paging", "on disk")


class DigitTokenizer:
    chat_template = None

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return " ".join(str(i) for i in ids)


def small_pair() -> ModelPair:
    target = tiny_model(5, vocab_size=VOCAB, layers=4, hidden=128, logit_scale=4.0)
    draft = perturbed(target, 0.02)
    return ModelPair(target=LoadedModel(target, "small-target", CPU, torch.float32), tokenizer=DigitTokenizer(),
                     drafter=ModelDrafter(draft, VOCAB, CPU), drafter_kind="model",
                     draft=LoadedModel(draft, "small-draft", CPU, torch.float32), vocab_size=VOCAB)


PROMPT = [5, 9, 14, 5, 9, 14, 5, 9]


def run(pair: ModelPair, drill: DrillSpec | None = None, tokens: int = 48, tmp_path=None) -> Session:
    session = Session(pair, Controls(ControlValues(k=2)), SessionOptions(
        max_new_tokens=tokens, baseline_every=0, memory_period_s=0.25, drill=drill,
        drill_folder=str(tmp_path) if tmp_path is not None else None))
    session.run(PROMPT)
    return session


def paging_flags(r: IterationRecord) -> list[str]:
    return [f for f in r.flags if any(w in f for w in PAGING_WORDS)]


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    return small_pair()


@pytest.fixture(scope="module")
def quiet(pair: ModelPair) -> Session:
    return run(pair)


def test_a_quiet_run_gets_no_paging_flags(quiet: Session) -> None:
    assert len(quiet.records) >= 16
    assert [paging_flags(r) for r in quiet.records if paging_flags(r)] == []
    assert all(r.memory.get("draft_offload_read_bytes", 0.0) == 0.0 for r in quiet.records)
    assert quiet.drill_events == []


@pytest.mark.parametrize("model", ["draft", "target"])
def test_a_drill_is_flagged_with_its_cause_and_leaves_tokens_unchanged(pair: ModelPair, quiet: Session,
                                                                       model: str, tmp_path) -> None:
    spec = DrillSpec(model=model, layers=3, start=6, end=14)
    session = run(pair, spec, tmp_path=tmp_path)
    assert session.result is not None and quiet.result is not None
    assert session.result.token_ids == quiet.result.token_ids  # the weights came back bit-identical
    starts = [e for e in session.drill_events if e.kind == "start"]
    ends = [e for e in session.drill_events if e.kind == "end"]
    assert [(e.iterations_done, e.layers, e.total_layers, e.place, e.error) for e in starts] == [
        (6, 3, 4, "disk", "")]
    assert [e.iterations_done for e in ends] == [14] and ends[0].error == ""
    in_drill = [r for r in session.records if 6 <= r.iteration < 14]
    outside = [r for r in session.records if not 6 <= r.iteration < 14]
    assert all(r.memory[f"drill_{model}_layers_count"] == 3 for r in in_drill)
    assert all(r.memory[f"drill_{model}_layers_count"] == 0 for r in outside)
    # the target is judged on every iteration; the draft only where it drafted
    judged = [r for r in in_drill[1:] if model == "target" or r.n_drafted]
    mine = [r for r in judged if any(f.startswith(f"{model}: 3 of 4 layers on disk") for f in r.flags)]
    assert len(mine) >= 0.9 * len(judged), [r.flags for r in in_drill]
    sentence = next(f for r in mine for f in r.flags if f.startswith(model))
    assert "read during the step" in sentence and "streamed from disk" in sentence
    assert [paging_flags(r) for r in outside if paging_flags(r)] == []
    # nothing is left on meta or in hooks once the drill ended
    m = pair.draft.model if model == "draft" and pair.draft else pair.target.model
    assert not any(p.is_meta for p in m.parameters())
    assert not any(hasattr(mod, "_hf_hook") for mod in m.modules())


def test_residency_adds_up_to_the_parameters_during_a_drill(tmp_path) -> None:
    model = tiny_model(7, vocab_size=VOCAB, layers=4, hidden=64)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    before = model_residency(model, CPU, "target")
    assert before.param_bytes == params and sum(before.bytes_by_device.values()) == params + buffers
    drill = PagingDrill(DrillSpec("target", 2), model, CPU, tmp_path)
    drill.start()
    during = model_residency(model, CPU, "target")
    assert during.param_bytes == params
    assert sum(during.bytes_by_device.values()) == params + buffers
    assert during.bytes_by_device["disk"] == drill.moved_bytes > 0
    assert during.layers_by_place == {"cpu": 2, "disk": 2} and during.layers_total == 4
    assert any("on disk" in w for w in during.warnings)
    drill.end()
    assert model_residency(model, CPU, "target").bytes_by_device == before.bytes_by_device


def test_a_live_drill_through_the_controls(pair: ModelPair, tmp_path) -> None:
    controls = Controls(ControlValues(k=2))
    session = Session(pair, controls, SessionOptions(max_new_tokens=30, baseline_every=0, memory_period_s=0,
                                                     drill_folder=str(tmp_path)))
    events = []
    n = 0
    for event in session.stream(PROMPT):
        events.append(event)
        if isinstance(event, IterationRecord):
            n += 1
            if n == 4:
                controls.start_drill(DrillSpec("draft", None))
            if n == 9:
                controls.end_drill()
    drills = [e for e in events if isinstance(e, DrillEvent)]
    assert [(e.kind, e.iterations_done, e.layers) for e in drills] == [("start", 4, 4), ("end", 9, 4)]
    assert "draft 4/4 layers → disk" in drills[0].label


def test_a_run_stopped_mid_drill_gives_the_weights_back(tmp_path) -> None:
    pair = small_pair()
    session = run(pair, DrillSpec("draft", 2, start=2, end=1000), tokens=12, tmp_path=tmp_path)
    assert [e.kind for e in session.drill_events] == ["start", "end"]
    assert pair.draft is not None and not any(p.is_meta for p in pair.draft.model.parameters())


def test_a_model_loaded_under_a_memory_cap_is_flagged_from_iteration_0(tmp_path) -> None:
    model = tiny_model(9, vocab_size=64, layers=4, hidden=128)
    directory = save_model_dir(tmp_path / "capped", model, word_tokenizer(64))
    spec = PairSpec(target=str(directory), drafter="lookup", target_device_map="auto",
                    target_max_memory=parse_max_memory("cpu=300kB", "target"),
                    target_offload_folder=str(tmp_path / "offload"))
    messages: list[str] = []
    pair = load_pair(spec, progress=lambda message, fraction: messages.append(message))
    assert any("on disk" in w for w in pair.target.warnings)
    assert any(m.startswith("Warning: target:") and "on disk" in m for m in messages)  # said while loading
    residency = model_residency(pair.target.model, CPU, "target")
    assert residency.bytes_by_device.get("disk", 0) > 0.5 * residency.param_bytes
    ids = pair.encode_prompt("w5 w9 w14 w5 w9 w14 w5 w9", chat=False)
    session = Session(pair, Controls(ControlValues(k=2)), SessionOptions(max_new_tokens=10, baseline_every=0))
    session.run(ids)
    first = session.records[0].flags
    assert any(f.startswith("target: ") and "streamed from disk" in f and "effective against" in f
               for f in first), first


def test_streaming_rule_names_the_place_and_needs_a_slow_step() -> None:
    memory = {"draft_offload_read_bytes": 2 * 42 * MIB, "draft_step_read_bytes": 156 * MIB,
              "draft_bandwidth_bytes_per_s": 10 * GIB, "draft_weights_disk_bytes": 42 * MIB,
              "draft_weights_cpu_bytes": 113 * MIB, "draft_layers_count": 3, "draft_layers_disk_count": 3,
              "io_read_bytes": 0.0}
    slow = streaming_sentence("draft", 200.0, 2, 16.0, memory)
    assert slow.startswith("draft: 3 of 3 layers on disk, 42 MiB read during the step (12.5x its recent median")
    assert "runs at 780 MiB/s effective against 10 GiB/s measured: weights are being streamed from disk" in slow
    assert streaming_sentence("draft", 15.0, 2, 16.0, memory) == ""  # 10.2 GiB/s: streaming is not hurting
    assert streaming_sentence("draft", 200.0, 2, 16.0, {**memory, "draft_offload_read_bytes": 0.0}) == ""
    host = {**memory, "draft_weights_disk_bytes": 0.0, "draft_weights_cuda0_bytes": 113 * MIB,
            "draft_layers_cpu_count": 3}
    assert "3 of 3 layers on cpu" in streaming_sentence("draft", 200.0, 2, None, host)
    assert "streamed from host memory" in streaming_sentence("draft", 200.0, 2, None, host)


@pytest.mark.parametrize("text, words", [
    ("5:3:draft", "END > START"), ("1:9:both", "draft or target"), ("a:b:draft", "START:END:MODEL"),
    ("1:9:draft:0", "at least 1 layer")])
def test_bad_drills_are_one_sentence(text: str, words: str) -> None:
    with pytest.raises(DrillError, match=words):
        parse_drill(text)


def test_a_drill_of_more_layers_than_the_model_has_is_refused() -> None:
    with pytest.raises(DrillError, match="has 2 layers"):
        PagingDrill(DrillSpec("target", 5), tiny_model(0), CPU)


@pytest.mark.parametrize("text", ["cpu", "cpu=lots", "gpu7=1GB", "cpu=-5MB"])
def test_bad_max_memory_is_one_sentence(text: str) -> None:
    with pytest.raises(ModelLoadError, match="max memory"):
        parse_max_memory(text, "target")


def test_max_memory_forms() -> None:
    assert parse_max_memory("cpu=250MB, cuda:1=2GiB,0=1GB,disk=1GB", "draft") == {
        "cpu": 250_000_000, 1: 2 * 2**30, 0: 1_000_000_000, "disk": 1_000_000_000}


@pytest.mark.parametrize("args, words", [
    (["--drill", "9:3:draft"], "END > START"),
    (["--max-memory", "cpu=250MB"], "device map auto"),
    (["--device-map", "auto", "--max-memory", "cpu=huge"], "not a size"),
    (["--device-map", "tpu"], "device map"),
    (["--drafter", "lookup", "--drill", "1:5:draft"], "needs a draft model"),
])
def test_cli_placement_and_drill_errors_exit_2(args: list[str], words: str, capsys) -> None:
    code = cli_main(["run", "--demo", "--prompt", "hi", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.demo
def test_the_demo_under_a_250mb_cap_is_flagged_from_iteration_0(tmp_path, demo_target) -> None:
    """The issue's case: device_map="auto", max_memory cpu=250MB puts most of SmolLM2-135M on disk."""
    spec = PairSpec(target="demo", drafter="lookup", target_device_map="auto",
                    target_max_memory=parse_max_memory("cpu=250MB", "target"),
                    target_offload_folder=str(tmp_path / "offload"))
    pair = load_pair(spec)
    assert any("on disk" in w for w in pair.target.warnings)
    residency = model_residency(pair.target.model, CPU, "target")
    assert residency.layers_by_place.get("disk", 0) >= 15
    ids = pair.encode_prompt("Count from one to five.")
    session = Session(pair, Controls(ControlValues(k=2)), SessionOptions(max_new_tokens=4, baseline_every=0))
    session.run(ids)
    assert any("streamed from disk" in f and "layers on disk" in f for f in session.records[0].flags), \
        session.records[0].flags
