#!/usr/bin/env python3
"""scripts/check-layering.py against small planted CMake trees: it passes a clean tree and fails,
naming file, line, header and the missing link, every kind of violation it is there to catch.

  python3 tests/layering/check_layering_test.py      # scripts/test.sh runs it before the check
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "check-layering.py")

# low <- mid (PUBLIC low, PUBLIC seam) <- top (PRIVATE mid) <- app (PRIVATE top); other alone.
CMAKE = """cmake_minimum_required(VERSION 3.25)
project(planted LANGUAGES CXX)
include_directories(${CMAKE_SOURCE_DIR})
add_library(low low/low.cc)
add_library(seam INTERFACE mid/seam.h)
add_library(mid mid/mid.cc)
target_link_libraries(mid PUBLIC low seam)
add_library(mid2 mid/mid2.cc)
target_link_libraries(mid2 PUBLIC mid)
add_library(top top/top.cc)
target_link_libraries(top PRIVATE mid)
add_library(other other/other.cc)
add_executable(app app/main.cc)
target_link_libraries(app PRIVATE top)
"""

CLEAN = {
    "CMakeLists.txt": CMAKE,
    "low/low.h": "#pragma once\n",
    "low/util.h": "#pragma once\n#include \"low/low.h\"\n",  # header-only: belongs to low
    "low/low.cc": "#include \"low/low.h\"\n#include \"low/util.h\"\n#include <string>\n",
    "mid/seam.h": "#pragma once\n",
    "mid/mid.h": "#pragma once\n#include \"low/low.h\"\n#include \"mid/seam.h\"\n",
    "mid/mid.cc": "#include \"mid/mid.h\"\n",
    "mid/mid2.cc": "#include \"mid/mid.h\"\n#include \"mid/extra.h\"\n",
    "mid/extra.h": "#pragma once\n#include \"low/low.h\"\n",  # no .cc: the lowest's, mid's
    # mid links low PUBLIC: top may use low's headers; "absl/..." is not a repo header.
    "top/top.h": "#pragma once\n",
    "top/top.cc": "#include \"top/top.h\"\n#include \"low/util.h\"\n#include \"absl/x.h\"\n",
    "other/other.h": "#pragma once\n",
    "other/other.cc": "#include \"other/other.h\"\n",
    "app/helper.h": "#pragma once\n#include \"top/top.h\"\n",
    "app/main.cc": "#include \"app/helper.h\"\n#include \"top/top.h\"\nint main() {}\n",
}


class CheckLayeringTest(unittest.TestCase):
  def setUp(self):
    self.root = tempfile.mkdtemp(prefix="layering-test.")
    self.addCleanup(shutil.rmtree, self.root, True)

  def run_check(self, changes=None, rules=None):
    files = dict(CLEAN)
    files.update(changes or {})
    src = os.path.join(self.root, "src")
    for path, text in files.items():
      full = os.path.join(src, path)
      os.makedirs(os.path.dirname(full), exist_ok=True)
      with open(full, "w") as f:
        f.write(text)
    cmd = [sys.executable, SCRIPT, "--source", src, "--build", os.path.join(self.root, "build")]
    if rules is not None:
      with open(os.path.join(self.root, "rules.txt"), "w") as f:
        f.write(rules)
      cmd += ["--rules", os.path.join(self.root, "rules.txt")]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout

  def assert_violation(self, result, *needles):
    code, out = result
    self.assertEqual(code, 1, out)
    for needle in needles:
      self.assertIn(needle, out)

  def test_clean_tree_passes(self):
    code, out = self.run_check()
    self.assertEqual(code, 0, out)
    self.assertIn("every include within", out)

  def test_lower_library_including_an_upper_one_fails(self):
    self.assert_violation(
        self.run_check({"low/low.cc": "#include \"low/low.h\"\n// ok\n#include \"mid/mid.h\"\n"}),
        "low/low.cc:3: #include \"mid/mid.h\"", "belongs to mid", "target low does not link")

  def test_angle_brackets_do_not_hide_a_repo_header(self):
    self.assert_violation(
        self.run_check({"low/low.cc": "#include <string>\n#include <mid/mid.h>\n"}),
        "low/low.cc:2: #include <mid/mid.h>", "belongs to mid")

  def test_private_links_do_not_propagate(self):
    # app links top, top links mid PRIVATE: mid's headers are not app's.
    self.assert_violation(
        self.run_check({"app/main.cc": "#include \"mid/mid.h\"\nint main() {}\n"}),
        "app/main.cc:1: #include \"mid/mid.h\"", "target app does not link")

  def test_header_only_header_belongs_to_its_folder(self):
    self.assert_violation(self.run_check({"other/other.cc": "#include \"low/util.h\"\n"}),
                          "other/other.cc:1: #include \"low/util.h\"", "belongs to low")

  def test_headers_are_checked_too(self):
    self.assert_violation(
        self.run_check({"mid/mid.h": "#pragma once\n#include \"other/other.h\"\n"}),
        "mid/mid.h:2: #include \"other/other.h\"", "belongs to other", "target mid")

  def test_header_only_header_of_a_shared_folder_is_the_lowest_librarys(self):
    # mid/extra.h counts as mid's (mid2 links mid), so it may not use what only mid2 links.
    self.assert_violation(
        self.run_check({"mid/extra.h": "#pragma once\n#include \"mid/mid2.h\"\n",
                        "mid/mid2.h": "#pragma once\n"}),
        "mid/extra.h:2: #include \"mid/mid2.h\"", "belongs to mid2", "target mid does not link",
        "list it in that library's sources")

  def test_interface_library_owns_the_headers_it_lists(self):
    # seam.h sits in mid/ but is the INTERFACE library seam's: other must link seam, and mid
    # (which links it) may include it.
    self.assert_violation(self.run_check({"other/other.cc": "#include \"mid/seam.h\"\n"}),
                          "other/other.cc:1: #include \"mid/seam.h\"", "belongs to seam")

  def test_a_test_helper_stays_in_its_folder(self):
    self.assert_violation(self.run_check({"top/top.cc": "#include \"app/helper.h\"\n"}),
                          "top/top.cc:1: #include \"app/helper.h\"", "belongs to no library")

  def test_rules_forbid_transitive_links(self):
    self.assert_violation(self.run_check(rules="top  low  top must stay above low\n"),
                          "rules.txt:1: target top links low", "top must stay above low")
    code, out = self.run_check(rules="# comment\nlow  top*  low is the bottom\n")
    self.assertEqual(code, 0, out)

  def test_a_rule_naming_a_missing_target_fails(self):
    self.assert_violation(self.run_check(rules="gone  low  renamed\n"),
                          "names target gone, which does not exist")


if __name__ == "__main__":
  unittest.main()
