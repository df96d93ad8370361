"""Profiles: what the user asks for, validated, merged and explained.

The Pydantic schema of a profile, the shipped presets (profiles/builtin/*.yaml), resolution with
`extends:`, FASTTRAIN_* variables and --set (every value remembers where it came from), the
cross-field rules, which preset fits a machine and the settings recommended for it, the profile
writer, and the tables `profiles list/show` print.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "Profile": "schema",
    "HardwareSpec": "schema",
    "LoaderSpec": "schema",
    "SpeedSpec": "schema",
    "OptimSpec": "schema",
    "AugmentSpec": "schema",
    "WorldSpec": "schema",
    "Resolved": "presets",
    "preset_names": "files",
    "preset_path": "files",
    "resolve": "presets",
    "resolve_file_only": "presets",
    "parse_set": "presets",
    "check_cross_fields": "rules",
    "Recommendation": "recommend",
    "best_preset": "recommend",
    "write_profile": "writer",
})
