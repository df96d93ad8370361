"""The package's shape: folders by concern, layers that import only downward, no cycles, small files.

docs/architecture.md describes the layers; this test keeps that description true. Imports inside
functions count: a lazy import is still a dependency.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "fasttrain"

# Lowest first. A module may import its own folder and any folder earlier in this list, nothing later.
LAYERS = ["core", "hardware", "tuning", "profiles", "plan", "models", "datasets", "telemetry",
          "estimate", "doctor", "train", "bench", "ui", "report", "commands", "api", "cli"]
TOP_LEVEL_ALIASES = {"__main__": "cli", "__init__": "core"}
MAX_LINES = 280
MAX_TOP_LEVEL_ENTRIES = 20
MAX_TRAIN_ENTRIES = 9        # train/ is a third of the package: a reader must find the folder before grepping
MAX_TRAIN_BARE_ANY = 5       # public functions of train/ with a bare `Any` parameter or return


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["fasttrain", *parts])] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The fasttrain module a dotted import name lands in (a name inside a module -> that module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            target = _resolve(name) if name.startswith("fasttrain") else None
            if target and target != module:
                found.add(target)
    # `from fasttrain.x import y` also names the package fasttrain.x; keep only the most specific target.
    return {t for t in found if not any(o.startswith(t + ".") for o in found) or t in _direct_targets(tree)}


def _direct_targets(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "core"
    head = parts[1]
    return TOP_LEVEL_ALIASES.get(head, head)


def test_every_folder_has_a_layer():
    unknown = sorted({_layer(m) for m in MODULES} - set(LAYERS))
    assert not unknown, f"folders with no place in LAYERS: {unknown}"


def test_layers_import_only_downward():
    bad = []
    for module, targets in GRAPH.items():
        mine = LAYERS.index(_layer(module))
        for target in targets:
            theirs = LAYERS.index(_layer(target))
            if theirs > mine:
                bad.append(f"{module} -> {target}")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    # Package faces (__init__) load their members lazily, so an edge into a package is not followed into it.
    graph = {m: {t for t in ts if MODULES[t].name != "__init__.py"} for m, ts in GRAPH.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("path", sorted(MODULES.values()), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_small(path: Path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_LINES})"


MAX_FUNCTION_BODY_LINES = 80


def test_functions_are_short():
    """No function body over 80 lines (the signature does not count, so Typer option lists are free)."""
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body[1:] if ast.get_docstring(node) and len(node.body) > 1 else node.body
                lines = (node.end_lineno or node.lineno) - body[0].lineno + 1  # end_lineno: set by ast.parse
                if lines > MAX_FUNCTION_BODY_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_top_level_is_short():
    entries = [p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= MAX_TOP_LEVEL_ENTRIES, sorted(entries)


def test_every_subpackage_has_a_public_face():
    for folder in PACKAGE.iterdir():
        if folder.is_dir() and any(folder.glob("*.py")):
            init = folder / "__init__.py"
            assert init.exists(), f"{folder.name}/ has no __init__.py"
            text = init.read_text(encoding="utf-8")
            assert ast.get_docstring(ast.parse(text)), f"{folder.name}/__init__.py says nothing"


STANDALONE = re.compile(r"\.\./shared|shared/(?:seeds|DESIGN|reference)")  # written so this line does not match itself


def test_nothing_refers_to_the_steering_folder():
    hits = []
    for top in ("README.md", "CHANGELOG.md", "Makefile", "pyproject.toml", "docs", "src", "tests", "benchmarks",
                "profiles"):
        base = ROOT / top
        paths = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for path in paths:
            if path.suffix in {".pyc", ".pt"} or "egg-info" in str(path):
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if STANDALONE.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}")
    assert not hits, "references to a folder users do not have:\n" + "\n".join(hits)


def test_root_profiles_lists_the_presets():
    names = sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml"))
    assert names == ["aws-a10g", "cpu", "gcp-v100", "kaggle-t4", "laptop-4060"]


FACES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists() and p.name != "commands")


def test_faces_import_without_torch_and_every_name_resolves():
    """Importing a face costs nothing heavy; every name it lists is really there."""
    import subprocess
    import sys
    code = ("import importlib, sys\n"
            f"faces = [importlib.import_module('fasttrain.' + p) for p in {FACES!r}]\n"
            "heavy = sorted(m for m in ('torch', 'timm', 'torchvision') if m in sys.modules)\n"
            "assert not heavy, heavy\n"
            "missing = [f'{f.__name__}.{n}' for f in faces for n in f.__all__ if getattr(f, n, None) is None]\n"
            "assert not missing, missing\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_train_top_is_short():
    entries = [p.name for p in (PACKAGE / "train").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= MAX_TRAIN_ENTRIES, sorted(entries)


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def test_architecture_names_every_module():
    """docs/architecture.md is the map: every module of the package is named there (faces excepted)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = sorted(str(p.relative_to(PACKAGE)) for p in MODULES.values()
                     if p.name != "__init__.py" and str(p.relative_to(PACKAGE)) not in text)
    assert not missing, "modules docs/architecture.md does not name:\n" + "\n".join(missing)


def _bare_any(annotation: ast.expr | None) -> bool:
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or \
        (isinstance(annotation, ast.Attribute) and annotation.attr == "Any") or \
        (isinstance(annotation, ast.Constant) and annotation.value == "Any")


def _public_functions_with_bare_any(folder: Path) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
                continue
            args = node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
            if any(_bare_any(a.annotation) for a in params) or _bare_any(node.returns):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def test_train_seams_are_typed():
    """The seams between train/'s folders name their types (Prepared, Plan, DistContext...), not `Any`."""
    found = _public_functions_with_bare_any(PACKAGE / "train")
    assert len(found) <= MAX_TRAIN_BARE_ANY, "\n".join(found)


# Private names of other libraries the package uses on purpose, each for a reason given where it is used.
FOREIGN_PRIVATE = {"cli.py": {"_run_exitfuncs", "_exit"}, "train/signals/lifecycle.py": {"_exit"},
                   "datasets/loaders.py": {"_new_shared", "_iterator", "_shutdown_workers"},
                   "estimate/cost.py": {"_schema", "_overloadpacket"}, "hardware/machine.py": {"_Environ"},
                   "train/loop/precision.py": {"_found_inf_per_device", "_get_scale_async"},
                   "train/loop/backoff.py": {"_version"},
                   "train/loop/cpu_fused.py": {"_fused_adamw_", "_fused_adam_", "_fused_sgd_", "_foreach_add_",
                                               "_foreach_sub_"},
                   "train/loop/ema.py": {"_foreach_lerp_", "_buffers", "_parameters"},
                   "models/weights.py": {"_reconstruct"}}  # numpy's array rebuild, allowed to torch's safe loader


def test_no_module_reaches_into_private_attributes():
    """`x._name` only on self or cls: no module reads or sets another object's private fields (the few
    private names of torch and the standard library the package relies on are listed above, with reasons in
    their modules)."""
    bad = []
    for path in MODULES.values():
        rel = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                if node.attr not in FOREIGN_PRIVATE.get(rel, set()):
                    bad.append(f"{rel}:{node.lineno} .{node.attr} on {ast.unparse(node.value)[:40]}")
    assert not bad, "\n".join(bad)
