"""Issue 43 item 8 (b): one copy of the weights where two files held the same ones.

Before, every run left best.pt and model.safetensors holding the same best weights, and a run whose last epoch was
its best kept them a third time in last.pt (resnet18 with AdamW and the moving average: 269 MB of files, 179 MB of
them last.pt). Now model.safetensors is the one copy of the best weights, and a last.pt written after the best
epoch refers to it instead of holding them again. Everything that reads a run folder still does: predict, --resume
(exactly: bit for bit the same as from a whole last.pt), --weights RUN; and a folder in the previous layout (best.pt,
a whole last.pt) still predicts, resumes and gives its weights, and keeps one copy once resumed. Real tiny runs on
real PNG files, in child processes."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import run_subprocess
from loop_helpers import tiny_mlp, tiny_run_folder

from fasttrain.models.saved import WEIGHTS_FILE, is_reference
from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state import checkpoint_policy as policies
from fasttrain.train.state.run_state import Position, RunState

ENV = {"OMP_NUM_THREADS": "1"}


def _train(cwd: Path, *extra: str) -> str:
    r = run_subprocess("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--no-tune",
                       "--json", *extra, env=ENV, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/one: a 1-epoch run (its last epoch is its best: its last.pt is written right after the best weights)."""
    root = tiny_run_folder(tmp_path_factory.mktemp("dedupe"))
    _train(root, "--epochs", "1", "--run-name", "one")
    return root


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _tensors(tree: object) -> list[torch.Tensor]:
    if torch.is_tensor(tree):
        return [tree]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _tensors(v)]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _tensors(v)]
    return []


def _same_run(a: dict, b: dict) -> None:
    """Two last.pt payloads of the same run at the same point, bit for bit: weights, optimizer, moving average."""
    assert a["epoch"] == b["epoch"] and _same(a["model"], b["model"]) and _same(a["ema"], b["ema"])
    assert len(_tensors(a["optimizer"])) == len(_tensors(b["optimizer"])) > 8
    assert all(torch.equal(x, y) for x, y in zip(_tensors(a["optimizer"]), _tensors(b["optimizer"]), strict=True))


def _tensor_sets(run: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every set of weights stored in the folder's files, as they are on disk (references not followed)."""
    from safetensors.torch import load_file
    sets = {}
    for path in sorted(run.glob("*.pt")):
        payload = torch.load(path, map_location="cpu", weights_only=False)
        for entry, prefix in (("model", ""), ("ema", "module.")):
            value = payload.get(entry)
            if isinstance(value, dict) and not is_reference(value):
                sets[f"{path.name}[{entry}]"] = {k.removeprefix(prefix): v for k, v in value.items()}
    if (run / WEIGHTS_FILE).is_file():
        sets[WEIGHTS_FILE] = load_file(str(run / WEIGHTS_FILE))
    return sets


def _bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in run.iterdir() if p.suffix in (".pt", ".safetensors"))


def _old_layout(run: Path, into: Path) -> Path:
    """The folder as the previous fasttrain left it: best.pt beside model.safetensors, last.pt whole."""
    from safetensors.torch import load_file
    shutil.copytree(run, into)
    whole = {k: v for k, v in ck.load(into / "last.pt").items() if k not in ("checksum", "checksum_note", "format",
                                                                            "format_version", "versions")}
    ck.save_atomic(whole, into / "last.pt")
    meta = json.loads((into / "model.json").read_text())
    ck.save_atomic(policies.weights_payload(load_file(str(into / WEIGHTS_FILE)), epoch=meta["epoch"],
                                      val_acc1=meta["val_acc1"]), into / "best.pt")
    (into / "model.json").write_text(json.dumps({**meta, "from": "best.pt"}))
    return into


def test_no_two_files_hold_the_same_weights(work: Path) -> None:
    run = work / "runs" / "one"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_epoch"] == summary["epochs_run"] == 1
    assert not (run / "best.pt").exists()
    sets = _tensor_sets(run)
    names = sorted(sets)
    twins = [(a, b) for i, a in enumerate(names) for b in names[i + 1:] if _same(sets[a], sets[b])]
    assert not twins, twins
    last = torch.load(run / "last.pt", map_location="cpu", weights_only=False)
    assert is_reference(last["ema"])  # the moving average is what validation scored and model.safetensors keeps
    # ... and loading follows the reference: the whole state, the same tensors as model.safetensors
    from safetensors.torch import load_file
    kept = load_file(str(run / WEIGHTS_FILE))
    loaded = ck.load(run / "last.pt", complete=True)["ema"]
    assert _same({k.removeprefix("module."): v for k, v in loaded.items()}, kept)
    old = _old_layout(run, work / "runs" / "one-old")
    saved = _bytes(old) - _bytes(run)
    weights = (run / WEIGHTS_FILE).stat().st_size
    assert saved >= 1.9 * weights, (saved, weights)  # best.pt and last.pt's copy, each about the weights' size
    assert summary["checkpoint_best"] == f"runs/one/{WEIGHTS_FILE}"  # the run folder as the command named it


