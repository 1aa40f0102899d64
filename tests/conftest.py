"""Suite-wide settings: Qt renders offscreen, caches and app data go to temp dirs, torch stays small."""

from __future__ import annotations

import os
import tempfile

import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The CLI autosaves every run, as the app does: into a throwaway data folder, never the user's.
os.environ.setdefault("SPECSCOPE_DATA_DIR", tempfile.mkdtemp(prefix="specscope-test-data-"))
# Tiny models: one thread is ~4x faster than two on this CPU (no contention, no sync overhead).
torch.set_num_threads(1)
