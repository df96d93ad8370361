"""`--pretrained` loads through timm's hub loading: from the Hugging Face cache without the network (a hand-made
cache layout here), downloaded into it otherwise; with no network that is an exit-2 line at once (it used to retry
a HEAD request for ~60 s), and a user's own HF_HUB_OFFLINE=1 is kept. Everything else stays offline.
Real children whose every socket connect/getaddrinfo raises and is logged (a sitecustomize.py guard)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, child_env
from image_tree import write_tree

GUARD = '''\
import os
import socket

_LOG = os.environ["SOCKET_GUARD_LOG"]


def _blocked(*args, **kwargs):
    with open(_LOG, "a") as f:
        f.write(repr(args[1:3]) + "\\n")
    raise OSError(101, "network use blocked by the test")


socket.socket.connect = _blocked
socket.socket.connect_ex = _blocked
socket.create_connection = _blocked
socket.getaddrinfo = _blocked
'''


@pytest.fixture
def offline_child(tmp_path: Path):
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "sockets.log"
    env = child_env({"SOCKET_GUARD_LOG": str(log), "HF_HOME": str(tmp_path / "hf"),
                     "PYTHONPATH": os.pathsep.join(p for p in (str(guard), os.environ.get("PYTHONPATH")) if p)})
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        env.pop(name, None)  # the developer's own offline switch must not hide the fault

    def run(*args: str, extra: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float, str]:
        started = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "fasttrain", *args], capture_output=True, text=True,
                             env={**env, "OMP_NUM_THREADS": "1", **(extra or {})}, cwd=tmp_path, timeout=300)
        return res, time.perf_counter() - started, log.read_text() if log.exists() else ""
    return run


NO_NETWORK = "fasttrain: error: --pretrained: no network to download resnet18's weights ("
FIX = "and none in the cache "


def test_pretrained_without_network_is_one_line_at_once(offline_child, tmp_path: Path) -> None:
    data = write_tree(tmp_path / "data", {"a": 4, "b": 4}, size=32)
    res, seconds, sockets = offline_child("train", "--pretrained", "--model", "resnet18", "--data", str(data),
                                          "--image-size", "32", "--epochs", "1", "--runs-dir", "runs")
    assert sockets, "the download was not even tried"
    assert res.returncode == 2, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(NO_NETWORK), res.stderr
    assert FIX in lines[0] and "models--timm--resnet18.a1_in1k" in lines[0], lines[0]
    assert lines[0].endswith("give a local file with --weights FILE"), lines[0]
    assert "Traceback" not in res.stderr
    assert seconds < 45, seconds  # the hub's retries alone took ~60 s; this is torch+timm import time under load


def test_the_users_own_offline_switch_is_kept(offline_child, tmp_path: Path) -> None:
    data = write_tree(tmp_path / "data", {"a": 4, "b": 4}, size=32)
    res, _, sockets = offline_child("train", "--pretrained", "--model", "resnet18", "--data", str(data),
                                    "--image-size", "32", "--epochs", "1", "--runs-dir", "runs",
                                    extra={"HF_HUB_OFFLINE": "1"})
    assert sockets == "", f"a socket was used: {sockets}"
    assert res.returncode == 2 and "downloading" not in res.stderr, res.stderr
    assert "HF_HUB_OFFLINE=1 keeps the Hugging Face Hub offline" in res.stderr


def test_a_dry_run_says_where_the_weights_come_from_and_downloads_nothing(offline_child, tmp_path: Path) -> None:
    data = write_tree(tmp_path / "data", {"a": 4, "b": 4}, size=32)
    res, _, sockets = offline_child("train", "--pretrained", "--model", "efficientnet_b0", "--data", str(data),
                                    "--image-size", "32", "--dry-run")
    assert res.returncode == 0 and sockets == "", res.stderr
    line = next(line for line in res.stdout.splitlines() if line.startswith("weights "))
    assert "pretrained: hf-hub:timm/efficientnet_b0.ra_in1k (cache " in line  # timm's default tag, resolved
    assert "not there yet: downloaded when the run starts" in line


def _hub_cache(home: Path, repo: str, state: dict) -> Path:
    """The layout huggingface_hub writes: models--ORG--NAME/{refs/main, snapshots/<commit>/model.safetensors}."""
    from safetensors.torch import save_file
    folder = home / "hub" / ("models--" + repo.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "snapshots" / commit / "model.safetensors"))
    return folder


def test_weights_in_the_hub_cache_load_through_timm_without_the_network(offline_child, tmp_path: Path) -> None:
    import timm
    import torch
    torch.manual_seed(3)
    state = timm.create_model("resnet18").state_dict()  # ImageNet-shaped: 1000 classes
    folder = _hub_cache(tmp_path / "hf", "timm/resnet18.a1_in1k", state)
    data = write_tree(tmp_path / "data", {"a": 8, "b": 8, "c": 8}, size=32)
    res, _, sockets = offline_child("train", "--pretrained", "--model", "resnet18", "--data", str(data),
                                    "--image-size", "32", "--epochs", "1", "--runs-dir", "runs", "--run-name", "r",
                                    "--no-tune", "--json")
    assert res.returncode == 0, res.stderr
    assert sockets == "" and "downloading" not in res.stderr  # found in the cache: the hub was never asked
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    assert summary["init"]["weights"] is None
    assert summary["init"]["pretrained"] == f"hf-hub:timm/resnet18.a1_in1k (cache {folder})"


def test_a_torchvision_name_is_told_to_use_the_timm_one(cli) -> None:
    res = cli("train", "--pretrained", "--model", "mobilenet_v3_small", "--dry-run")
    assert res.code == 2
    assert "mobilenet_v3_small is a torchvision name; fasttrain loads pretrained weights through timm" in res.err
    assert "mobilenetv3_small_100" in res.err


def test_stay_offline_also_flips_an_already_imported_hub() -> None:
    code = ("import os, huggingface_hub.constants as c; from fasttrain.models.registry import stay_offline; "
            "before = c.HF_HUB_OFFLINE; stay_offline(); print(before, c.HF_HUB_OFFLINE, c.is_offline_mode(), "
            "os.environ['HF_HUB_OFFLINE'])")
    env = child_env()
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=120).stdout.split()
    assert out == ["False", "True", "True", "1"], out
