"""What this machine measured before, as the display and the final verdict read it: the tuning trials' and
`bench speedups`' measurements (the verdict's advice), and the input gain `bench loader` measured on this data
folder (the input-bound verdict)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.train.types import Prepared

if TYPE_CHECKING:
    from fasttrain.tuning.store import Measurement


def measured_here(prep: Prepared) -> tuple[Measurement, ...]:
    """What was measured on this machine with this torch and model (tuning trials, bench speedups)."""
    from fasttrain.tuning.store import load_cache, machine_id, machine_measurements
    try:
        entries = load_cache()
    except Exception:
        return ()
    return tuple(machine_measurements(entries, machine_id(prep.report), prep.report.torch.version, prep.model_name))


def input_gain(prep: Prepared) -> str | None:
    """For the input-bound verdict: "" on prepared shards, else the factor `bench loader` measured on this
    folder (or that it is unmeasured); None for other data."""
    from fasttrain.datasets.measured import find_path_gains, gain_sentence
    from fasttrain.datasets.shards import ShardImages

    if prep.bundle.kind != "images":
        return None
    if isinstance(prep.bundle.train, ShardImages):
        return ""
    source = prep.bundle.source
    gains = find_path_gains(source, Path(prep.args.runs_dir)) or find_path_gains(source)  # bench's default runs/
    return gain_sentence(gains, source)
