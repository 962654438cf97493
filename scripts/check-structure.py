#!/usr/bin/env python3
"""Fails when the code's shape breaks the limits that keep it changeable (docs/architecture.md,
"Rooms of the worker"):

  - an include cycle between units: a unit is a .cc with its .h (pooler/pool/pool.cc and pool.h);
    unit A depends on unit B when A's .h or .cc includes B's header. A cycle means a newcomer
    cannot change one without holding the others in mind. Checked in pooler/, peering/ and cmd/.
  - a .cc file over 650 lines;
  - a folder over 5,000 lines of .cc and .h.

  scripts/check-structure.py                 # the repository
  scripts/check-structure.py --source DIR    # another tree (tests/layering plants violations)

Exit status: 0 clean, 1 violations (each named).
"""

import argparse
import os
import re
import sys

ROOTS = ("pooler", "peering", "cmd")
MAX_CC_LINES = 650
MAX_FOLDER_LINES = 5000
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)\.h"', re.MULTILINE)


def units_and_edges(source):
    units = set()
    edges = {}
    folder_lines = {}
    long_files = []
    for root in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(source, root)):
            for name in files:
                if not name.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, source)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                lines = text.count("\n")
                folder = os.path.dirname(rel)
                folder_lines[folder] = folder_lines.get(folder, 0) + lines
                if name.endswith(".cc") and lines > MAX_CC_LINES:
                    long_files.append((rel, lines))
                unit = rel.rsplit(".", 1)[0]
                units.add(unit)
                for target in INCLUDE_RE.findall(text):
                    if target != unit:
                        edges.setdefault(unit, set()).add(target)
    return units, edges, folder_lines, long_files


def cycles(units, edges):
    """Strongly connected components of more than one unit (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(units):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in units:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", default=os.path.join(os.path.dirname(__file__), ".."))
    args = parser.parse_args()
    units, edges, folder_lines, long_files = units_and_edges(os.path.abspath(args.source))
    problems = []
    for component in cycles(units, edges):
        problems.append("include cycle between units: " + " -> ".join(component))
    for rel, lines in sorted(long_files):
        problems.append(f"{rel}: {lines} lines, over {MAX_CC_LINES}: split it along a seam")
    for folder, lines in sorted(folder_lines.items()):
        if lines > MAX_FOLDER_LINES:
            problems.append(f"{folder}/: {lines} lines, over {MAX_FOLDER_LINES}: make it two rooms")
    for problem in problems:
        print(f"check-structure: {problem}")
    if problems:
        print(f"check-structure: {len(problems)} problem(s)")
        return 1
    print(f"check-structure: {len(units)} units, no include cycle, no .cc over {MAX_CC_LINES} "
          f"lines, no folder over {MAX_FOLDER_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
