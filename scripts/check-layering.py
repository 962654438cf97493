#!/usr/bin/env python3
"""Fails when a file includes a header of a library that its CMake target does not link.

Every include is written from the repo root ("pooler/pool/pool.h") and the root is on every
target's include path, so the compiler accepts any header anywhere; this check is what keeps the
layers. It asks CMake itself for the graph (no parsing of CMakeLists.txt): it configures the tree
into a scratch directory with the File API codemodel (each target's sources) and --graphviz (each
target's target_link_libraries, with PUBLIC / PRIVATE / INTERFACE), then reads every source file's
#include "..." lines.

A header belongs to
  1. the library that lists it among its sources (header-only INTERFACE libraries do this), else
  2. the library that compiles the .cc of the same name next to it, else
  3. the library that compiles the .cc files of its folder; where several do, the one that the
     others link (peering/: pgfleet_peering, not pgfleet_worker_fleet); otherwise the header must
     be listed in a target's sources.
A header in a folder that holds no library (a test's helper) belongs to no library and may only
be included from its own folder.

A target may include the headers of itself, of what it links directly (any visibility), and of
what those link PUBLIC or INTERFACE, recursively: what a per-target include path would allow.
Files are checked against the target that compiles them; a library's header-only headers against
the library. Generated headers (the protobuf code in proto/) belong to the target that compiles
their .cc.

Links that are allowed by CMake but not by the design are listed in <source>/scripts/
layering-rules.txt ("target  library  why": the target must not link the library, directly or
through anything it links); a rule naming a target that does not exist is an error too, so a
rename cannot switch a rule off.

  scripts/check-layering.py                      # configures into a temporary directory
  scripts/check-layering.py --source DIR         # another tree (tests/layering plants violations)
  scripts/check-layering.py --build DIR          # reuse/keep this scratch build directory
  scripts/check-layering.py --rules FILE         # other rules (default scripts/layering-rules.txt)

Exit status: 0 clean, 1 violations (each named with file, line, header and the missing link),
2 when CMake could not be run or read.
"""

import argparse
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

LIBRARY_TYPES = {"STATIC_LIBRARY", "SHARED_LIBRARY", "OBJECT_LIBRARY", "MODULE_LIBRARY",
                 "INTERFACE_LIBRARY"}
