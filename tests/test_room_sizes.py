"""No room over 450 lines (issue 25): a file that grows past it is split along its seams
before it lands, not found by the next reader."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 450
ROOMS = ("fleet", "inference", "tests", "static/js", "templates")
SUFFIXES = {".py", ".js", ".html"}


def test_no_file_over_450_lines():
    over = {}
    for room in ROOMS:
        for path in (REPO / room).rglob("*"):
            if path.suffix in SUFFIXES and path.is_file() and "vendor" not in path.parts:
                lines = len(path.read_text(encoding="utf-8").splitlines())
                if lines > LIMIT:
                    over[str(path.relative_to(REPO))] = lines
    assert not over, f"files over {LIMIT} lines (split them along their seams): {over}"
