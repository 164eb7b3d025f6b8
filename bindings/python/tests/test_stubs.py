"""The type stubs (`_hamlyn.pyi`) name what the extension has, no more and no less."""

import ast
from pathlib import Path

import hamlyn
from hamlyn import _hamlyn

STUB = Path(hamlyn.__file__).with_name("_hamlyn.pyi")
# In C: shown at run time only from Python 3.12, declared for type checkers.
BUFFER_PROTOCOL = {"__buffer__", "__release_buffer__"}


def stub_classes():
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {
                n.name for n in node.body if isinstance(n, ast.FunctionDef)
            }
    return out


def test_the_stubs_are_installed_with_py_typed():
    assert STUB.is_file()
    assert STUB.with_name("py.typed").is_file()


def test_every_class_and_method_of_the_extension_is_in_the_stubs_and_back():
    stubs = stub_classes()
    runtime = {n for n in _hamlyn.__all__ if isinstance(getattr(_hamlyn, n), type)}
    assert set(stubs) == runtime
    for name, methods in stubs.items():
        cls = getattr(_hamlyn, name)
        public = {m for m in vars(cls) if not m.startswith("_")}
        dunder_in_stub = {m for m in methods if m.startswith("__")}
        assert public == {m for m in methods if not m.startswith("_")}, name
        missing = {m for m in dunder_in_stub - BUFFER_PROTOCOL if not hasattr(cls, m)}
        assert not missing, (name, missing)