CHECKED_TYPES = LIBRARY_TYPES | {"EXECUTABLE"}
SOURCE_EXTS = (".cc", ".cpp", ".cxx", ".c")
HEADER_EXTS = (".h", ".hh", ".hpp", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')
NODE_RE = re.compile(r'^\s*"(node\d+)"\s*\[\s*label\s*=\s*"([^"]*)"')
EDGE_RE = re.compile(r'^\s*"(node\d+)"\s*->\s*"(node\d+)"\s*(?:\[\s*style\s*=\s*(\w+)\s*\])?')
# cmake --graphviz draws target_link_libraries edges: PUBLIC solid, INTERFACE dashed, PRIVATE
# dotted.
PROPAGATING_STYLES = {None, "solid", "dashed"}


class ConfigureError(Exception):
  pass


def configure(source, build, cmake_args):
  query = os.path.join(build, ".cmake", "api", "v1", "query")
  os.makedirs(query, exist_ok=True)
  open(os.path.join(query, "codemodel-v2"), "w").close()
  # Only the whole graph; no per-target files.
  with open(os.path.join(build, "CMakeGraphVizOptions.cmake"), "w") as f:
    f.write("set(GRAPHVIZ_GENERATE_PER_TARGET FALSE)\nset(GRAPHVIZ_GENERATE_DEPENDERS FALSE)\n")
  dot = os.path.join(build, "layering", "targets.dot")
  os.makedirs(os.path.dirname(dot), exist_ok=True)
  cmd = ["cmake", "-S", source, "-B", build, f"--graphviz={dot}"]
  if shutil.which("ninja") and not os.path.exists(os.path.join(build, "CMakeCache.txt")):
    cmd += ["-G", "Ninja"]
  cmd += cmake_args
  proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  if proc.returncode != 0:
    raise ConfigureError("cmake failed:\n" + proc.stdout)
  return dot


def read_codemodel(build):
  reply = os.path.join(build, ".cmake", "api", "v1", "reply")
  indexes = sorted(glob.glob(os.path.join(reply, "index-*.json")))
  if not indexes:
    raise ConfigureError(f"no CMake File API reply in {reply}")
  with open(indexes[-1]) as f:
    index = json.load(f)
  codemodel_file = None
  for obj in index.get("objects", []):
    if obj.get("kind") == "codemodel":
      codemodel_file = obj["jsonFile"]
  if codemodel_file is None:
    raise ConfigureError("the File API reply has no codemodel")
  with open(os.path.join(reply, codemodel_file)) as f:
    codemodel = json.load(f)
  targets = {}
  for ref in codemodel["configurations"][0]["targets"]:
    with open(os.path.join(reply, ref["jsonFile"])) as f:
      targets[ref["name"]] = json.load(f)
  return codemodel["paths"]["source"], codemodel["paths"]["build"], targets


def read_graph(dot):
  """Returns {target: [(dependency, propagates)]} from cmake --graphviz output."""
  names = {}
  edges = {}
  with open(dot) as f:
    for line in f:
      m = NODE_RE.match(line)
      if m:
        names[m.group(1)] = m.group(2)
        continue
      m = EDGE_RE.match(line)
      if m and m.group(1) in names and m.group(2) in names:
        edges.setdefault(names[m.group(1)], []).append(
            (names[m.group(2)], m.group(3) in PROPAGATING_STYLES))
  return edges


class Layering:
  def __init__(self, source_root, build_root, targets, edges):
    self.root = os.path.realpath(source_root)
    self.build_root = os.path.realpath(build_root)
    self.targets = {n: t for n, t in targets.items() if t["type"] in CHECKED_TYPES}
    self.libraries = {n for n, t in self.targets.items() if t["type"] in LIBRARY_TYPES}
    self.edges = edges
    self._usage = {}
    self.allowed = {n: self._allowed(n) for n in self.targets}
    # Repo files (relative to the root) -> targets that list them among their sources.
    self.sources_of = {}
    # Include spelling of a generated header -> the target that compiles it.
    self.generated = {}
    for name, target in self.targets.items():
      target_build = os.path.join(build_root, target["paths"]["build"])
      for src in target.get("sources", []):
        path = src["path"]
        if src.get("isGenerated") or os.path.isabs(path):
          full = path if os.path.isabs(path) else os.path.join(build_root, path)
          rel = os.path.relpath(full, target_build)
          stem, ext = os.path.splitext(rel)
          if ext in SOURCE_EXTS:
            self.generated[stem + ".h"] = name
          elif ext in HEADER_EXTS:
            self.generated[rel] = name
          continue
        self.sources_of.setdefault(os.path.normpath(path), []).append(name)
    # Folder -> libraries that compile a .cc there.
    self.compiling_libraries = {}
    for path, names in self.sources_of.items():
      if path.endswith(SOURCE_EXTS):
        for name in names:
          if name in self.libraries:
            self.compiling_libraries.setdefault(os.path.dirname(path), set()).add(name)
    self._owners = {}
    # Header-only headers given to the lowest of several libraries in their folder.
    self.given_to_lowest = set()

  def _usage_closure(self, name):
    """`name` and what it links PUBLIC/INTERFACE, recursively."""
    if name in self._usage:
      return self._usage[name]
    self._usage[name] = {name}  # cycles (static libraries may have them) end here
    result = {name}
    for dep, propagates in self.edges.get(name, []):
      if propagates:
        result |= self._usage_closure(dep)
    self._usage[name] = result
    return result

  def _allowed(self, name):
    result = {name}
    for dep, _ in self.edges.get(name, []):
      result |= self._usage_closure(dep)
    return result

  def links(self, name):
    """Everything `name` links, directly or not, whatever the visibility."""
    reach = set()
    todo = [name]
    while todo:
      current = todo.pop()
      for dep, _ in self.edges.get(current, []):
        if dep not in reach:
          reach.add(dep)
          todo.append(dep)
    return reach

  def check_rules(self, rules):
    problems = []
    for where, target, forbidden, why in rules:
      if target not in self.targets:
        problems.append(f"{where}: layering rule names target {target}, which does not exist")
        continue
      for dep in sorted(self.links(target)):
        if fnmatch.fnmatchcase(dep, forbidden):
          problems.append(f"{where}: target {target} links {dep} (directly or through what it "
                          f"links), which the layering forbids: {why}")
    return problems

  def owners(self, header):
    """(libraries owning a repo header, problem) for a path relative to the root."""
    if header in self._owners:
      return self._owners[header]
    result = (set(), None)
    listed = {n for n in self.sources_of.get(header, []) if n in self.libraries}
    if listed:
      result = (listed, None)
    else:
      stem = os.path.splitext(header)[0]
      compiled = set()
      for ext in SOURCE_EXTS:
        compiled |= {n for n in self.sources_of.get(stem + ext, []) if n in self.libraries}
      if compiled:
        result = (compiled, None)
      else:
        folder = self.compiling_libraries.get(os.path.dirname(header), set())
        if len(folder) == 1:
          result = (set(folder), None)
        elif folder:
          lowest = [n for n in sorted(folder) if all(
              n in self.links(other) for other in folder if other != n)]
          if len(lowest) == 1:
            result = ({lowest[0]}, None)
            self.given_to_lowest.add(header)
          else:
            result = (set(folder), "its folder holds several libraries (%s) and none is linked "
                      "by the others: list it in one target's sources" % ", ".join(sorted(folder)))
    self._owners[header] = result
    return result

  def resolve(self, including, spelling, quoted=True):
    """('repo', path) | ('generated', target) | None for an #include "spelling" (or <spelling>:
    a repo header included with angle brackets is checked the same)."""
    if spelling in self.generated:
      return ("generated", self.generated[spelling])
    candidates = [spelling]
    if quoted:
      candidates.append(os.path.join(os.path.dirname(including), spelling))
    for candidate in candidates:
      path = os.path.normpath(candidate)
      if not path.startswith("..") and os.path.isfile(os.path.join(self.root, path)):
        return ("repo", path)
    return None

  def files_to_check(self):
    """Yields (repo path, target) pairs."""
    seen = set()
    folders = set()
    for path, names in sorted(self.sources_of.items()):
      folders.add(os.path.dirname(path))
      for name in names:
        seen.add((path, name))
        yield path, name
    for folder in sorted(folders):
      full = os.path.join(self.root, folder)
      for entry in sorted(os.listdir(full)):
        path = os.path.normpath(os.path.join(folder, entry))
        if not entry.endswith(HEADER_EXTS) or not os.path.isfile(os.path.join(self.root, path)):
          continue
        owners, _ = self.owners(path)
        checkers = owners or {n for p, names in self.sources_of.items()
                              if os.path.dirname(p) == folder for n in names}
        for name in sorted(checkers):
          if (path, name) not in seen:
            seen.add((path, name))
            yield path, name

  def check(self):
    problems = []
    for path, target in self.files_to_check():
      try:
        with open(os.path.join(self.root, path), errors="replace") as f:
          lines = f.readlines()
      except OSError as e:
        problems.append(f"{path}: cannot read ({e})")
        continue
      for number, line in enumerate(lines, 1):
        m = INCLUDE_RE.match(line)
        if not m:
          continue
        spelling = m.group(1) or m.group(2)
        resolved = self.resolve(path, spelling, quoted=m.group(1) is not None)
        if resolved is None:
          continue
        kind, value = resolved
        shown = f'"{spelling}"' if m.group(1) is not None else f"<{spelling}>"
        where = f"{path}:{number}: #include {shown}"
        if kind == "generated":
          owners, ambiguity = {value}, None
        else:
          if value == path:
            continue
          owners, ambiguity = self.owners(value)
          if ambiguity:
            problems.append(f"{where}: cannot tell which library owns it: {ambiguity}")
            continue
          if not owners:
            if os.path.dirname(value) != os.path.dirname(path):
              problems.append(f"{where}: the header belongs to no library (no target compiles "
                              f"its folder's sources), so target {target} cannot use it")
            continue
        if owners & self.allowed[target]:
          continue
        owner_list = " or ".join(sorted(owners))
        hint = ""
        if path in self.given_to_lowest:
          hint = (f" ({path} has no .cc and its folder holds several libraries, so it counts as "
                  f"the lowest one's, {target}'s; if it belongs to another, list it in that "
                  f"library's sources)")
        problems.append(f"{where}: the header belongs to {owner_list}, which target {target} "
                        f"does not link (directly, or through a PUBLIC/INTERFACE dependency)"
                        f"{hint}")
    return sorted(set(problems))


def read_rules(path, source):
  """[(file:line, target, forbidden library pattern, why)] from a rules file."""
  rules = []
  shown = os.path.relpath(path, source)
  if shown.startswith(".."):
    shown = path
  with open(path) as f:
    for number, line in enumerate(f, 1):
      line = line.split("#", 1)[0].strip()
      if not line:
        continue
      parts = line.split(None, 2)
      if len(parts) < 2:
        raise ValueError(f"{path}:{number}: expected 'target library why'")
      rules.append((f"{shown}:{number}", parts[0], parts[1],
                    parts[2] if len(parts) > 2 else "see the rules file"))
  return rules


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  here = os.path.dirname(os.path.abspath(__file__))
  parser.add_argument("--source", default=os.path.dirname(here), help="the CMake source tree")
  parser.add_argument("--build", help="scratch build directory (default: a temporary one)")
  parser.add_argument("--rules", help="layering rules (default <source>/scripts/layering-rules.txt "
                      "when it exists)")
  parser.add_argument("cmake_args", nargs="*", help="extra cmake arguments (after --)")
  args = parser.parse_args()
  # Every target: the tests, and the libFuzzer targets (tests/fuzz exists only with clang).
  cmake_args = ["-DPGFLEET_BUILD_TESTS=ON"]
  if shutil.which("clang++") and not args.build:
    cmake_args += ["-DCMAKE_CXX_COMPILER=clang++", "-DPGFLEET_FUZZ=ON"]
  cmake_args += args.cmake_args
  build = args.build or tempfile.mkdtemp(prefix="check-layering.")
  try:
    dot = configure(os.path.abspath(args.source), os.path.abspath(build), cmake_args)
    source_root, build_root, targets = read_codemodel(build)
    layering = Layering(source_root, build_root, targets, read_graph(dot))
    rules_path = args.rules or os.path.join(args.source, "scripts", "layering-rules.txt")
    rules = read_rules(rules_path, args.source) if args.rules or os.path.exists(rules_path) else []
  except (ConfigureError, OSError, KeyError, ValueError) as e:
    print(f"check-layering: {e}", file=sys.stderr)
    return 2
  finally:
    if args.build is None:
      shutil.rmtree(build, ignore_errors=True)
  problems = layering.check() + layering.check_rules(rules)
  for problem in problems:
    print(problem)
  if problems:
    print(f"check-layering: {len(problems)} problem(s): an include of a library that the target "
          "does not link (link it in the target's CMakeLists.txt, or move the code), or a link "
          "that the layering rules forbid", file=sys.stderr)
    return 1
  print(f"check-layering: {len(layering.targets)} targets: every include within what the target "
        f"links, {len(rules)} layering rules kept")
  return 0


if __name__ == "__main__":
  sys.exit(main())
