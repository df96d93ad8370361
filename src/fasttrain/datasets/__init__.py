"""Data: turn a `--data` spec into datasets and loaders.

The built-in shapes set, synthetic tensors, image folders (train/val or one tree split by a seed),
`module:callable` datasets, the transforms, the epoch sampler that makes resume exact, and the
DataLoaders built from the plan. Unreadable files are recorded in the bundle, not fatal.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "build_datasets": "build",
    "SyntheticBatches": "build",
    "DataBundle": "bundle",
    "BadSample": "bundle",
    "BadFiles": "bundle",
    "build_loaders": "loaders",
    "EpochSampler": "sampler",
    "ShapesSpec": "shapes",
    "ensure_shapes": "shapes",
    "train_transform": "transforms",
    "val_transform": "transforms",
    "find_splits": "image_folder",
})
