"""What the user picked for the pair, as plain data (no torch): turned into a ``core.engine.pair_spec.PairSpec`` on
the worker thread, so choosing a model never imports the engine on the GUI thread."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from specscope.core.drafter_catalogue import DEMO_DRAFTER, DRAFTER_KINDS, NO_DRAFT_NEEDED
from specscope.core.model_config import config_problem, local_directory

if TYPE_CHECKING:
    from specscope.core.engine.pair_spec import PairSpec

DEVICES = ("cpu", "cuda", "cuda:0", "cuda:1", "mps")
DTYPES = ("auto", "float32", "float16", "bfloat16")
DEVICE_MAPS = ("", "auto")  # "" = the whole model on its device; "auto" = accelerate places it under max memory


@dataclass
class PairChoice:
    target: str = "demo"  # "demo", a local directory or a hub id
    draft: str = ""  # for drafter "model"; empty with the demo = the demo's own draft
    drafter: str = DEMO_DRAFTER  # the demo's own default, as in the CLI (kinds.default_drafter)
    target_device: str = "cpu"
    draft_device: str = ""  # empty = the target's
    target_dtype: str = "auto"
    draft_dtype: str = "auto"
    # Placement (transformers/accelerate): device map "" or "auto" (or a device), max memory "cpu=250MB,...",
    # offload folder; empty = not set.
    target_device_map: str = ""
    draft_device_map: str = ""
    target_max_memory: str = ""
    draft_max_memory: str = ""
    target_offload_folder: str = ""
    draft_offload_folder: str = ""

    def problem(self) -> str | None:
        """A one-line reason this choice cannot load, or None."""
        if not self.target.strip():
            return "choose a target model (the demo, a local directory or a hub id)"
        if self.drafter not in DRAFTER_KINDS:
            return f"unknown drafter {self.drafter!r} (choose {', '.join(DRAFTER_KINDS)})"
        if self.drafter == "model" and self.target != "demo" and not self.draft.strip():
            return f"the model drafter needs a draft model (or choose the {NO_DRAFT_NEEDED} drafter)"
        draft = self.draft if self.drafter in ("model", "eagle") else ""  # the drafters that read a folder
        for role, name in (("target", self.target), ("draft", draft)):
            directory = local_directory(name.strip()) if name.strip() and name != "demo" else None
            problem = config_problem(directory) if directory is not None else None
            if problem is not None:  # said now, not after the engine's imports on the worker
                return f"the {role} model: {problem}"
        for role in ("target", "draft"):
            device_map = getattr(self, f"{role}_device_map").strip()
            if (getattr(self, f"{role}_max_memory").strip() or getattr(self, f"{role}_offload_folder").strip()) \
                    and device_map != "auto":
                return f"the {role}'s max memory and offload folder need device map auto"
        return None

    def to_spec(self) -> PairSpec:
        """The engine's PairSpec (imports core.engine.placement, so torch: call it on the worker thread)."""
        from specscope.core.engine.pair_spec import PairSpec
        from specscope.core.engine.placement import parse_device_map, parse_max_memory

        return PairSpec(target=self.target.strip(), draft=self.draft.strip() or None, drafter=self.drafter,
                        target_device=self.target_device, draft_device=self.draft_device or None,
                        target_dtype=self.target_dtype, draft_dtype=self.draft_dtype,
                        target_device_map=parse_device_map(self.target_device_map, "target"),
                        draft_device_map=parse_device_map(self.draft_device_map, "draft"),
                        target_max_memory=parse_max_memory(self.target_max_memory, "target"),
                        draft_max_memory=parse_max_memory(self.draft_max_memory, "draft"),
                        target_offload_folder=self.target_offload_folder.strip() or None,
                        draft_offload_folder=self.draft_offload_folder.strip() or None)

    def worker_args(self) -> list[str]:
        """The model options of ``specscope serve`` for this choice (the app's own worker process loads it)."""
        args = ["--demo"] if self.target.strip() == "demo" else ["--target", self.target.strip()]
        options = (("--draft", self.draft), ("--drafter", self.drafter), ("--device", self.target_device),
                   ("--draft-device", self.draft_device), ("--dtype", self.target_dtype),
                   ("--draft-dtype", self.draft_dtype), ("--device-map", self.target_device_map),
                   ("--draft-device-map", self.draft_device_map), ("--max-memory", self.target_max_memory),
                   ("--draft-max-memory", self.draft_max_memory), ("--offload-folder", self.target_offload_folder),
                   ("--draft-offload-folder", self.draft_offload_folder))
        for flag, value in options:
            if value.strip():
                args += [flag, value.strip()]
        return args

    def describe(self) -> str:
        draft = self.draft or ("demo draft" if self.target == "demo" else "")
        what = f"draft {draft}" if self.drafter == "model" else f"{self.drafter} drafter"
        return f"{self.target} with {what} on {self.target_device}"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PairChoice:
        names = {f.name for f in fields(cls)}
        return cls(**{k: str(v) for k, v in d.items() if k in names and v is not None})
