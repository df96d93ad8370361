"""Train: the plan executed, safely.

`prepare()` gathers everything a run needs and checks it before any work (profile, data, model, plan,
world size); `execute()` runs it and reports to a TrainListener (the command layer hands in the
dashboard; training never imports the UI). Inside: the loop (Trainer), one step (StepEngine) with its
precision plugin, optimizer and schedule, checkpoints and exact resume, stop signals and out-of-memory
back-off, data-parallel launch and DDP, the run directory, and the largest-batch search.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "TrainArgs": "gather",
    "Prepared": "gather",
    "prepare": "gather",
    "execute": "run",
    "TrainListener": "events",
    "Listeners": "events",
    "StepEvent": "events",
    "RunEnd": "events",
    "RunDisplay": "events",
    "Collaborators": "events",
    "Trainer": "loop",
    "Precision": "precision",
    "make_precision": "precision",
    "is_out_of_memory": "oom",
    "free_device_memory": "oom",
    "CheckpointPolicy": "checkpoint",
    "RunLog": "runlog",
    "new_run_dir": "runlog",
    "read_metrics": "runlog",
    "run_synthetic_steps": "synthetic",
    "find_batch": "batch_search",
    "resolve_auto_batch": "batch_search",
    "LaunchSpec": "launch",
    "worker_world": "launch",
})
