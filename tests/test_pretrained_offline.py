"""`--pretrained` never touches the network: Hugging Face Hub is offline before it is imported, and weights
missing from the local cache are an exit-2 line at once (it used to retry a HEAD request for ~60 s).
Real children whose every socket connect/getaddrinfo raises and is logged (a sitecustomize.py guard)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, child_env

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
def offline_child(tmp_path: Path):  # noqa: ANN201
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "sockets.log"
    env = child_env({"SOCKET_GUARD_LOG": str(log), "HF_HOME": str(tmp_path / "hf"),
                     "PYTHONPATH": os.pathsep.join(p for p in (str(guard), os.environ.get("PYTHONPATH")) if p)})
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        env.pop(name, None)  # the developer's own offline switch must not hide the fault

    def run(*args: str) -> tuple[subprocess.CompletedProcess[str], float, str]:
        started = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "fasttrain", *args], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=300)
        return res, time.perf_counter() - started, log.read_text() if log.exists() else ""
    return run


EXPECTED = ("fasttrain: error: --pretrained: no pretrained weights for resnet18 in the local cache; fasttrain never "
            "downloads; fetch them once where there is network")


@pytest.mark.parametrize("args", [["--dry-run"], ["--epochs", "1", "--runs-dir", "runs"]], ids=["dry-run", "run"])
def test_pretrained_without_cached_weights_fails_at_once_without_the_network(offline_child, args) -> None:  # noqa: ANN001
    res, seconds, sockets = offline_child("train", "--pretrained", "--model", "resnet18", *args)
    assert sockets == "", f"a socket was used: {sockets}"
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().startswith(EXPECTED), res.stderr
    assert "Traceback" not in res.stderr and "huggingface.co" not in res.stderr
    assert seconds < 45, seconds  # the hub's retries alone took ~60 s; this is torch+timm import time under load


def test_stay_offline_also_flips_an_already_imported_hub() -> None:
    code = ("import os, huggingface_hub.constants as c; from fasttrain.models.registry import stay_offline; "
            "before = c.HF_HUB_OFFLINE; stay_offline(); print(before, c.HF_HUB_OFFLINE, c.is_offline_mode(), "
            "os.environ['HF_HUB_OFFLINE'])")
    env = child_env()
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=120).stdout.split()
    assert out == ["False", "True", "True", "1"], out