def test_a_deduplicated_run_resumes_exactly_and_predicts(work: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resumed from its last.pt that refers to model.safetensors, and from the same state in a whole last.pt (the
    previous layout): the two runs end bit for bit the same (tests/test_resume.py: a whole one resumes exactly)."""
    run = work / "runs" / "one"
    resumed = work / "runs" / "one-resumed"
    shutil.copytree(run, resumed)
    whole = _old_layout(run, work / "runs" / "one-whole")
    for folder in (resumed, whole):
        _train(work, "--resume", str(folder), "--epochs", "2")
    _same_run(ck.load(resumed / "last.pt"), ck.load(whole / "last.pt"))
    monkeypatch.chdir(work)
    res = cli("predict", str(run), "--data", str(work / "data" / "val"))
    assert res.code == 0, res.err
    assert len(res.out.strip().splitlines()) == 1 + 12 and "class0" in res.out


@pytest.mark.parametrize("source", ["one", "one/model.safetensors"])
def test_weights_from_a_deduplicated_run(work: Path, source: str) -> None:
    view = json.loads(_train(work, "--weights", f"runs/{source}", "--dry-run", "--epochs", "1"))
    assert re.search(r": (\d+) of \1 tensors loaded$", view["weights"]), view["weights"]


def test_a_folder_of_the_previous_layout_still_predicts_resumes_and_gives_weights(
        work: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _old_layout(work / "runs" / "one", work / "runs" / "old")
    monkeypatch.chdir(work)
    res = cli("predict", str(old), "--data", str(work / "data" / "val"))
    assert res.code == 0, res.err
    view = json.loads(_train(work, "--weights", "runs/old/best.pt", "--dry-run", "--epochs", "1"))
    assert re.search(r": (\d+) of \1 tensors loaded$", view["weights"]), view["weights"]
    _train(work, "--resume", str(old), "--epochs", "2")
    assert ck.load(old / "last.pt")["epoch"] == 2
    # once resumed, the folder keeps one copy: best.pt's weights are model.safetensors' (checked, then removed)
    summary = json.loads((old / "summary.json").read_text())
    assert not (old / "best.pt").exists()
    meta = json.loads((old / "model.json").read_text())
    assert meta["epoch"] == summary["best_epoch"] and meta["from"] == "best epoch"
    assert cli("predict", str(old), "--data", str(work / "data" / "val")).code == 0


def test_a_missing_or_changed_model_safetensors_is_named_when_last_pt_refers_to_it(
        work: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    changed = work / "runs" / "changed"
    shutil.copytree(work / "runs" / "one", changed)
    data = bytearray((changed / WEIGHTS_FILE).read_bytes())
    data[-10] ^= 0xFF
    (changed / WEIGHTS_FILE).write_bytes(bytes(data))
    res = cli("train", "--resume", str(changed), "--epochs", "2")
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert WEIGHTS_FILE in res.err and "last.pt" in res.err and "changed" in res.err
    missing = work / "runs" / "missing"
    shutil.copytree(work / "runs" / "one", missing)
    (missing / WEIGHTS_FILE).unlink()
    res = cli("train", "--resume", str(missing), "--epochs", "2")
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert WEIGHTS_FILE in res.err and "missing" in res.err


@pytest.mark.parametrize("links", [True, False], ids=["hard-link", "no-links"])
def test_last_pt_loads_at_every_moment_while_a_later_best_replaces_model_safetensors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: bool) -> None:
    """A last.pt that refers to model.safetensors (a session's end at its best epoch) must never meet a replaced
    model.safetensors: the next session's end keeps the old one as a hard link until its own last.pt is down (then
    refers to the new one), or, where no link can be made, puts a whole last.pt down first."""
    from fasttrain.models import saved
    from fasttrain.train.loop import checkpointing as cp
    keeper = cp.Checkpointer(policies.CheckpointPolicy(tmp_path), warn=lambda text: None)
    model = tiny_mlp(seed=1)

    def state(epoch: int) -> RunState:
        return RunState(model=model.state_dict(), optimizer={}, schedule={"step": epoch},
                        position=Position(epoch, epoch, 0))

    keeper.new_best(model, epoch=1, val_acc1=0.5)
    keeper.write(state(1), epoch=0, final=True)
    assert is_reference(torch.load(tmp_path / "last.pt", weights_only=False)["model"])
    real, checked = saved.save_trained, []

    def save(*args, **kwargs):
        checked.append(ck.load(tmp_path / "last.pt")["epoch"])  # loads before model.safetensors is replaced ...
        out = real(*args, **kwargs)
        checked.append(ck.load(tmp_path / "last.pt")["epoch"])  # ... and after
        return out
    monkeypatch.setattr(saved, "save_trained", save)
    if not links:
        def no_link(*args: object) -> None:
            raise OSError("links are not supported here")
        monkeypatch.setattr(cp.os, "link", no_link)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    keeper.new_best(model, epoch=2, val_acc1=0.75)
    keeper.write(state(2), epoch=1, final=True)
    assert checked == ([1, 1] if links else [2, 2]), checked
    last = torch.load(tmp_path / "last.pt", weights_only=False)
    assert is_reference(last["model"]) == links and not (tmp_path / saved.PREVIOUS_FILE).exists()
    assert _same(ck.load(tmp_path / "last.pt")["model"], model.state_dict())
