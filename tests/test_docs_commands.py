"""Every `fasttrain ...` command line of README.md and docs/*.md runs on this CPU machine (one test per line).

What counts as a command line: see tests/docs_commands.py (`$ fasttrain ...` in ```console blocks, and
`fasttrain ...` lines without the prompt in ```console blocks or blocks with no language).

How a line is run (in its own temporary working directory, with the session's FASTTRAIN_CACHE kept, as
conftest.child_env does): a line that trains, a `bench loader` / `bench speedups` line (both stopped by a signal)
and a line that launches processes (`--nproc-per-node`) in a real child process, `python -m fasttrain`; every other
line (it plans, inspects or prints) in this process through the real entry point, fasttrain.cli.main, as the `cli`
fixture runs commands: a child would add ~3 s of torch and timm imports to each of some 60 lines. Then:
  - data paths (/data/..., ~/data/..., DIR) become a small real ImageFolder tree (PNG files, train/ and val/);
    run folders a line resumes or compares (runs/NAME, runs/r1, runs/bench-speedups-A) are copied into the
    working directory from one small run made once per session; a profile YAML the line reads
    (my-profile.yaml) is written there from docs/profiles.md's example; placeholders `...`, `[...]`,
    `--node-rank R` and `HOST:PORT` become nothing, the bracketed flag itself, 0 and 127.0.0.1:29400.
  - `a && b` runs a, then b if a exited 0, like a shell.
  - `fasttrain train` without --dry-run, --epochs or --resume gets `--epochs 1`.
  - a line whose comment says it `needs a GPU` / `needs N GPUs` or runs on `several machines` (the docs'
    convention for lines a 2-core CPU machine cannot run as written) is checked as a plan: `train` gets
    `--dry-run`; other commands (estimate, profiles show) only plan anyway and run as written.
  - long runs are stopped early: a single-process `train` line that trains sends itself a real SIGTERM right after
    optimizer step SIGNAL_AFTER_STEPS (after the base run's step + SIGNAL_AFTER_STEPS when it resumes it), through
    the FASTTRAIN_TEST_SIGNAL_AT_STEP hook (train/signals/scripted.py): the stop path docs/reliability.md promises,
    seconds after the line's first step rather than after a clock's TRAIN_STEPS_S; it passes if it printed the
    SIGTERM note `optimizer step S (epoch E, batch B)` (or a progress line `epoch E/N batch B/M`, or finished) and
    exited 0. A line the hook cannot stop (`--nproc-per-node 2`: torchrun's workers) gets SIGTERM from the test
    TRAIN_STEPS_S seconds after its start line (`fasttrain: profile ... | device ...`) unless an epoch is done by
    then, and passes on the same marks; `bench loader` / `bench speedups` get SIGTERM at their first progress line
    (`round i/n ... img/s`, `warming up`). A train line not started after TRAIN_CAP_S, a bench after BENCH_CAP_S,
    anything else still running after OTHER_CAP_S fails.
Asserts: no "Traceback" in the output; exit 0, or 1 for doctor (a finding), or the codes the line's own comment
promises (`# exit 0, or exit 2 listing every problem`). The failure names the file, line, command and output.

NOT_RUNNABLE lists lines that cannot run as written (with why); KNOWN_BUGS the lines that fail today because of
a bug being fixed in src/ (xfail, not strict: they turn green silently when the fix lands -- then remove them).
Identical command lines (README and docs/train.md share some) run once per session and share the outcome.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env
from docs_commands import DocCommand, Outcome, collect, run_capped, run_in_process, split_and
from image_tree import write_png, write_tree

# The suite's workers share the machine's cores: a training child with every core's OpenMP threads next to another
# one spins against it (runs measured 50x slower, capped before their first epoch). One thread each, as the
# other subprocess tests run; the thread decisions themselves are tested in process.
SHARED_CORES = {"OMP_NUM_THREADS": "1"}
TRAIN_CAP_S = 60.0       # a train line still starting after this fails
TRAIN_STEPS_S = 12.0     # seconds after its start line before the test's SIGTERM, unless an epoch is done by then
SIGNAL_AFTER_STEPS = 2   # a single-process train line sends itself SIGTERM right after this optimizer step ...
BASE_STOP_STEP = 90      # ... counted on from here when it resumes the session's base run (stopped at this step)
PLANS_ONLY = {"--dry-run", "--help", "-h"}   # a train line with one of these trains nothing
BENCH_CAP_S = 30.0
OTHER_CAP_S = 120.0
TRAIN_STARTED = re.compile(r"^fasttrain: profile .*\| device ", re.MULTILINE)

# Lines that cannot run as written, and why (keyed by the command text as written, without its comment).
NOT_RUNNABLE: dict[str, str] = {
    "torchrun --nproc-per-node 4 -m fasttrain train --profile aws-a10g ...":
        "torchrun launching 4 GPU processes with `...` for the rest; its fasttrain part "
        "(train --profile aws-a10g --nproc-per-node 4) is the line above it, checked as a plan",
    "fasttrain estimate [--profile NAME|FILE] --model NAME [--image-size N] [--dataset-size N | --data DIR]":
        "a usage synopsis (every option in brackets), not a command",
}

# Lines that fail today because of a known bug under repair in src/ (keyed by the command text as written).
KNOWN_BUGS: dict[str, str] = {}

# Lines whose refusal on this 2-core CPU machine is the right answer: text -> (exit code, words of the message).
CPU_REFUSALS: dict[str, tuple[int, str]] = {
    "fasttrain train --resume runs/NAME --nproc-per-node 4":
        (2, "CPU processes on"),   # 4 gloo processes on 2 cores are refused; on 4 GPUs it resumes
}

PROGRESS = {
    "train": re.compile(r"epoch \d+/\d+ batch \d+/\d+|optimizer step [1-9]\d* \(epoch \d+, batch \d+\)"),
    "bench loader": re.compile(r"round \d+/\d+ .*img/s"),
    "bench speedups": re.compile(r"warming up"),
}

# docs/profiles.md's example profile, for lines that read a profile YAML of the reader's own.
MY_PROFILE = "extends: aws-a10g\nloader:\n  batch_size: 384\n"

COMMANDS = collect()


def _params() -> list:
    params = []
    for cmd in COMMANDS:
        marks = []
        if cmd.text in NOT_RUNNABLE:
            marks.append(pytest.mark.skip(reason=f"not runnable as written: {NOT_RUNNABLE[cmd.text]}"))
        elif cmd.text in KNOWN_BUGS:
            marks.append(pytest.mark.xfail(strict=False, reason=KNOWN_BUGS[cmd.text]))
        params.append(pytest.param(cmd, id=cmd.where, marks=marks))
    return params


class Fixtures:
    """What the lines need, made once per session and only when a line needs it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tree: Path | None = None
        self._base: Path | None = None
        self._speedups: Path | None = None
        self._competition: Path | None = None
        self._weights: Path | None = None

    def tree(self) -> Path:
        """4 classes of real 40 px PNG files: 260 per class in train/ (aws-a10g's batch 256 fits on each of 4 GPUs'
        shares, for the 4-GPU line's dry run), 10 in val/."""
        if self._tree is None:
            root = self.root / "images"
            for split, n in (("train", 260), ("val", 10)):
                write_tree(root / split, dict.fromkeys(("cat", "dog", "fox", "owl"), n), size=40, seed=len(split))
            self._tree = root
        return self._tree

    def competition(self) -> Path:
        """A competition's files, as docs/competition.md draws them: train.csv (`id,label`, ids without the extension)
        beside train_images/ (3 classes of real 32 px PNGs, 14 each), test_images/ (6) and sample_submission.csv."""
        if self._competition is None:
            root = self.root / "comp"
            rows = []
            for c, name in enumerate(("Bag", "Coat", "Trouser")):
                for i in range(14):
                    ident = f"{c}{i:02d}ab{i * 7 % 10}f"
                    write_png(root / "train_images" / f"{ident}.png", seed=c * 100 + i, size=32)
                    rows.append(f"{ident},{name}")
            tests = [f"t{i:03d}" for i in range(6)]
            for i, ident in enumerate(tests):
                write_png(root / "test_images" / f"{ident}.png", seed=1000 + i, size=32)
            (root / "train.csv").write_text("id,label\n" + "\n".join(rows) + "\n")
            (root / "sample_submission.csv").write_text("id,label\n" + "\n".join(f"{t},Bag" for t in tests) + "\n")
            self._competition = root
        return self._competition

    def weights(self) -> Path:
        """Weights pretrained elsewhere: a timm resnet18's state_dict, its head for 5 classes, saved with torch.save."""
        if self._weights is None:
            path = self.root / "pre.pth"
            code = ("import sys, timm, torch; torch.manual_seed(0); "
                    "torch.save(timm.create_model('resnet18', num_classes=5).state_dict(), sys.argv[1])")
            subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=child_env(SHARED_CORES),
                           timeout=300)
            self._weights = path
        return self._weights

    def base_run(self) -> Path:
        """A 2-epoch shapes run stopped by SIGTERM in epoch 2: a run folder a `--resume` line can continue."""
        if self._base is None:
            work = self.root / "base-work"
            last = work / "runs" / "base" / "last.pt"
            work.mkdir(exist_ok=True)
            # SIGTERM right after optimizer step 90 (the shapes set's 84 steps are epoch 1): a hook, not a clock,
            # so a fast epoch (decoded images: ~2 s) cannot finish before the signal lands.
            env = {**child_env(SHARED_CORES), "FASTTRAIN_TEST_SIGNAL_AT_STEP": str(BASE_STOP_STEP)}
            outcome = run_capped(["train", "--epochs", "2", "--run-name", "base"], work, env, TRAIN_CAP_S)
            assert last.exists() and "(epoch 2, batch" in outcome.out, (
                f"the session's base run wrote no mid-epoch checkpoint:\n{outcome.out}")
            self._base = work / "runs" / "base"
        return self._base

    def speedups_result(self) -> Path:
        """A real (small) `bench speedups` result folder, for `bench compare` lines."""
        if self._speedups is None:
            out = self.root / "bench-speedups"
            r = subprocess.run([sys.executable, "-m", "fasttrain", "bench", "speedups", "--model", "tiny_cnn",
                                "--image-size", "16", "--batch-size", "8", "--steps", "1", "--rounds", "1",
                                "--warmup", "1", "--skip", "compile", "--out", str(out), "--json"],
                               cwd=self.root, env=child_env(SHARED_CORES), capture_output=True, text=True, timeout=300)
            failed = f"bench speedups fixture failed:\n{r.stdout}{r.stderr}"
            assert r.returncode == 0 and (out / "result.json").exists(), failed
            self._speedups = out
        return self._speedups


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    return Fixtures(tmp_path_factory.mktemp("docs-fixtures"))


