"""How good is `fasttrain estimate`? Forecast vs measurement, in one run on this machine.

1. CPU: forecast images/s vs real training steps (trainer.run_synthetic_steps: the `train` step code) for
   resnet18, resnet50 and efficientnet_b0 at 64 px, batch 8. Interleaved rounds of ~2 s of steps each; the
   ceiling is measured just before and after each measurement and prices that round's forecast; medians of the
   rounds' forecasts and of their measurements. Target: within 35% for each model.
2. Published GPU rows: forecast vs EVERY row of benchmarks/reference_throughput.csv. Target: within a
   factor of 1.5 for at least 80% of the rows.
3. Activations: saved-for-backward bytes counted on the meta device vs counted on a real CPU forward.
   Target: within 25%.
4. `estimate --measure` vs `fasttrain train --data synthetic` on the same plan (when train is available), each
   in its own process, at least 5 interleaved rounds, medians: target within 10%.

    .venv/bin/python benchmarks/estimate_accuracy.py            # everything (several minutes on 2 cores)
    .venv/bin/python benchmarks/estimate_accuracy.py --tiny     # plumbing only: tiny_cnn, a few rows

Exit status 1, with a FAILED line per missed target, when any target is missed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibrate  # noqa: E402
import cpu_fit  # noqa: E402

from fasttrain.estimate import calibration  # noqa: E402
from fasttrain.estimate.roofline import step_time  # noqa: E402

CPU_CASES = [("resnet18", 64, 8), ("resnet50", 64, 8), ("efficientnet_b0", 64, 8)]
TINY_CASES = [("tiny_cnn", 16, 8)]
CPU_TOLERANCE = 0.35
REFERENCE_FACTOR, REFERENCE_SHARE = 1.5, 0.80
ACTIVATION_TOLERANCE = 0.25
MEASURE_VS_TRAIN_TOLERANCE = 0.10
# --measure vs train: as many timed steps as one synthetic train epoch has (10,000 / 64 = 156), and at least 5
# rounds: a fresh process on this shared 2-core machine lands anywhere within +-20% (900 vs 1290 images/s seen in
# one 3-round run), so 3 rounds of 40 steps left the median at the mercy of one slow process.
MEASURE_STEPS = 150
MEASURE_ROUNDS = 5


def cpu_forecast(m: dict) -> float:
    """Images/s from the SHIPPED CPU factors and the ceilings measured around the steps."""
    dev = calibration.cpu_ceilings(m["peak_flops"], m["bandwidth"], None,
                                   conv_weight_s_per_byte=m.get("conv_weight_s_per_byte", 0.0))
    return m["batch"] / step_time(m["table"], m["batch"], dev.ceilings, params=m["params"], optimizer=m["optimizer"],
                                  mixed_precision=m.get("precision", "fp32") != "fp32",
                                  fused_optimizer=False).seconds  # the CPU runs torch.optim's foreach path


def check_cpu(cases: list[tuple[str, int, int]], rounds: int) -> tuple[list[dict], list[str]]:
    """Each round's forecast uses the ceilings measured around that round's steps; the medians of the rounds'
    forecasts and of their measurements are compared."""
    measured = cpu_fit.measure_rounds(cases, rounds=rounds, log=lambda s: print(s, flush=True))
    rows, failed = [], []
    for m in measured:
        each = [cpu_forecast(m | r) for r in m["each_round"]]
        f = statistics.median(each)
        err = f / m["images_per_s"] - 1
        rows.append({"case": f"{m['model']}@{m['image_size']} b{m['batch']}", "forecast": f,
                     "measured": m["images_per_s"], "error": err,
                     "rounds": [{"forecast": fr, "measured": r["images_per_s"]}
                                for fr, r in zip(each, m["each_round"], strict=True)]})
        if abs(err) > CPU_TOLERANCE:
            failed.append(f"CPU {m['model']}: forecast {f:.1f} vs measured {m['images_per_s']:.1f} images/s "
                          f"({err:+.0%}, target within {CPU_TOLERANCE:.0%})")
    return rows, failed


def check_reference(limit: int | None) -> tuple[list[dict], list[str]]:
    factors = calibration.load()
    rows = []
    for r in calibrate.reference_rows()[:limit]:
        f = calibrate.forecast_row(r, factors)
        rows.append({"row": r.label, "published": r.images_per_s, "forecast": f,
                     "ratio": (f / r.images_per_s) if f else None})
    ok = sum(1 for r in rows if r["ratio"] and 1 / REFERENCE_FACTOR <= r["ratio"] <= REFERENCE_FACTOR)
    share = ok / len(rows)
    failed = [] if share >= REFERENCE_SHARE else [
        f"published rows: {ok}/{len(rows)} = {share:.0%} within {REFERENCE_FACTOR}x (target {REFERENCE_SHARE:.0%})"]
    return rows, failed


def check_activations(cases: list[tuple[str, int, int]]) -> tuple[list[dict], list[str]]:
    from fasttrain.estimate import cost
    rows, failed = [], []
    for model, size, batch in cases:
        meta = cost.model_cost(model, size, num_classes=1000).activation_bytes_per_sample
        real = cost.measured_saved_bytes(model, size, batch, num_classes=1000)
        err = meta / real - 1
        rows.append({"case": f"{model}@{size} b{batch}", "forecast_mib": meta / 2**20, "measured_mib": real / 2**20,
                     "error": err})
        if abs(err) > ACTIVATION_TOLERANCE:
            failed.append(f"activations {model}: {err:+.0%} (target within {ACTIVATION_TOLERANCE:.0%})")
    return rows, failed


def _train_images_per_s(model: str, size: int, batch: int, runs_dir: str) -> tuple[float, float] | None:
    """One real epoch of `fasttrain train --data synthetic`: (epoch images/s from its summary, median images/s of
    its logged steps after the first fifth: what the dashboard shows once warm). None if train fails."""
    cmd = [sys.executable, "-m", "fasttrain", "train", "--profile", "cpu", "--model", model, "--data", "synthetic",
           "--epochs", "1", "--set", f"loader.batch_size={batch}", "--image-size", str(size), "--num-classes", "10",
           "--runs-dir", runs_dir, "--run-name", "accuracy", "--quiet", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        print(f"  train run failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-300:]}")
        return None
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    steps = [json.loads(line) for line in (Path(runs_dir) / "accuracy" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["images_per_s"] for r in steps if r.get("kind") == "step" and r.get("images_per_s")]
    steady = statistics.median(rates[len(rates) // 5:]) if rates else float(summary["train_images_per_s"])
    return float(summary["train_images_per_s"]), steady


def _measure_images_per_s(model: str, size: int, batch: int) -> float | None:
    """`fasttrain estimate --measure` as a user runs it (its own process): measured images/s."""
    cmd = [sys.executable, "-m", "fasttrain", "estimate", "--profile", "cpu", "--model", model, "--measure",
           "--measure-steps", str(MEASURE_STEPS), "--set", f"loader.batch_size={batch}", "--image-size", str(size),
           "--num-classes", "10", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        print(f"  estimate --measure failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-300:]}")
        return None
    return float(json.loads(proc.stdout)["measure"]["measured"]["images_per_s"])


def check_measure_vs_train(model: str, size: int, batch: int, rounds: int) -> tuple[list[dict], list[str]]:
    """`fasttrain estimate --measure` (run_synthetic_steps: train's own epoch loop on synthetic batches) vs a real
    `fasttrain train --data synthetic` epoch of the same plan, each in its own process as a user runs them,
    interleaved, medians. (In one long-lived benchmark process the measured rate drifts from a fresh process's.)"""
    measure, epoch, steady = [], [], []
    for _ in range(rounds):
        got = _measure_images_per_s(model, size, batch)
        with tempfile.TemporaryDirectory() as runs:
            rates = _train_images_per_s(model, size, batch, runs)
        if rates is None or got is None:
            return [], []
        measure.append(got)
        epoch.append(rates[0])
        steady.append(rates[1])
        print(f"  round: --measure {got:.1f}, train epoch {rates[0]:.1f}, "
              f"train steady steps {rates[1]:.1f} images/s", flush=True)
    m, e, t = statistics.median(measure), statistics.median(epoch), statistics.median(steady)
    err = m / t - 1
    failed = [] if abs(err) <= MEASURE_VS_TRAIN_TOLERANCE else [
        f"--measure vs train: {m:.1f} vs {t:.1f} images/s in train's steady steps ({err:+.0%}, target within 10%)"]
    return [{"case": f"{model}@{size} b{batch}", "measure": m, "train": t, "train_epoch": e, "error": err,
             "error_vs_epoch": m / e - 1}], failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="forecast vs measured for fasttrain estimate")
    ap.add_argument("--tiny", action="store_true", help="plumbing check: tiny_cnn only, 4 reference rows, 1 round")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of CPU measurements (medians)")
    ap.add_argument("--skip-train", action="store_true", help="skip the --measure vs `train` comparison")
    ap.add_argument("--only-measure", action="store_true", help="run only section 4 (--measure vs train)")
    ap.add_argument("--json", dest="json_path", help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    cases = TINY_CASES if args.tiny else CPU_CASES
    rounds = 1 if args.tiny else args.rounds
    failed: list[str] = []

    cpu_rows: list[dict] = []
    ref_rows: list[dict] = []
    act_rows: list[dict] = []
    if args.only_measure:
        cases = []
    print("== 1. CPU: forecast vs measured training steps (images/s) ==", flush=True)
    cpu_rows, f = check_cpu(cases, rounds) if cases else ([], [])
    failed += f
    for r in cpu_rows:
        spread = " / ".join(f"{x['forecast']:.1f}:{x['measured']:.1f}" for x in r["rounds"])
        print(f"{r['case']:<26} forecast {r['forecast']:8.1f}  measured {r['measured']:8.1f}  error {r['error']:+6.0%}"
              f"   (rounds, forecast:measured {spread})")

    print(f"\n== 2. published GPU throughput: forecast vs every row (target {REFERENCE_SHARE:.0%} within "
          f"{REFERENCE_FACTOR}x) ==")
    ref_rows, f = check_reference(4 if args.tiny else None) if cases else ([], [])
    failed += f
    for r in ref_rows:
        fc = "unknown" if r["forecast"] is None else f"{r['forecast']:8.0f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['row']:<58} published {r['published']:8.0f}  forecast {fc}  ratio {ratio}")
    inside = sum(1 for r in ref_rows if r["ratio"] and 1 / REFERENCE_FACTOR <= r["ratio"] <= REFERENCE_FACTOR)
    print(f"within {REFERENCE_FACTOR}x: {inside}/{len(ref_rows)}")

    print("\n== 3. activation memory: meta-device count vs a real CPU forward (saved tensors, MiB/sample) ==")
    act_rows, f = check_activations(cases)
    failed += f
    for r in act_rows:
        print(f"{r['case']:<26} forecast {r['forecast_mib']:8.2f}  measured {r['measured_mib']:8.2f}  "
              f"error {r['error']:+6.1%}")

    train_rows: list[dict] = []
    if not args.tiny and not args.skip_train:
        print("\n== 4. estimate --measure vs fasttrain train --data synthetic (images/s) ==", flush=True)
        train_rows, f = check_measure_vs_train("tiny_cnn", 32, 64, max(rounds, MEASURE_ROUNDS))
        failed += f
        for r in train_rows:
            print(f"{r['case']:<26} --measure {r['measure']:8.1f}  train steady {r['train']:8.1f} ({r['error']:+.0%})  "
                  f"train epoch {r['train_epoch']:8.1f} ({r['error_vs_epoch']:+.0%})")
        if not train_rows:
            print("skipped: `fasttrain train` could not run here (see the line above)")

    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"cpu": cpu_rows, "reference": ref_rows, "activations": act_rows,
                                                    "measure_vs_train": train_rows, "failed": failed}, indent=2))
    print()
    for line in failed:
        print(f"FAILED: {line}")
    print("all targets met" if not failed else f"{len(failed)} target(s) missed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
