"""Models: build one by name and get it ready for the plan.

timm and torchvision models by name, the built-in tiny nets, `module:callable` builders, and the
preparation a plan asks for (device, channels_last, compile with an eager fallback, CPU threads, the
CPU allocator setting). Importing this face does not import torch; using a member does.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "create_model": "registry",
    "load_callable": "registry",
    "builtin_models": "registry",
    "prepare_model": "setup",
    "configure_backends": "setup",
    "CompileGuard": "setup",
    "tiny_cnn": "tiny",
    "keep_freed_memory": "cpu_allocator",
})
