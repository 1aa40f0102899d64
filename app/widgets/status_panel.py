"""The status bar's live readout: throughput, α, tokens per iteration, speed-up, device, memory, and the
last paging warning; a verdict line when speculation is losing to plain decoding."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QWidget

from specscope.app.run_data import RunData
from specscope.app.widgets.elided_label import ElidedLabel
from specscope.app.widgets.steady_label import SteadyLabel
from specscope.core.units import format_bytes

MEMORY_KEYS = ("gpu0_used_bytes", "cuda0_used_bytes", "device_used_bytes", "host_rss_bytes")


def _f(x: float | None, spec: str, none: str = "—") -> str:
    return none if x is None else format(x, spec)


def memory_text(data: RunData) -> str:
    for key in MEMORY_KEYS:
        arr = data.memory.get(key)
        if arr is not None and len(arr):
            v = float(arr.view()[-1])
            if v == v:  # not NaN
                return f"{key.removesuffix('_bytes').replace('_', ' ')} {format_bytes(v)}"
    return "memory —"


class StatusPanel:
    """Owns the permanent widgets of a QStatusBar (not a widget itself: the bar is the widget): the transient
    message on the left (never hidden by anything else), live numbers, device and memory on the right. The
    verdict and the paging warning live in the run panel, where they wrap."""

    def __init__(self, bar: QStatusBar) -> None:
        self.bar = bar
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.progress.setTextVisible(False)
        self.progress.hide()
        # the numbers change with every snapshot: their labels re-lay out the window only when they need more room
        self.metrics = SteadyLabel("no run yet")
        self.device = QLabel("")
        self.memory = SteadyLabel("")
        # Transient messages, in place of showMessage (which hides widgets). Elided with "…" where the numbers
        # on the right leave it too little room (a plain label was cut mid-word under them at 1280x720); the
        # whole message is its tooltip.
        self.message = ElidedLabel("")
        self.message.setMinimumWidth(240)
        self._clear = QTimer(self.message)
        self._clear.setSingleShot(True)
        self._clear.timeout.connect(self.message.clear)
        bar.addWidget(self.message, 1)
        for w in (self.progress, self.metrics, self.device, self.memory):
            bar.addPermanentWidget(w)

    def number_labels(self) -> list[QWidget]:
        """The labels a snapshot changes (the live numbers, the memory)."""
        return [self.metrics, self.memory]

    def widgets(self) -> list[QWidget]:
        return [self.progress, self.metrics, self.device, self.memory, self.message]

    def show_message(self, text: str, timeout_ms: int = 0) -> None:
        self.message.setText(text)
        self.message.setToolTip(text)
        if timeout_ms:
            self._clear.start(timeout_ms)
        else:
            self._clear.stop()

    def hold(self, on: bool) -> None:
        """While a run is live the numbers' room only grows: nothing on the bar shifts as their digits do."""
        self.metrics.hold(on)
        self.memory.hold(on)

    def stop_timers(self) -> None:
        self._clear.stop()

    def show_progress(self, message: str, fraction: float) -> None:
        self.progress.show()
        if fraction < 0:
            self.progress.setRange(0, 0)  # busy indicator
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(int(100 * fraction))
        self.show_message(message)

    def hide_progress(self) -> None:
        self.progress.hide()

    def set_device(self, text: str) -> None:
        self.device.setText(text)

    def update(self, data: RunData) -> None:
        """Numbers from the measurement's estimate only (the CLI prints the same ones)."""
        est = data.estimate
        if est is None:
            self.metrics.setText(f"{len(data.records)} it")
        else:
            # The status bar is one line: a missing speed-up is a dash here, its reason the tooltip (and the
            # speed-up plot's own sentence).
            speedup = est.speedup_brief()
            cost = est.cost.text() if est.cost is not None else ""
            text = (f"{est.rates_text()} · {est.alpha_text()} · {_f(est.tokens_per_iteration, '.2f')} tok/iter · "
                    f"speed-up {speedup} · {len(data.records)} it")
            self.metrics.setText(text)
            # a narrow window cuts the one line: the tooltip has it whole, with the reason and the overhead
            self.metrics.setToolTip(text + "\n" + (
                "" if est.measured is not None else f"speed-up: {est.measured_reason}. ") + cost)
        self.memory.setText(memory_text(data))
