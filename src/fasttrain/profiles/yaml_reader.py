"""Read YAML text as a profile, with bounds on the work a hostile file can cause.

A profile is a few dozen keys, three levels deep, a few KiB. This reader refuses deeper nesting, more
values (aliases expanded, so a billion-laughs file stops early) and unreadable scalars, each as one
UserError line with the line and column, instead of a RecursionError or minutes of work.
"""
from __future__ import annotations

from typing import Any

import yaml

from fasttrain.core.errors import Problem, UserError, clip

# Bounds on the work one profile may cause.
MAX_PROFILE_BYTES = 2**20          # 1 MiB read at most from a profile file
MAX_YAML_DEPTH = 32                # nesting of mappings/lists, aliases expanded
MAX_YAML_NODES = 10_000            # values, aliases expanded (a billion-laughs file stops here)


class _ProfileLoader(yaml.SafeLoader):
    """SafeLoader with bounded work: nesting depth while composing (the stock composer recurses, so 100k
    '[' raised RecursionError), and the size and depth of the tree once aliases are expanded (an alias
    bomb of a few hundred bytes expands to billions of values)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:  # int or a key node
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > MAX_YAML_DEPTH or self._nodes > MAX_YAML_NODES:
                what = (f"nested deeper than {MAX_YAML_DEPTH} levels" if self._depth > MAX_YAML_DEPTH
                        else f"more than {MAX_YAML_NODES:,} values")
                raise yaml.composer.ComposerError(None, None, what, self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # date 2024-13-45 (ValueError), a 10,000-digit int, '!!int' alone (IndexError)
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value ({clip(str(exc), 80)})", node.start_mark) from None


def _check_tree(root: yaml.Node) -> None:
    """Refuse a composed document whose alias-expanded tree is too big, too deep, or contains itself."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth), aliases share entries
    active: set[int] = set()

    def visit(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise yaml.composer.ComposerError(None, None, "an alias refers to its own anchor", node.start_mark)
        active.add(key)
        count, depth = 1, 1
        if isinstance(node, yaml.MappingNode):
            children = [c for pair in node.value for c in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        for child in children:
            c_count, c_depth = visit(child)
            count += c_count
            depth = max(depth, c_depth + 1)
            if count > MAX_YAML_NODES or depth > MAX_YAML_DEPTH:
                what = (f"more than {MAX_YAML_NODES:,} values" if count > MAX_YAML_NODES
                        else f"nested deeper than {MAX_YAML_DEPTH} levels")
                raise yaml.composer.ComposerError(None, None, f"{what} once aliases are expanded", node.start_mark)
        active.discard(key)
        sizes[key] = (count, depth)
        return sizes[key]

    visit(root)


def _yaml_error(exc: yaml.YAMLError, where: str, text: str = "") -> Problem:
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: position is an offset in the text
        pos = exc.position
        line, col = text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character or "\0")
        return Problem(f"{where}:{line}:{col}", f"broken YAML: control character #x{char:04x} is not allowed",
                       "remove it, or write it as an escape inside double quotes, e.g. \"\\t\"")
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        if mark:
            where = f"{where}:{mark.line + 1}:{mark.column + 1}"
        return Problem(where, f"broken YAML: {exc.problem or exc.context}", "fix the syntax at that line and column")
    return Problem(where, f"broken YAML: {clip(str(exc), 120)}")


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> Python data, with bounded work, or a UserError naming `where` (line:column when known)."""
    try:
        loader = _ProfileLoader(text)  # the reader refuses control characters here
    except yaml.YAMLError as exc:
        raise UserError([_yaml_error(exc, where, text)]) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_tree(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise UserError([_yaml_error(exc, where, text)]) from None
    except Exception as exc:  # a constructor generator's late failure: PyYAML's own bugs on odd input
        raise UserError([Problem(where, f"broken YAML: cannot read a value ({clip(str(exc), 80)})")]) from None
    finally:
        loader.dispose()
