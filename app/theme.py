"""Colours and styles for token fates and plots: one place, used by the token view, legend and plots.

The palette is Okabe–Ito (distinguishable with the common colour-vision deficiencies). Hue is never the
only cue: each status also has its own text style (strike-through, underline, bold), so the token view
reads correctly in greyscale too.
"""

from __future__ import annotations

from dataclasses import dataclass

# Okabe, M. & Ito, K. "Color Universal Design" palette.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
    "grey": "#999999",
}


@dataclass(frozen=True)
class StatusStyle:
    label: str
    colour: str  # foreground colour of the token text
    background: str  # a light tint behind the token
    strike: bool = False
    underline: bool = False
    bold: bool = False
    italic: bool = False
    description: str = ""


# Keys are TokenStatus values (strings), so this module needs no engine import.
STATUS_STYLES: dict[str, StatusStyle] = {
    "accepted": StatusStyle("accepted", "#005A8C", "#D6ECFA",
                            description="draft proposal kept by the target"),
    "rejected": StatusStyle("rejected", "#A34400", "#FBE3D1", strike=True,
                            description="draft proposal discarded (not in the output)"),
    "correction": StatusStyle("correction", "#8A3C6E", "#F5DFEC", underline=True, bold=True,
                              description="target's token after a rejection"),
    "bonus": StatusStyle("bonus", "#006B4E", "#D2F0E6", bold=True, italic=True,
                         description="target's extra token after all proposals were accepted"),
    "target": StatusStyle("target", "#333333", "#FFFFFF",
                          description="target's own token in an iteration that proposed nothing (a plain step)"),
    "plain": StatusStyle("plain", "#333333", "#EDEDED", description="token from plain decoding"),
}

# Plot series colours (Okabe–Ito), chosen so the stacked timing curves and memory lines stay apart.
PLOT_COLOURS = {
    "draft": OKABE_ITO["orange"],
    "verify": OKABE_ITO["blue"],
    "rollback": OKABE_ITO["reddish_purple"],
    "plain_step": OKABE_ITO["black"],
    "engine_pass": OKABE_ITO["bluish_green"],
    "alpha_window": OKABE_ITO["blue"],
    "alpha_run": OKABE_ITO["sky_blue"],
    "tokens_per_iteration": OKABE_ITO["bluish_green"],
    "measured_speedup": OKABE_ITO["vermillion"],
    "predicted_speedup": OKABE_ITO["blue"],
    "break_even": OKABE_ITO["grey"],
    "marker": "#555555",
    "bars": OKABE_ITO["bluish_green"],
    "best_k": OKABE_ITO["vermillion"],
}

# Paging is the one thing on the plots that must shout: a crimson no series uses (translucent over the plot's
# height, solid along its top), apart from the busy detector's grey strip at the bottom. A drill's iterations
# are hatched in the same crimson.
PAGING_BAND_RGBA = (200, 16, 46, 60)
PAGING_STRIP_RGBA = (200, 16, 46, 230)
DRILL_HATCH_RGBA = (200, 16, 46, 150)
BUSY_LANE_RGBA = (120, 120, 120, 130)

# Memory series: the models' own bytes in one colour per model (target, draft) and one dash pattern per
# quantity within it, so no two series share both, and the key groups them by owner. The machine's totals
# (host, swap, device), shown on request, take a colour each from their own list: five host series in one
# green could not be told apart.
MEMORY_OWNER_COLOURS = {
    "target": OKABE_ITO["blue"],
    "draft": OKABE_ITO["orange"],
    "io": OKABE_ITO["reddish_purple"],
    "pcie": OKABE_ITO["sky_blue"],
}
MEMORY_TOTAL_COLOURS = [OKABE_ITO["bluish_green"], "#7F4F24", OKABE_ITO["grey"], OKABE_ITO["black"],
                        OKABE_ITO["sky_blue"], "#6A3D9A"]
MEMORY_SPARE_COLOURS = [OKABE_ITO["black"], OKABE_ITO["grey"], OKABE_ITO["yellow"]]  # owners not named above
MEMORY_STYLES = ["solid", "dash", "dot", "dashdot", "dashdotdot"]

PLOT_BACKGROUND = "#FFFFFF"
PLOT_FOREGROUND = "#222222"


def style_for(status: str) -> StatusStyle:
    return STATUS_STYLES.get(status, STATUS_STYLES["plain"])
