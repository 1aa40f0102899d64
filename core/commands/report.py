"""``specscope report TRACE [--json]``: the summary ``specscope run`` prints, for a recorded run.

Any trace the app or the CLI writes (``--trace``, File ▸ Export, an autosaved session folder, a trace from
before the event log) is read, its event stream fed to the one measurement as the window's replay feeds it
(``measurement.feed_all``), and the snapshot it ends on handed to ``run_report`` — the code ``run`` prints
with. So a recorded run can be checked headless, in CI, without the models: nothing here imports torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specscope.core.commands.cli_checks import CliError, file_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace_path", metavar="TRACE", type=file_path,
                        help="a trace: the iteration CSV, its events.jsonl, or a session folder (autosave)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (as `run --json`) instead")


def main(args: argparse.Namespace) -> int:
    from specscope.core.commands.run_report import RunOutcome, report_run
    from specscope.core.events import RunFinished, RunStarted
    from specscope.core.measure.run import feed_all
    from specscope.core.records import DrillEvent
    from specscope.core.trace.errors import TraceError
    from specscope.core.trace.files import read_trace

    path: Path = args.trace_path
    try:
        loaded = read_trace(path)
    except TraceError as exc:
        raise CliError(f"cannot report: {exc}") from None  # the reader's sentence names the file
    except OSError as exc:  # what the reader's own checks did not name
        raise CliError(f"cannot report {path}: {exc.strerror or exc}") from None
    records = loaded.records
    if not records:
        raise CliError(f"cannot report {path}: the trace holds no iteration")
    estimate = None
    for _event, snapshot in feed_all(loaded.events):  # the window's replay: the same owner, the same stream
        estimate = snapshot if snapshot is not None else estimate
    started = next((e for e in loaded.events if isinstance(e, RunStarted)), None)
    finished = next((e for e in reversed(loaded.events) if isinstance(e, RunFinished)), None)
    committed = [t for r in records for t in r.committed_tokens]
    finish = (finished.reason if finished is not None
              else records[-1].finish_reason or "the trace ends without the run's end (cut short)")
    # the text as `run` prints it, which decodes without special tokens: the end-of-sequence token is not text
    shown_text = committed[:-1] if finish == "eos" and committed else committed
    outcome = RunOutcome(
        token_ids=[t.token_id for t in committed], text="".join(t.text for t in shown_text),
        finish_reason=finish,
        records=records, events=loaded.events,
        drill_events=[e for e in loaded.events if isinstance(e, DrillEvent)],
        prefill_ms=finished.prefill_ms if finished is not None else 0.0, estimate=estimate,
        drafter_kind=started.drafter if started is not None else records[-1].drafter)
    shown = argparse.Namespace(json=args.json, quiet=True, trace=None, chrome_trace=None,
                               plain=bool(started.plain) if started is not None else False)
    for warning in loaded.warnings:
        print(f"specscope: warning: {warning}", file=sys.stderr)
    return report_run(shown, outcome, loaded.session, None, error=None, stopped=None, late=None)
