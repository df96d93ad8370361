"""How long a stop request (SIGTERM: a preemption notice) takes to end a run, and where that time goes.

A run with accumulation (4 micro-batches per optimizer step) of a model whose forward takes a fixed time (the
micro-step), stopped by SIGTERM at a random moment once training runs, several times; prints per round the
seconds from the signal to the stop message (checkpoint written) and to the process's exit, and the medians
beside the micro-step and the optimizer step.
A preemption notice is 30 s on GCP: what matters is the bound against the micro-step, not the absolute time.

    python benchmarks/stop_latency.py [--rounds 5] [--micro-step-s 0.5] [--accumulation 4]
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

MODEL = """
import time
import torch

class Slow(torch.nn.Module):
    def __init__(self, num_classes=3, seconds={seconds}):
        super().__init__()
        self.head = torch.nn.Linear(3, num_classes)
        self.seconds = seconds
    def forward(self, x):
        if self.training:
            time.sleep(self.seconds)
        return self.head(x.mean(dim=(2, 3)))

def build(num_classes=3, **kwargs):
    return Slow(num_classes)
"""


def one_round(root: Path, data: Path, accumulation: int, micro_s: float, rng: random.Random) -> float:
    profile = root / "p.yaml"
    profile.write_text(textwrap.dedent(f"""\
        extends: cpu
        loader: {{batch_size: 4, num_workers: 0, prefetch_factor: null, persistent_workers: false, image_size: 16}}
        optim: {{epochs: 3, warmup_epochs: 0, accumulation_steps: {accumulation}}}
        speed: {{precision: fp32, compile: false}}
        """))
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{root}", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "fasttrain", "train", "--profile", str(profile), "--data", str(data),
                             "--model", "slow_model:build", "--runs-dir", str(root / "runs"), "--no-tune"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.perf_counter(), ln) for ln in proc.stdout))
    reader.start()
    while not any(ln.startswith("epoch 1/") for _, ln in lines):  # training runs: a progress line came
        time.sleep(0.2)
        assert proc.poll() is None, "".join(ln for _, ln in lines)[-2000:]
    time.sleep(rng.uniform(0, accumulation * micro_s))  # a random moment inside an accumulation window
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=600)
    exited = time.perf_counter() - sent
    reader.join()
    stopped = next((t - sent for t, ln in lines if "stopped by SIGTERM" in ln), None)
    assert stopped is not None, "".join(ln for _, ln in lines)[-2000:]
    return stopped, exited


def main() -> None:
    from loop_helpers import write_image_folder
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--micro-step-s", type=float, default=0.5)
    parser.add_argument("--accumulation", type=int, default=4)
    args = parser.parse_args()
    rng = random.Random(0)
    stops, exits = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "slow_model.py").write_text(MODEL.format(seconds=args.micro_step_s))
        data = write_image_folder(root / "data", classes=3, train_per_class=64, val_per_class=4)
        for r in range(args.rounds):
            stopped, exited = one_round(root, data, args.accumulation, args.micro_step_s, rng)
            stops.append(stopped)
            exits.append(exited)
            print(f"round {r + 1}: stop message {stopped:.2f} s after SIGTERM, exit {exited:.2f} s", flush=True)
    print(f"stop message: median {statistics.median(stops):.2f} s, max {max(stops):.2f} s; exit: median "
          f"{statistics.median(exits):.2f} s; micro-step {args.micro_step_s:.2f} s, optimizer step "
          f"{args.micro_step_s * args.accumulation:.2f} s ({args.accumulation} micro-steps)")


if __name__ == "__main__":
    main()
