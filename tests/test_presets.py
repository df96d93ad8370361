"""Loading, merging and overriding profiles: every shipped preset, extends, env, --set, flags, provenance."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fasttrain.core.errors import UserError
from fasttrain.profiles import presets
from fasttrain.profiles.files import preset_names, preset_path

SHIPPED = ["aws-a10g", "cpu", "gcp-v100", "kaggle-t4", "laptop-4060"]
FIELD_NOTES = Path(__file__).parent / "fixtures" / "reference" / "field_notes.csv"


def test_all_presets_ship() -> None:
    assert preset_names() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_loads_and_cites_its_source(name: str) -> None:
    res = presets.resolve_file_only(name)
    assert res.profile.name == name
    text = preset_path(name).read_text()
    assert text.startswith("#"), "each preset opens with a comment saying where its numbers come from"
    if name != "cpu":  # cited by title: the notes are not shipped (docs/field-notes.md says what each one says)
        titles = [r["title"] for r in csv.DictReader(FIELD_NOTES.open(encoding="utf-8")) if r["presets"] == name]
        assert titles and f'Source: field note "{titles[0]}"' in text.split("\n\n")[0]


def test_every_field_note_has_a_section_in_the_docs() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "field-notes.md").read_text(encoding="utf-8")
    for note in csv.DictReader(FIELD_NOTES.open(encoding="utf-8")):
        assert f'## "{note["title"]}"' in doc and f'[`{note["note"]}`]' in doc, note["note"]


def test_preset_numbers_come_from_the_notes() -> None:
    a10g = presets.resolve_file_only("aws-a10g").profile
    assert (a10g.loader.batch_size, a10g.loader.num_workers, a10g.loader.prefetch_factor) == (256, 12, 3)
    assert (a10g.optim.base_lr, a10g.optim.base_batch, a10g.optim.label_smoothing) == (0.5, 256, 0.1)
    assert a10g.speed.compile and a10g.speed.channels_last and a10g.speed.precision == "fp16-mixed"
    assert (a10g.hardware.cpu_cores, a10g.hardware.host_ram_gb) == (16, 62)
    t4 = presets.resolve_file_only("kaggle-t4").profile
    assert (t4.loader.num_workers, t4.loader.persistent_workers, t4.loader.pin_memory) == (2, True, True)
    assert t4.speed.precision == "fp16-mixed" and not t4.hardware.supports_bf16
    laptop = presets.resolve_file_only("laptop-4060").profile
    assert (laptop.loader.batch_size, laptop.optim.accumulation_steps, laptop.optim.clip_grad_norm) == (16, 2, 1.0)
    assert laptop.effective_batch == 32
    v100 = presets.resolve_file_only("gcp-v100").profile
    assert (v100.loader.batch_size, v100.loader.num_workers, v100.loader.prefetch_factor) == (128, 8, 2)
    assert (v100.optim.weight_decay, v100.optim.clip_grad_norm) == (0.01, 1.0)
    cpu = presets.resolve_file_only("cpu").profile
    assert cpu.hardware.gpu is None


def test_user_file_extends_a_preset_and_tracks_provenance(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("extends: aws-a10g\nloader:\n  batch_size: 384\n")
    res = presets.resolve(str(f), env={})
    p = res.profile
    assert p.loader.batch_size == 384 and p.loader.num_workers == 12
    assert p.scaled_lr == pytest.approx(0.75)
    assert res.provenance["loader.batch_size"] == f"file {f}"
    assert res.provenance["loader.num_workers"] == "parent aws-a10g"
    assert res.provenance["loader.batch_overhead"] == "default"
    assert res.chain == ["parent aws-a10g", f"file {f}"]


def test_extends_chain_and_relative_parent(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("extends: kaggle-t4\noptim:\n  epochs: 7\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nloader:\n  batch_size: 128\n")
    res = presets.resolve(str(tmp_path / "child.yaml"), env={})
    assert res.profile.optim.epochs == 7 and res.profile.loader.batch_size == 128
    assert res.profile.loader.num_workers == 2
    assert res.provenance["optim.epochs"].startswith("parent ")


def test_extends_cycle_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(UserError, match="cycle"):
        presets.resolve(str(tmp_path / "a.yaml"), env={})


def test_precedence_flag_over_set_over_env_over_file() -> None:
    env = {"FASTTRAIN_LOADER__BATCH_SIZE": "100", "FASTTRAIN_OPTIM__EPOCHS": "5", "FASTTRAIN_HOME": "/x"}
    res = presets.resolve("cpu", env=env, sets=["loader.batch_size=200", "optim.epochs=6"],
                          flags={"optim.epochs": ("--epochs", 9)})
    p = res.profile
    assert p.loader.batch_size == 200 and res.provenance["loader.batch_size"] == "--set"
    assert p.optim.epochs == 9 and res.provenance["optim.epochs"] == "flag --epochs"
    res = presets.resolve("cpu", env=env)
    assert res.profile.loader.batch_size == 100
    assert res.provenance["loader.batch_size"] == "env FASTTRAIN_LOADER__BATCH_SIZE"


def test_set_values_parse_as_yaml() -> None:
    p = presets.resolve("aws-a10g", env={}, sets=["speed.compile=false", "optim.clip_grad_norm=null",
                                                     "optim.base_lr=0.25"]).profile
    assert p.speed.compile is False and p.optim.clip_grad_norm is None and p.optim.base_lr == 0.25


def test_bad_set_and_unknown_env_key_name_their_source() -> None:
    with pytest.raises(UserError, match="expected KEY=VALUE"):
        presets.resolve("cpu", env={}, sets=["loader.batch_size"])
    with pytest.raises(UserError) as err:
        presets.resolve("cpu", env={"FASTTRAIN_LOADER__BATCH_SZ": "3"})
    assert "env FASTTRAIN_LOADER__BATCH_SZ" in str(err.value) and "batch_size" in str(err.value)


def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(UserError, match="aws-a10g"):
        presets.resolve("aws-a10", env={})


def test_mixed_precision_without_gpu_is_a_note_not_an_error() -> None:
    res = presets.resolve("cpu", env={}, sets=["speed.precision=bf16-mixed"])
    assert res.profile.speed.precision == "bf16-mixed"
    assert any("falls back" in n.line() for n in res.notes)


def test_derived_values_in_one_place() -> None:
    p = presets.resolve("aws-a10g", env={}, sets=["world.nodes=4"]).profile
    d = p.derived(1_281_167)
    assert d["effective_batch"] == 1024 and d["scaled_lr"] == pytest.approx(2.0)
    assert d["total_workers"] == 48
    assert d["iterations_per_epoch"] == 1251
    assert d["loader_ram_bytes"] == 12 * 3 * p.batch_bytes  # per machine: one GPU each


def test_four_gpus_on_one_62gb_machine_exceed_the_loader_budget_and_the_plan_caps_it() -> None:
    # optimal-single-gpu-a10g.md: "RAM buffer scales linearly with GPUs" -- 4 x 12 x 3 x 230 MB on one node is too
    # much; the plan shares the cores and the budget among the processes, so the validator says so as a note.
    res = presets.resolve("aws-a10g", env={}, sets=["world.gpus_per_node=4"])
    (note,) = [n for n in res.notes if n.where == "loader.num_workers"]
    assert "x 4 processes" in note.message and "the plan runs 3 workers per process" in note.message
    # a single process over the budget is still the user's own setting: an error, as before
    with pytest.raises(UserError, match=r"loader\.num_workers: loader RAM 48 workers"):
        presets.resolve("aws-a10g", env={}, sets=["loader.num_workers=48"])