_OUTCOMES: dict[tuple[str, bool], list[Outcome]] = {}


def subcommand(words: list[str]) -> str:
    if len(words) > 2 and words[1] in ("bench", "profiles"):
        return f"{words[1]} {words[2]}"
    return words[1] if len(words) > 1 else ""


def prepare(cmd: DocCommand, words: list[str], cwd: Path, fx: Fixtures, written: set[str]) -> list[str]:
    """The words of one fasttrain part, made runnable here (see the module docstring); files it reads go to cwd."""
    plan_only = cmd.needs_gpu or cmd.several_machines
    args: list[str] = []
    prev = ""
    for word in words[1:]:
        if word.startswith("[") and word != "[":
            word = word[1:]
        if word.endswith("]"):
            word = word[:-1]
        if word == "...":
            prev = word
            continue
        if word.startswith(("/data/", "~/data", "$HOME/data")) or word == "DIR":
            word = str(fx.tree())
        elif word == "comp" or word.startswith("comp/"):
            if not (cwd / "comp").exists():
                shutil.copytree(fx.competition(), cwd / "comp")
        elif prev == "--weights" and word.endswith(".pth") and not (cwd / word).exists():
            shutil.copy(fx.weights(), cwd / word)
        elif word == "HOST:PORT":
            word = "127.0.0.1:29400"
        elif prev == "--node-rank" and word == "R":
            word = "0"
        elif prev == "--resume":
            target = cwd / ("runs/base" if word == "auto" else word)
            if not target.exists():
                shutil.copytree(fx.base_run(), target)
        elif (prev == "--weights" or subcommand(words) in ("predict", "report")) and word.startswith("runs/") \
                and not (cwd / word).exists():
            shutil.copytree(fx.base_run(), cwd / word)  # its model files (a stopped run also writes them)
        elif word.startswith("runs/bench-speedups") and not (cwd / word).exists():
            shutil.copytree(fx.speedups_result(), cwd / word)
        elif (
            word.endswith((".yaml", ".yml"))
            and prev != "--write-profile"
            and word not in written
            and not (cwd / word).exists()
        ):
            (cwd / word).write_text(MY_PROFILE, encoding="utf-8")
        if prev == "--write-profile":
            written.add(word)
        args.append(word)
        prev = word
    if subcommand(words) == "train" and "--help" not in args:
        if plan_only and "--dry-run" not in args:
            args.append("--dry-run")
        elif not plan_only and not {"--dry-run", "--epochs", "-e", "--resume"} & set(args):
            args += ["--epochs", "1"]
    return args


