"""Byte sizes as people read them: binary units (KiB, MiB, GiB) everywhere a size is shown.

One formatter for the CLI, the app and every sentence the engine writes, so a model's weights read the same
number in the status bar, the summary and a warning. Torch-free and Qt-free: the ground of core/.
"""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
_UNITS = (("GiB", GIB), ("MiB", MIB), ("KiB", KIB))


def format_bytes(n: float) -> str:
    """Three significant figures in the largest binary unit that fits: "412 MiB", "1.23 GiB", "980 KiB"."""
    for unit, scale in _UNITS:
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.3g} {unit}" if abs(v) < 100 else f"{v:.0f} {unit}"
    return f"{int(n)} B"


def format_rate(bytes_per_s: float) -> str:
    """A transfer rate in the same units: "11.3 GiB/s"."""
    return f"{format_bytes(bytes_per_s)}/s"
