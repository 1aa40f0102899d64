"""torch's own allocator view: allocated and reserved bytes per CUDA device, MPS current/driver bytes.

Never initialises a backend: probing from the sampler thread must not create a CUDA context the user did
not ask for (nothing allocated means nothing to report anyway).
"""

from __future__ import annotations

import sys


def torch_memory() -> dict[str, float]:
    """Flat readings in bytes; empty when torch is not loaded or no accelerator is in use."""
    torch = sys.modules.get("torch")
    out: dict[str, float] = {}
    if torch is None:
        return out
    try:
        if torch.cuda.is_initialized():
            for i in range(torch.cuda.device_count()):
                out[f"torch_cuda{i}_allocated_bytes"] = float(torch.cuda.memory_allocated(i))
                out[f"torch_cuda{i}_reserved_bytes"] = float(torch.cuda.memory_reserved(i))
    except Exception:
        pass
    try:
        mps = getattr(torch, "mps", None)
        if mps is not None and torch.backends.mps.is_available() and torch.backends.mps.is_built():
            out["torch_mps_allocated_bytes"] = float(mps.current_allocated_memory())
            out["torch_mps_driver_bytes"] = float(mps.driver_allocated_memory())
    except Exception:
        pass
    return out
