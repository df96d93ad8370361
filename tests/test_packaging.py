"""What a user gets: the repository's profiles/ folder and a built wheel both carry the five presets.

The wheel is built for real (pip wheel, no dependencies, no build isolation: the dev install brings
setuptools), so a package-data glob that misses a file fails here, not on a user's machine.
"""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fasttrain.cli import app

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "fasttrain"
PRESETS = ["aws-a10g", "cpu", "gcp-v100", "kaggle-t4", "laptop-4060"]


def test_root_profiles_folder_holds_the_presets():
    found = sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml"))
    assert found == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_root_profile_files_validate_by_path(name: str):
    result = CliRunner().invoke(app, ["profiles", "validate", str(ROOT / "profiles" / f"{name}.yaml")])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                           "--quiet", "-w", str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = out.glob("fasttrain-*.whl")
    return zipfile.ZipFile(built)


def test_wheel_ships_the_presets_as_in_the_repository(wheel: zipfile.ZipFile):
    for name in PRESETS:
        shipped = wheel.read(f"fasttrain/profiles/builtin/{name}.yaml")
        assert shipped == (ROOT / "profiles" / f"{name}.yaml").read_bytes()


def test_wheel_ships_every_module_and_data_file(wheel: zipfile.ZipFile):
    names = set(wheel.namelist())
    expected = [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix in {".py", ".csv", ".json", ".yaml"}
                and "__pycache__" not in p.parts]
    missing = [str(p.relative_to(PACKAGE.parent)) for p in expected if str(p.relative_to(PACKAGE.parent)) not in names]
    assert not missing, missing
