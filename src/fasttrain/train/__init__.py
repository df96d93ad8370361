"""Train: the plan executed, safely.

`prepare()` gathers everything a run needs and checks it before any work (profile, data, model, plan,
world size); `execute()` runs it and reports to a TrainListener (the command layer hands in the
dashboard; training never imports the UI). Inside: the loop (Trainer), one step (StepEngine) with its
precision plugin, optimizer and schedule, checkpoints and exact resume, stop signals and out-of-memory
back-off, data-parallel launch and DDP, the run directory, and the largest-batch search.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "TrainArgs": "types",
    "Prepared": "types",
    "prepare": "setup.prepare",
    "execute": "run.execute",
    "TrainListener": "loop.events",
    "Listeners": "loop.events",
    "StepEvent": "loop.events",
    "RunEnd": "loop.events",
    "RunDisplay": "loop.events",
    "Collaborators": "loop.events",
    "Trainer": "loop.trainer",
    "Precision": "loop.precision",
    "make_precision": "loop.precision",
    "is_out_of_memory": "loop.oom",
    "free_device_memory": "loop.oom",
    "CheckpointPolicy": "state.checkpoint_policy",
    "RunLog": "run.runlog",
    "new_run_dir": "run.runlog",
    "read_metrics": "run.runlog",
    "run_synthetic_steps": "loop.synthetic",
    "find_batch": "setup.batch_search",
    "auto_batch": "setup.batch_search",
    "LaunchSpec": "parallel.launch",
    "worker_world": "parallel.launch",
})
