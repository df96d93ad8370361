"""`--batch-size auto` for a whole job: one search, on the GPU of the process that searches, and its answer
handed to every rank (the way setup/footprint.py hands its memory fit).

- one process (no launcher): the search runs here (setup/batch_search.py, cached).
- the launcher of `--nproc-per-node N`: the search runs in a child process (`python -m
  fasttrain.train.setup.auto_job`), so the launcher never holds a CUDA context on GPU 0 for the whole job; its
  answer goes to the workers in FASTTRAIN_MICRO_BATCH (with the explanation in FASTTRAIN_AUTO_BATCH_NOTE).
- a torchrun worker: the launcher's answer when it gave one; under a bare `torchrun`, rank 0 searches on its own
  GPU and the others read its answer (parallel/agree.py). Either way every rank trains the same split.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from fasttrain.core.errors import JobFailed, Problem, UserError
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.schema import Profile
from fasttrain.train.setup.footprint import HANDOFF_ENV, handed_split
from fasttrain.train.types import WorkerWorld

AUTO_NOTE_ENV = "FASTTRAIN_AUTO_BATCH_NOTE"
Flags = dict[str, tuple[str, int]]


def job_auto_batch(profile: Profile, report: HardwareReport, model_name: str, num_classes: int, *,
                   world: WorkerWorld | None, launching: bool) -> tuple[Flags, str]:
    """-> (flags for presets.resolve, the explanation for the plan): see the module docstring for who searches."""
    from fasttrain.train.setup.batch_search import auto_batch_flags, auto_flags
    if world is not None:
        handed = handed_split()
        if handed is not None:
            return auto_flags(*handed), os.environ.get(AUTO_NOTE_ENV) or "batch and accumulation from the launcher"
        from fasttrain.train.parallel.agree import rank_zero_decides

        def search() -> list[object]:
            flags, message = auto_batch_flags(profile, report, model_name, num_classes)
            return [flags["loader.batch_size"][1], flags["optim.accumulation_steps"][1], message]
        batch, accumulation, message = rank_zero_decides(world, "auto_batch", search)
        return auto_flags(int(batch), int(accumulation)), str(message)
    if launching:
        return search_in_child(profile, report, model_name, num_classes)
    return auto_batch_flags(profile, report, model_name, num_classes)


def hand_to_workers(batch: int, accumulation: int, note: str | None) -> None:
    """The launcher's split (and an auto batch's explanation) for the workers it is about to start."""
    os.environ[HANDOFF_ENV] = f"{batch},{accumulation}"
    if note:
        os.environ[AUTO_NOTE_ENV] = note


def search_in_child(profile: Profile, report: HardwareReport, model_name: str, num_classes: int) -> tuple[Flags, str]:
    """auto_batch_flags in a child process: its CUDA context (and the models it tried) go away with it."""
    request = json.dumps({"profile": profile.model_dump(mode="json"), "report": report.model_dump(mode="json"),
                          "model": model_name, "num_classes": num_classes})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # a module:callable model too
    done = subprocess.run([sys.executable, "-m", "fasttrain.train.setup.auto_job"], input=request,
                          capture_output=True, text=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        last = ([ln for ln in done.stderr.splitlines() if ln.strip()] or [f"exit status {done.returncode}"])[-1]
        raise JobFailed(f"the --batch-size auto search failed: {last}")
    answer = json.loads(lines[-1])
    if "problems" in answer:
        raise UserError([Problem(where, message, fix, value) for where, message, fix, value in answer["problems"]])
    return {key: (source, int(value)) for key, (source, value) in answer["flags"].items()}, answer["message"]


def main() -> None:
    """The child: one JSON request on stdin, one JSON answer on stdout (flags and message, or the problems)."""
    from fasttrain.train.setup.batch_search import auto_batch_flags
    request = json.loads(sys.stdin.read())
    profile, report = Profile.model_validate(request["profile"]), HardwareReport.model_validate(request["report"])
    try:
        flags, message = auto_batch_flags(profile, report, request["model"], int(request["num_classes"]))
    except UserError as exc:
        print(json.dumps({"problems": [[p.where, p.message, p.fix, p.value if isinstance(p.value, (int, str, float))
                                        else None] for p in exc.problems]}))
        return
    print(json.dumps({"flags": flags, "message": message}))


if __name__ == "__main__":
    main()
