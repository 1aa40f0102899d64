"""The Open trace dialog: lists the files a trace can be opened from (the event log, the iteration CSV and its siblings,
session folders) and nothing else.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QFileSystemModel,
    QWidget,
)

TRACE_SIBLINGS = (".tokens.csv", ".baselines.csv")
TRACE_OPEN_SUFFIXES = (".events.jsonl", ".session.json")  # beside the iteration CSV: what Open trace lists

def is_openable_trace(name: str) -> bool:
    """A file Open trace lists: the event log (``<stem>.events.jsonl``, the trace itself), an iteration CSV or a
    session sidecar, not a trace's sibling CSVs, a Chrome trace or a PNG (an export writes all of those next to
    each other)."""
    lower = name.lower()
    return (lower.endswith(".csv") and not lower.endswith(TRACE_SIBLINGS)) or lower.endswith(TRACE_OPEN_SUFFIXES)


class TraceFileFilter(QSortFilterProxyModel):
    def filterAcceptsRow(self, row: int, parent: QModelIndex | QPersistentModelIndex) -> bool:
        model = self.sourceModel()
        index = model.index(row, 0, parent)
        if not isinstance(model, QFileSystemModel) or model.isDir(index):
            return True
        return is_openable_trace(model.fileName(index))


def trace_file_dialog(parent: QWidget, folder: str) -> QFileDialog:
    dialog = QFileDialog(parent, "Open trace", folder, "specscope trace (*.events.jsonl *.csv *.session.json)")
    dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog)  # a proxy model needs Qt's own dialog
    dialog.setProxyModel(TraceFileFilter(dialog))
    return dialog
