"""Suite-wide settings: Qt renders offscreen, caches and app data go to temp dirs, torch stays small."""

from __future__ import annotations

import os

import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Two cores: more torch threads than cores only adds contention to tiny-model tests.
torch.set_num_threads(min(2, os.cpu_count() or 1))
