"""`--weights FILE`: a local file matched to the model by name and shape, the head re-made for the classes, and every
wrong file one line with exit 2. Real files: timm models' state_dicts saved with torch.save and safetensors, a
fasttrain run folder, and hostile ones (another architecture, text, truncated, empty, one-channel)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from image_tree import write_tree

from fasttrain.core.errors import UserError
from fasttrain.models.weights import (
    WeightsMatch,
    check_weights,
    load_into,
    match_shapes,
    own_name,
)

SHAPES = {"conv.weight": (8, 3, 3, 3), "bn.weight": (8,), "bn.running_mean": (8,), "bn.num_batches_tracked": (),
          "fc.weight": (10, 8), "fc.bias": (10,)}
HEAD = ["fc.weight", "fc.bias"]


def _match(file_shapes: dict[str, tuple[int, ...]]) -> WeightsMatch:
    return match_shapes("pre.pth", "/x/pre.pth", SHAPES, file_shapes, HEAD, 10, "tiny")


def test_same_model_other_classes_loads_all_but_the_head() -> None:
    m = _match({**SHAPES, "fc.weight": (1000, 8), "fc.bias": (1000,)})
    assert (m.loaded, m.total, m.head, m.missing) == (3, 5, HEAD, [])
    assert dict(m.skipped)["fc.weight"] == "shape (1000, 8) vs (10, 8): the head is re-made for 10 classes"
    assert m.line() == "pre.pth: 3 of 5 tensors loaded; fc.weight, fc.bias re-made for 10 classes"
    assert m.record()["loaded"] == 3 and m.record()["of"] == 5 and m.record()["weights"] == "pre.pth"


def test_wrapper_prefixes_are_stripped_only_where_the_model_has_no_such_name() -> None:
    m = _match({f"module._orig_mod.{k}": v for k, v in SHAPES.items()})
    assert m.loaded == 5 and m.names["conv.weight"] == "module._orig_mod.conv.weight"
    assert own_name("model.fc.weight", {"model.fc.weight": 1}) == "model.fc.weight"
    assert own_name("model.fc.weight", {"fc.weight": 1}) == "fc.weight"


def test_another_architecture_is_one_line_naming_a_foreign_tensor() -> None:
    with pytest.raises(UserError) as err:
        _match({"conv_stem.weight": (32, 3, 3, 3), "blocks.0.weight": (4,), "bn.weight": (8,)})
    text = err.value.problems[0].message
    assert text == "holds weights of another model: 1 of 3 tensors of tiny match (e.g. conv_stem.weight is not in tiny)"


def test_one_channel_weights_into_a_colour_model_are_refused() -> None:
    with pytest.raises(UserError, match="1-channel images"):
        _match({**SHAPES, "conv.weight": (8, 1, 3, 3)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([*SHAPES, "module.conv.weight", "x.y", "model.fc.bias"]),
                       st.lists(st.integers(0, 12), max_size=4).map(tuple), max_size=8))
def test_any_file_either_matches_consistently_or_is_one_user_error(files: dict[str, tuple[int, ...]]) -> None:
    try:
        m = _match(files)
    except UserError as exc:
        assert len(exc.problems) == 1
        return
    assert m.loaded == len(m.names) and m.loaded + len(m.skipped) + len(m.missing) == m.total == 5
    for name, theirs in m.names.items():
        assert tuple(files[theirs]) == SHAPES[name]


# --- real files and real runs --------------------------------------------------------------------------------

def _timm(name: str, classes: int, seed: int = 1) -> torch.nn.Module:
    import timm
    torch.manual_seed(seed)
    return timm.create_model(name, num_classes=classes)


@pytest.fixture(scope="module")
def pre(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A resnet18 trained elsewhere for 5 classes, saved as a plain torch loop would save it."""
    path = tmp_path_factory.mktemp("w") / "pre.pth"
    state = _timm("resnet18", 5).state_dict()
    torch.save(state, path)
    return path, state


def test_apply_loads_every_tensor_but_the_head_into_a_real_model(pre) -> None:
    path, state = pre
    match = check_weights(str(path), "resnet18", 10, 32)
    assert (match.loaded, match.total, match.head) == (100, 102, ["fc.weight", "fc.bias"])
    model = _timm("resnet18", 10, seed=2)
    assert load_into(model, match) == 100
    own = model.state_dict()
    assert torch.equal(own["conv1.weight"], state["conv1.weight"])
    assert torch.equal(own["layer4.1.bn2.running_var"], state["layer4.1.bn2.running_var"])
    assert own["fc.weight"].shape == (10, 512)