def stop_rule(sub: str):
    """When to stop a long line early: train TRAIN_STEPS_S after its start line, a bench at its first progress line."""
    if sub == "train":
        started: list[float] = []

        def train_stop(out: str, elapsed: float) -> bool:
            if not started and TRAIN_STARTED.search(out):
                started.append(elapsed)
            return bool(started) and elapsed - started[0] >= TRAIN_STEPS_S and "epoch done:" not in out

        return train_stop
    if sub in PROGRESS:
        return lambda out, elapsed: bool(PROGRESS[sub].search(out))
    return None


def self_stop_env(args: list[str]) -> dict[str, str]:
    """The environment that makes a train line stop itself after its first steps (see the module docstring);
    nothing for a line that plans only, prints help, or launches several processes (the hook is per process)."""
    if PLANS_ONLY & set(args):
        return {}
    nproc = args[args.index("--nproc-per-node") + 1] if "--nproc-per-node" in args[:-1] else "1"
    if nproc != "1":
        return {}
    step = BASE_STOP_STEP + SIGNAL_AFTER_STEPS if "--resume" in args else SIGNAL_AFTER_STEPS
    return {"FASTTRAIN_TEST_SIGNAL_AT_STEP": str(step)}


def runs_in_process(sub: str, args: list[str]) -> bool:
    """Whether a line runs in this process (see the module docstring): it neither trains, nor is stopped by a
    signal, nor launches processes."""
    plans_only = bool(PLANS_ONLY & set(args))
    if sub == "train" or "--nproc-per-node" in args:
        return plans_only
    return sub not in PROGRESS


