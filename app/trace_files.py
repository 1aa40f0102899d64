"""The window's trace files: export (the event stream and its CSVs, a Chrome trace, the plots as PNG), open a
trace for replay, and offer what an interrupted run recorded. The window owns one (``MainWindow.files``); its
menus and the command line's ``--open-trace`` call it. It is handed what it drives: the run controller (the
events to export, the replay to show), the widgets it writes to and the window's few answers as callables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QFileDialog, QWidget

from specscope.app.trace_dialog import trace_file_dialog

if TYPE_CHECKING:
    from specscope.app.run_controller import RunController
    from specscope.app.settings import AppSettings
    from specscope.app.widgets.banner import Banner
    from specscope.app.widgets.plots_panel import PlotsPanel
    from specscope.app.widgets.status_panel import StatusPanel
    from specscope.app.widgets.token_view import TokenView

log = logging.getLogger(__name__)


class TraceFiles:
    """Export, open and recover traces for one window (its data, its messages, its settings).

    ``parent`` holds the file dialogs; ``say(title, text)`` shows a warning box; ``panel_meta()`` is the session
    meta of what the panel holds now (a run on screen without a ``RunStarted`` is described by it);
    ``replay_shown()`` redraws everything once a trace is on screen; ``opened(path)`` announces it;
    ``sessions_dir()`` is where autosaved runs are."""

    def __init__(self, parent: QWidget, controller: RunController, settings: AppSettings, *, status: StatusPanel,
                 banner: Banner, plots: PlotsPanel, token_view: TokenView, say: Callable[[str, str], None],
                 panel_meta: Callable[[], dict[str, Any]], replay_shown: Callable[[], None],
                 opened: Callable[[str], None], sessions_dir: Callable[[], Path]) -> None:
        self._parent = parent
        self._controller = controller
        self._settings = settings
        self._status = status
        self._banner = banner
        self._plots = plots
        self._token_view = token_view
        self._say = say
        self._panel_meta = panel_meta
        self._replay_shown = replay_shown
        self._opened = opened
        self._sessions_dir = sessions_dir
        self.interrupted_folder: Path | None = None  # the interrupted run offered in the banner, if any

    def save_path(self, title: str, filt: str, default: str) -> str | None:
        start = str(Path(self._settings.last_dir() or Path.home()) / default)
        path, _ = QFileDialog.getSaveFileName(self._parent, title, start, filt)
        if path:
            self._settings.set_last_dir(str(Path(path).parent))
        return path or None

    def require_records(self) -> bool:
        if not self._controller.data.records:
            self._say("Nothing to export", "There are no iterations yet: start a run or open a trace.")
            return False
        return True

    def export_trace_dialog(self) -> None:
        if self.require_records():
            path = self.save_path("Export trace", "Trace CSV (*.csv)", "specscope-trace.csv")
            if path:
                self.export_trace(path)

    def export_chrome_dialog(self) -> None:
        if self.require_records():
            path = self.save_path("Export Chrome trace", "Trace Event JSON (*.json)", "specscope-trace.json")
            if path:
                self.export_chrome_trace(path)

    def export_png_dialog(self) -> None:
        path = self.save_path("Export plots", "PNG image (*.png)", "specscope-plots.png")
        if path:
            self.export_png(path)

    def shown_session_meta(self) -> dict[str, Any]:
        """What the sidecar of an export says of the run on screen: its own pair, prompt and controls (the
        stream's RunStarted), not whatever the panel holds now."""
        shown = self._controller.shown
        if shown is None:
            return self._panel_meta()
        c = shown.controls
        return {"pair_description": shown.description, "target": shown.target, "draft": shown.draft,
                "drafter": shown.drafter, "prompt": shown.prompt, "max_new_tokens": shown.max_new_tokens,
                "seed": shown.seed, "controls": {"k": c.k, "temperature": c.temperature, "top_k": c.top_k,
                                                 "top_p": c.top_p, "adaptive_k": c.adaptive_k},
                "source": shown.source, "app": "specscope desktop"}

    def export_trace(self, path: str | Path) -> bool:
        from specscope.core.trace.errors import TraceError
        from specscope.core.trace.files import write_trace

        try:
            paths = write_trace(Path(path), self._controller.data.events, self.shown_session_meta())
        except (TraceError, ValueError, OSError) as exc:
            self._say("Export failed", str(exc))
            return False
        self._status.show_message(f"Trace written: {paths.events} (the event stream) and {paths.iterations} "
                                  "(+ tokens, session) for spreadsheets", 8000)
        return True

    def export_chrome_trace(self, path: str | Path) -> bool:
        from specscope.core.trace.chrome_trace import write_chrome_trace
        from specscope.core.trace.errors import TraceError

        try:
            write_chrome_trace(Path(path), self._controller.data.events, self.shown_session_meta())
        except (TraceError, ValueError, OSError) as exc:
            self._say("Export failed", str(exc))
            return False
        self._status.show_message(f"Chrome trace written: {path} (open it in ui.perfetto.dev)", 8000)
        return True

    def export_png(self, path: str | Path) -> bool:
        if not self._plots.grab_png(str(path)):
            self._say("Export failed", f"could not write {path}")
            return False
        self._status.show_message(f"Plots saved: {path}", 8000)
        return True

    def open_dialog(self) -> None:
        dialog = trace_file_dialog(self._parent, self._settings.last_dir())
        if dialog.exec() and dialog.selectedFiles():
            path = dialog.selectedFiles()[0]
            self._settings.set_last_dir(str(Path(path).parent))
            self.open_trace(path)

    def open_trace(self, path: str | Path) -> bool:
        """Rebuild the plots and token view from a saved trace or session folder (no model needed)."""
        if self._controller.state.active:
            self._say("Run in progress", "Stop the run before opening a trace.")
            return False
        from specscope.core.trace.errors import TraceError
        from specscope.core.trace.files import read_trace

        try:
            loaded = read_trace(Path(path))
        except TraceError as exc:
            self._say("Cannot open trace", str(exc))
            return False
        except Exception as exc:  # a foreign file can fail in ways the reader did not foresee
            self._say("Cannot open trace", f"{Path(path).name} is not a specscope trace ({exc})")
            return False
        self._token_view.decode = None  # a replay has no tokenizer: top-5 shows the recorded ids
        self._controller.replay(loaded, str(path))
        self._replay_shown()
        if loaded.warnings:
            self._banner.show_message("Opened with warnings: " + "; ".join(loaded.warnings[:3]), "info")
        self._status.show_message(f"Opened {path}: {len(loaded.records)} iterations", 8000)
        self._opened(str(path))
        return True

    def offer_interrupted_session(self) -> None:
        try:
            from specscope.app.session_folders import describe_session
            from specscope.core.trace.autosave import find_interrupted_sessions

            found = find_interrupted_sessions(self._sessions_dir())
            if not found:
                return
            folder = found[0]
            described = describe_session(folder)
        except Exception as exc:
            log.warning("could not look for interrupted sessions: %s", exc)
            return
        more = f" ({len(found) - 1} older ones too)" if len(found) > 1 else ""
        self._banner.show_message(f"A run was interrupted: {described}{more}. Open what it recorded?", "info",
                                  "Open", lambda: self.open_interrupted(folder))
        self.interrupted_folder = folder

    def open_interrupted(self, folder: Path) -> None:
        from specscope.core.trace.autosave import dismiss_interrupted_session

        if self.open_trace(folder):
            dismiss_interrupted_session(folder)
