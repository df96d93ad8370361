"""Every `# type: ignore[...]` and `# noqa: ...` in src/ names what it silences and says why, on the same line
(issue 40): a bare one hides the next real error of that kind on that line without anyone knowing it was meant."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
# A silencer, then what must follow it on the line: its codes, then the reason after `#` or ` - `.
SILENCER = re.compile(r"#\s*(type:\s*ignore|noqa)\b(.*)$")
WITH_REASON = {
    "type: ignore": re.compile(r"^\[[a-z][a-z, -]*\]\s+#\s*\S"),
    "noqa": re.compile(r"^:\s*[A-Z]+[0-9]+(,\s*[A-Z]+[0-9]+)*\s+(#|-)\s*\S"),
}


def unexplained(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each silencer without its codes and a reason."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        match = SILENCER.search(line)
        if match is None:
            continue
        kind = "noqa" if match.group(1) == "noqa" else "type: ignore"
        if not WITH_REASON[kind].match(match.group(2)):
            out.append((number, line.strip()))
    return out


@pytest.mark.parametrize(("line", "ok"), [
    ("x = f()  # type: ignore[attr-defined]  # torch's stub lacks it", True),
    ("import m  # noqa: F401 - the import is the point", True),
    ("import m  # noqa: F401  # re-exported for cli.py", True),
    ("x = f()  # type: ignore[attr-defined]", False),
    ("x = f()  # type: ignore", False),
    ("import m  # noqa: F401", False),
    ("import m  # noqa", False),
    ("x = 1  # a plain comment", True),
])
def test_the_rule_tells_a_reason_from_none(line: str, ok: bool) -> None:
    assert (unexplained(line) == []) is ok


def test_every_silencer_in_src_says_why() -> None:
    found = [f"{path.relative_to(SRC)}:{number}: {line}" for path in sorted(SRC.rglob("*.py"))
             for number, line in unexplained(path.read_text(encoding="utf-8"))]
    assert not found, "a type: ignore / noqa without its codes and a reason on the same line:\n" + "\n".join(found)
