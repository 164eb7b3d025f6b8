"""The README's Python examples, as a user would take them: each cut from the README and
run by a fresh interpreter with the installed package, and what it prints checked."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"
#: What each ```python block of the README prints (a part of it), in order.
EXPECTED = [
    "b'hello'",  # the interface level: a message sent to itself
    "5 b'medium message' 0",  # a receive endpoint in a group
    "(42, 0, 0, 0)",  # an active message to a Python handler, by name
    "[b'hello, 0', b'hello, 1', b'hello, 2']",  # RPC to a Python procedure, by name
    "42 b'tagged'",  # a Rats tagged write
]


def blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_the_examples_this_test_expects():
    assert len(blocks()) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_the_readme_example_runs(index):
    code = blocks()[index]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert EXPECTED[index] in out.stdout, out.stdout
