"""Running the loop in tests the way a session does: the measurement fed every event (the session is its one
feeder in the product), the k policy shown each record."""

from __future__ import annotations

from typing import Any

from specscope.core.controls import Controls
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.events import RunFinished
from specscope.core.measure.measurement import Measurement
from specscope.core.records import IterationRecord


def show(policy: Any, record: IterationRecord) -> None:
    """One record as a run hands it over: the session feeds the measurement, the loop shows the policy."""
    policy.measurement.feed(record)
    policy.observe(record)


def run_fed(decoder: Decoder, prompt: list[int], controls: Controls, opts: DecodeOptions, measurement: Measurement,
            plain: bool = False) -> Any:
    """``decoder.run`` with the measurement fed every event and the run's end, as the session feeds it."""
    for event in decoder.stream(prompt, controls, opts, plain=plain):
        measurement.feed(event)
    result = decoder.result
    assert result is not None
    measurement.feed(RunFinished(result.finish_reason, len(result.iterations), len(result.token_ids),
                                 result.elapsed_s, decoder.prefill_ms))
    return result
