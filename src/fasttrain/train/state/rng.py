"""The run's random numbers: seeded once at its start (seed_everything), and the RNG states a checkpoint keeps for
an exact resume: Python's, numpy's and torch's, and on CUDA the state of the device this process trains on."""
from __future__ import annotations

import random
from typing import Any

import torch


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's generators from `seed` (numpy takes 32 bits): the same initial weights and
    data order on every rank and in every run with this seed."""
    import numpy as np
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_states() -> dict[str, Any]:
    """Python's, numpy's and torch's RNG states, and on CUDA the state of this process's own device only: a run
    resumed where fewer GPUs are visible (a Kaggle 2xT4 run on one T4) has no device for the others' states."""
    import numpy as np
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()  # the current device: the one this process trains on
        state["cuda_device"] = torch.cuda.current_device()
    return state


def own_cuda_state(saved: Any, saved_device: int | None, current: int) -> torch.Tensor | None:
    """The CUDA RNG state this process continues from. Pure. `saved`: one device's state, or (a checkpoint of
    fasttrain before this change) every visible device's list, of which the trainer's own device's entry counts
    (`saved_device`, else the index this process trains on now, else the first)."""
    if torch.is_tensor(saved):
        return saved
    if isinstance(saved, (list, tuple)) and saved:
        index = saved_device if saved_device is not None else current
        return saved[index] if 0 <= index < len(saved) else saved[0]
    return None


def restore_rng_states(state: dict[str, Any]) -> None:
    import numpy as np
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        own = own_cuda_state(state["cuda"], state.get("cuda_device"), torch.cuda.current_device())
        if own is not None:
            torch.cuda.set_rng_state(own)  # the current device, whatever its index is now
