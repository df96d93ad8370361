"""The Profile: what a user asks for, as Pydantic models with extra="forbid".

Field-level rules live here (types, ranges, known names). Rules that relate several fields
(RAM budget, bf16 on the target GPU, workers vs prefetch) live in rules.py so that
all problems of a file are reported in one go. Derived values (effective batch, scaled LR,
loader RAM, iterations) are properties that call arithmetic.py, so they are computed in one place.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from fasttrain.core import arithmetic as ar

Precision = Literal["fp32", "fp16-mixed", "bf16-mixed"]
Optimizer = Literal["sgd", "adamw", "adam"]
Schedule = Literal["cosine", "step", "plateau", "constant"]
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"          # one line, no control characters (NUL, ESC, ...)
_PRINTABLE_TEXT = r"^[^\x00-\x08\x0b-\x1f\x7f]*$"  # newlines and tabs allowed


class _Section(BaseModel):
    # Every float must be finite (.inf / .nan are refused), and every number has an upper bound far above any
    # real machine or run: a bound is what keeps 10**4000 or 1e308 out of the arithmetic (int(inf) raises).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class HardwareSpec(_Section):
    """The machine a profile targets. Numbers come from the field note the preset cites."""

    gpu: str | None = Field(None, min_length=1, max_length=100, pattern=_PRINTABLE,
                            description="GPU name as in the GPU spec file; null for a CPU-only machine")
    vram_gb: float | None = Field(None, gt=0, le=1024, description="GPU memory per device, GiB")
    compute_capability: str | None = Field(None, pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$", description="e.g. '8.6'")
    bf16: bool | None = Field(None, description="bf16 tensor cores; null = derive from compute capability (>= 8.0)")
    host_ram_gb: float = Field(16, gt=0, le=65536, description="host RAM, GiB")
    cpu_cores: int = Field(4, gt=0, le=16384, description="logical cores")
    ram_budget_fraction: float = Field(
        0.5, gt=0, le=1, description="share of host RAM the data loaders may hold (the rest: OS, model, framework)")
    price_on_demand_per_hour: float | None = Field(None, ge=0, le=10000, description="USD per hour")
    price_spot_per_hour: float | None = Field(None, ge=0, le=10000, description="USD per hour, preemptible/spot")

    @property
    def supports_bf16(self) -> bool:
        if self.bf16 is not None:
            return self.bf16
        if self.compute_capability is None:
            return False
        return float(self.compute_capability) >= 8.0


class LoaderSpec(_Section):
    batch_size: int = Field(32, gt=0, le=2**20, description="per-device batch")
    num_workers: int = Field(2, ge=0, le=1024, description="DataLoader worker processes per device")
    prefetch_factor: int | None = Field(None, gt=0, le=1024,
                                        description="batches each worker keeps ready; needs workers > 0")
    pin_memory: bool = True
    persistent_workers: bool = False
    drop_last: bool = True
    image_size: int = Field(224, gt=0, le=16384, description="training crop, pixels")
    decode_once: bool = Field(True, description="CPU runs: an image folder whose decoded pixels fit a quarter of "
                              "the loader RAM budget is decoded once into RAM and augmented a batch at a time, "
                              "with no loader workers (crop and flip augmentation only)")
    batch_overhead: float = Field(
        1.5625, ge=1, le=100, description="host bytes per decoded batch over the raw tensor (A10G note: 147 -> 230 MB)")


class SpeedSpec(_Section):
    precision: Precision = "fp32"
    channels_last: bool = False
    compile: bool = False
    compile_mode: CompileMode = "default"
    tf32: bool = False
    cudnn_benchmark: bool = False
    activation_checkpointing: bool = False
    fused_optimizer: bool = True
    follow_free_cores: bool = Field(True, description="on the CPU, use fewer compute threads while other processes "
                                    "take cores and take them back when they stop (false: keep the plan's threads)")


class OptimSpec(_Section):
    optimizer: Optimizer = "sgd"
    base_lr: float = Field(0.1, gt=0, le=100, description="learning rate tuned for base_batch")
    base_batch: int = Field(256, gt=0, le=2**24, description="the total batch base_lr was tuned for")
    weight_decay: float = Field(0.0, ge=0, le=1)
    momentum: float = Field(0.9, ge=0, lt=1)
    accumulation_steps: int = Field(1, gt=0, le=65536)
    clip_grad_norm: float | None = Field(None, gt=0, le=1e6)
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    mixup_alpha: float = Field(0.0, ge=0, le=100)
    cutmix_alpha: float = Field(0.0, ge=0, le=100)
    warmup_epochs: float = Field(0.0, ge=0, le=100_000)
    schedule: Schedule = "cosine"
    step_epochs: int = Field(30, gt=0, le=100_000, description="step schedule: epochs between LR drops")
    step_gamma: float = Field(0.1, gt=0, le=1)
    plateau_patience: int = Field(3, ge=0, le=100_000)
    epochs: int = Field(10, gt=0, le=100_000)
    early_stopping_patience: int | None = Field(None, gt=0, le=100_000, description="epochs without val improvement")
    ema_decay: float | None = Field(None, gt=0, lt=1, description="validate an exponential moving average of the "
                                    "weights (with ModelEmaV3's warm-up); null: the weights as trained")
    precise_bn_images: int = Field(256, ge=0, le=1_000_000, description="before each validation, re-estimate "
                                   "the batch-norm statistics of the validated weights on the epoch's last this "
                                   "many training images (0: validate with the running statistics)")
    finetune_lr_scale: float = Field(0.33, gt=0, le=1, description="a run that starts from weights (--weights, "
                                     "--pretrained) trains at this share of base_lr (measured: docs/benchmarks.md "
                                     "'Fine-tuning'); 1: the LR of a run from scratch")


class AugmentSpec(_Section):
    random_resized_crop_scale: tuple[float, float] = Field(
        (0.08, 1.0), description="[min, max] share of the image area a random crop keeps, 0 < min <= max <= 1")
    hflip: float = Field(0.5, ge=0, le=1, description="probability")
    test_flip: bool = Field(False, description="validate on each image and its mirror image, logits averaged (only "
                            "where flips are on: a mirror image is then an image of the same class)")
    color_jitter: float = Field(0.0, ge=0, le=10, description="strength for brightness/contrast/saturation")
    rotation_degrees: float = Field(0.0, ge=0, le=180)
    translate: float = Field(0.0, ge=0, lt=1, description="fraction of the image")
    random_erasing: float = Field(0.0, ge=0, le=1, description="probability")
    val_crop_pct: float = Field(0.875, gt=0, le=1, description="validation and prediction resize to image_size / "
                                "val_crop_pct and centre-crop image_size (timm's 0.875); 1.0: the whole image (what "
                                "the augment check picks for images of at most 64 px)")

    @property
    def validates_mirrored(self) -> bool:
        """Validation (and the model files' predictions) average each image with its mirror image: asked for
        (test_flip) and valid for this data (flips on: a mirror image shows the same class; the flip check turns
        flips off for handed data)."""
        return self.test_flip and self.hflip > 0

    @field_validator("random_resized_crop_scale")
    @classmethod
    def _crop_scale_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        fix = "give [min, max] with 0 < min <= max <= 1, e.g. [0.08, 1.0]"
        if not (0 < low <= 1 and 0 < high <= 1):
            raise PydanticCustomError("bad_range", "both ends must be in (0, 1]: they are shares of the image area",
                                      {"fix": fix})
        if low > high:
            raise PydanticCustomError("bad_range", "min is above max", {"fix": fix})
        return value


class WorldSpec(_Section):
    nodes: int = Field(1, gt=0, le=4096)
    gpus_per_node: int = Field(1, gt=0, le=1024)  # processes per machine: GPUs, or CPU processes


class DataSpec(_Section):
    """A labels table (`--data train.csv`, a DataFrame from Python): which columns and folder; null = detect."""

    image_column: str | None = Field(None, min_length=1, max_length=200, pattern=_PRINTABLE,
                                     description="labels table: the column of image ids or paths; null = found by "
                                     "its name (id, image, file, path...) or by values that name image files")
    label_column: str | None = Field(None, min_length=1, max_length=200, pattern=_PRINTABLE,
                                     description="labels table: the column of class names or indices; null = found "
                                     "by its name (label, class, target...) or by few distinct values")
    images_dir: str | None = Field(None, min_length=1, max_length=4096, pattern=_PRINTABLE,
                                   description="labels table: the folder of its images, relative to the table (a "
                                   "DataFrame: the current folder) or absolute; null = train_images/, train/, "
                                   "images/, img/ beside it, or its own folder")


class CheckpointSpec(_Section):
    """What a run keeps on disk besides its model files (train/state/checkpoint.py)."""

    save_last: bool = Field(True, description="write last.pt (the weights, the optimizer's state, everything a "
                            "resume needs); false: a short run keeps only its model files and cannot be resumed "
                            "(--no-last)")


class Profile(_Section):
    """A whole preset or user file after `extends` and overrides are applied."""

    name: str = Field("custom", min_length=1, max_length=100, pattern=_PRINTABLE)
    description: str = Field("", max_length=2000, pattern=_PRINTABLE_TEXT)
    extends: str | None = Field(None, min_length=1, max_length=1024, pattern=_PRINTABLE)
    hardware: HardwareSpec = HardwareSpec()
    loader: LoaderSpec = LoaderSpec()
    speed: SpeedSpec = SpeedSpec()
    optim: OptimSpec = OptimSpec()
    augment: AugmentSpec = AugmentSpec()
    world: WorldSpec = WorldSpec()
    data: DataSpec = DataSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()

    # Derived values: one place, each through arithmetic.py.
    @property
    def world_size(self) -> int:
        return ar.world_size(self.world.nodes, self.world.gpus_per_node)

    @property
    def effective_batch(self) -> int:
        return ar.effective_batch(self.loader.batch_size, self.optim.accumulation_steps, self.world_size)

    @property
    def scaled_lr(self) -> float:
        return ar.scaled_lr(self.optim.base_lr, self.optim.base_batch, self.effective_batch)

    @property
    def batch_bytes(self) -> int:
        return ar.batch_bytes(self.loader.batch_size, self.loader.image_size, overhead=self.loader.batch_overhead)

    @property
    def loader_ram_bytes(self) -> int:
        """Per machine: every process on the node runs its own loader."""
        return ar.loader_ram_bytes(self.loader.num_workers, self.loader.prefetch_factor, self.batch_bytes,
                                   self.world.gpus_per_node)

    @property
    def ram_budget_bytes(self) -> int:
        return ar.ram_budget_bytes(self.hardware.host_ram_gb, self.hardware.ram_budget_fraction)

    def iterations_per_epoch(self, dataset_size: int) -> int:
        return ar.iterations_per_epoch(dataset_size, self.loader.batch_size, self.world_size, self.loader.drop_last)

    def derived(self, dataset_size: int | None = None) -> dict[str, object]:
        """Every derived value, with stable keys for --json."""
        out: dict[str, object] = {
            "world_size": self.world_size,
            "effective_batch": self.effective_batch,
            "scaled_lr": self.scaled_lr,
            "batch_bytes": self.batch_bytes,
            "loader_ram_bytes": self.loader_ram_bytes,
            "ram_budget_bytes": self.ram_budget_bytes,
            "total_workers": self.loader.num_workers * self.world_size,
            "bf16_supported": self.hardware.supports_bf16,
        }
        if dataset_size is not None:
            out["dataset_size"] = dataset_size
            iterations = self.iterations_per_epoch(dataset_size)
            out["iterations_per_epoch"] = iterations
            out["optimizer_steps_per_epoch"] = ar.optimizer_steps_per_epoch(iterations, self.optim.accumulation_steps)
        return out


SECTIONS: dict[str, type[BaseModel]] = {
    "hardware": HardwareSpec, "loader": LoaderSpec, "speed": SpeedSpec,
    "optim": OptimSpec, "augment": AugmentSpec, "world": WorldSpec,
    "data": DataSpec, "checkpoint": CheckpointSpec,
}
TOP_LEVEL_KEYS: tuple[str, ...] = tuple(Profile.model_fields)


def known_keys(section: str | None) -> list[str]:
    """Field names valid at a point in the file, for did-you-mean."""
    if section is None:
        return list(TOP_LEVEL_KEYS)
    model = SECTIONS.get(section)
    return list(model.model_fields) if model else []


def all_dotted_keys() -> list[str]:
    keys = [k for k in TOP_LEVEL_KEYS if k not in SECTIONS]
    for sec, model in SECTIONS.items():
        keys += [f"{sec}.{f}" for f in model.model_fields]
    return keys