def run_doc_command(cmd: DocCommand, fx: Fixtures, cwd: Path) -> list[Outcome]:
    key = (cmd.text, cmd.needs_gpu or cmd.several_machines)
    if key in _OUTCOMES:
        return _OUTCOMES[key]
    outcomes: list[Outcome] = []
    written: set[str] = set()
    for words in split_and(cmd.text):
        assert words and words[0] == "fasttrain", (
            f"{cmd.where}: `{cmd.text}`: a part does not start with fasttrain; run only the fasttrain part "
            f"or list the line in NOT_RUNNABLE with the reason"
        )
        sub = subcommand(words)
        cap = TRAIN_CAP_S if sub == "train" else BENCH_CAP_S if sub in PROGRESS else OTHER_CAP_S
        args = prepare(cmd, words, cwd, fx, written)
        stops_itself = self_stop_env(args) if sub == "train" else {}
        if runs_in_process(sub, args):
            outcome = run_in_process(args, cwd, SHARED_CORES)
        else:
            outcome = run_capped(args, cwd, child_env({**SHARED_CORES, **stops_itself}), cap, stop_rule(sub))
        outcome.notes += [sub, "stops itself" if stops_itself else ""]
        outcomes.append(outcome)
        if outcome.code != 0:
            break  # `a && b`: b runs only when a succeeded
    _OUTCOMES[key] = outcomes
    return outcomes


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cmd", _params())
def test_doc_command_runs(cmd: DocCommand, fixtures: Fixtures, tmp_path: Path) -> None:
    for outcome in run_doc_command(cmd, fixtures, tmp_path):
        sub = outcome.notes[0]
        what = (
            f"{cmd.where}: `{cmd.text}`\n  ran: {' '.join(outcome.argv)} ({outcome.seconds:.1f} s)\n"
            f"  output (last lines):\n{_tail(outcome.out)}"
        )
        assert "Traceback" not in outcome.out, f"a traceback\n{what}"
        if outcome.notes[1] and not cmd.promised_exits:  # a train line that sent itself SIGTERM after its first steps
            trained = PROGRESS["train"].search(outcome.out) or "\nsummary (" in outcome.out
            assert trained, f"no step trained: no SIGTERM note, progress line or summary\n{what}"
            assert outcome.code == 0, f"exit {outcome.code} after SIGTERM, docs/reliability.md promises 0\n{what}"
            continue
        if outcome.capped and sub == "train" and outcome.code == 0 and "\nsummary (" in outcome.out:
            continue  # the run finished just as the test's SIGTERM arrived: a complete run, exit 0
        if outcome.capped:
            progress = PROGRESS.get(sub)
            assert progress is not None and progress.search(outcome.out), (
                f"still running after {outcome.seconds:.0f} s without a progress line\n{what}"
            )
            if sub == "train":  # SIGTERM: finish the step, save, exit 0 (docs/reliability.md)
                assert outcome.code == 0, f"exit {outcome.code} after SIGTERM, docs/reliability.md promises 0\n{what}"
            continue
        allowed = cmd.promised_exits or ({0, 1} if sub == "doctor" else {0})
        refusal = CPU_REFUSALS.get(cmd.text)
        if refusal is not None and outcome.code == refusal[0] and refusal[1] in outcome.out:
            continue
        assert outcome.code in allowed, f"exit {outcome.code}, the docs promise {sorted(allowed)}\n{what}"


def test_the_docs_have_command_lines() -> None:
    """The collector finds the lines (a format change in the docs must not silently make the test above empty)."""
    wheres = {c.where.split(":")[0] for c in COMMANDS}
    assert len(COMMANDS) >= 40 and {"README.md", "docs/train.md", "docs/reliability.md"} <= wheres, wheres
    for listed in (NOT_RUNNABLE, KNOWN_BUGS, CPU_REFUSALS):
        stale = set(listed) - {c.text for c in COMMANDS}
        assert not stale, f"listed lines no longer in the docs (remove them): {sorted(stale)}"