def test_a_run_starts_from_the_file_and_says_so(cli, pre, tmp_path: Path) -> None:
    path, state = pre
    data = write_tree(tmp_path / "data", {"a": 8, "b": 8, "c": 8}, size=32)
    plan = cli("train", "--data", str(data), "--model", "resnet18", "--image-size", "32", "--weights", str(path),
               "--dry-run")
    assert plan.code == 0, plan.err
    assert "weights      pre.pth: 100 of 102 tensors loaded; fc.weight, fc.bias re-made for 3 classes" in plan.out
    res = cli("train", "--data", str(data), "--model", "resnet18", "--image-size", "32", "--epochs", "1",
              "--weights", str(path), "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", "--no-tune")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    init = summary["init"]
    assert (init["weights"], init["loaded"], init["of"]) == (str(path), 100, 102)
    assert [s[0] for s in init["skipped"]] == ["fc.weight", "fc.bias"]
    assert json.loads((tmp_path / "runs" / "r" / "model.json").read_text())["init"]["loaded"] == 100
    assert f"weights {path} (100 of 102 tensors loaded)" in res.out
    from safetensors.torch import load_file
    trained = load_file(str(tmp_path / "runs" / "r" / "model.safetensors"))
    fresh = _timm("resnet18", 3, seed=0).state_dict()  # what a run from scratch would start near
    for name in ("conv1.weight", "layer3.0.conv1.weight"):  # a few steps moved the file's weights a little
        moved = (trained[name] - state[name]).abs().mean()
        assert moved < 0.1 * (fresh[name] - state[name]).abs().mean(), name
    again = check_weights(str(tmp_path / "runs" / "r"), "resnet18", 7, 32)  # a run folder as --weights
    assert again.loaded == 100 and again.path.endswith("model.safetensors")
    # its last.pt too (docs/competition.md): the RNG states beside the tensors are numpy arrays, which the safe
    # loader reads (numpy's array reconstruction allowed, nothing else); before: "holds Python objects besides tensors"
    assert check_weights(str(tmp_path / "runs" / "r" / "last.pt"), "resnet18", 7, 32).loaded == 100


def test_a_resume_keeps_the_flag_and_does_not_read_the_file_again(cli, pre, tmp_path: Path) -> None:
    import shutil
    own = tmp_path / "mine.pth"
    shutil.copy(pre[0], own)
    data = write_tree(tmp_path / "data", {"a": 8, "b": 8, "c": 8}, size=32)
    first = cli("train", "--data", str(data), "--model", "resnet18", "--image-size", "32", "--epochs", "1",
                "--weights", str(own), "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", "--no-tune")
    assert first.code == 0, first.err
    own.unlink()  # the checkpoint holds the weights now
    res = cli("train", "--resume", str(tmp_path / "runs" / "r"), "--epochs", "2", "--no-tune")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    assert summary["init"] == {"weights": str(own), "resumed": True} and summary["epochs_run"] == 2


def test_safetensors_and_a_timm_checkpoint_load(tmp_path: Path, pre) -> None:
    from safetensors.torch import save_file
    _, state = pre
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "pre.safetensors"))
    assert check_weights(str(tmp_path / "pre.safetensors"), "resnet18", 5, 32).loaded == 102
    torch.save({"epoch": 3, "arch": "resnet18", "state_dict": {f"module.{k}": v for k, v in state.items()}},
               tmp_path / "ckpt.pth.tar")
    assert check_weights(str(tmp_path / "ckpt.pth.tar"), "resnet18", 5, 32).loaded == 102


def _hostile(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.pth"
    if kind == "other-model":
        torch.save(_timm("efficientnet_b0", 5).state_dict(), path)
    elif kind == "text":
        path.write_text("these are not weights\n")
    elif kind == "truncated":
        torch.save(_timm("resnet18", 5).state_dict(), path)
        path.write_bytes(path.read_bytes()[:100_000])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "pickle":
        torch.save({"model": _timm("resnet18", 5)}, path)  # the whole module: unpickling it would run code
    elif kind == "grey":
        state = _timm("resnet18", 5).state_dict()
        state["conv1.weight"] = state["conv1.weight"][:, :1]
        torch.save(state, path)
    return path


@pytest.mark.parametrize("kind,expected", [
    ("missing", "--weights: no such file"),
    ("other-model", "holds weights of another model: "),
    ("text", "not a weights file (truncated or corrupt?)"),
    ("truncated", "not a weights file (truncated or corrupt?)"),
    ("empty", "an empty file, not weights"),
    ("pickle", "holds Python objects besides tensors"),
    ("grey", "was trained on 1-channel images"),
])
def test_wrong_files_are_one_line_and_exit_2(cli, tmp_path: Path, kind: str, expected: str) -> None:
    path = tmp_path / "nothing.pth" if kind == "missing" else _hostile(tmp_path, kind)
    data = write_tree(tmp_path / "data", {"a": 4, "b": 4}, size=32)
    res = cli("train", "--data", str(data), "--model", "resnet18", "--image-size", "32", "--weights", str(path),
              "--epochs", "1", "--runs-dir", str(tmp_path / "runs"))
    assert res.code == 2, res.err
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert lines[0].startswith("fasttrain: error: --weights: ") and expected in lines[0], res.err
    assert "Traceback" not in res.err and not (tmp_path / "runs").exists()
    if kind == "other-model":
        assert "tensors of resnet18 match (e.g. conv_stem.weight is not in resnet18)" in lines[0]
