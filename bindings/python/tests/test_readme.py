"""The README's Python example, as a user would take it: cut from the README and run by
a fresh interpreter with the installed package; it sends itself "hello"."""

import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_example_runs():
    text = README.read_text()
    start = text.index("```python\n") + len("```python\n")
    code = text[start : text.index("```", start)]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "b'hello'" in out.stdout, out.stdout
