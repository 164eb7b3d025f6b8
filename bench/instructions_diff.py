#!/usr/bin/env python3
"""Prints two instruction-count files (bench/instructions.sh's JSON) side by side: every
number in either, by its path in the document, with the change. No threshold: CI prints
it so that a change's effect on each path shows without timing noise.

Usage: instructions_diff.py COMMITTED.json NEW.json
"""

import json
import sys


def numbers(doc, prefix=""):
    """{dotted path: number} for every int or float in the document."""
    out = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(numbers(v, f"{prefix}{k}."))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out[prefix[:-1]] = doc
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        old = numbers(json.load(f))
    with open(sys.argv[2], encoding="utf-8") as f:
        new = numbers(json.load(f))
    print(f"{'instructions per message':<72}{'committed':>10}{'this run':>10}{'change':>9}")
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        change = ""
        if a and b is not None:
            change = f"{(b - a) / a * 100:+.1f}%"
        fa = "—" if a is None else f"{a:g}"
        fb = "—" if b is None else f"{b:g}"
        print(f"{key:<72}{fa:>10}{fb:>10}{change:>9}")


if __name__ == "__main__":
    main()
