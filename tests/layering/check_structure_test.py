#!/usr/bin/env python3
"""scripts/check-structure.py plants: a clean tree passes; an include cycle between two units, a
.cc over 650 lines and a folder over 5,000 lines each fail and are named."""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "check-structure.py")


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(root):
    done = subprocess.run([sys.executable, SCRIPT, "--source", root], capture_output=True,
                          text=True, check=False)
    return done.returncode, done.stdout


class CheckStructureTest(unittest.TestCase):
    def tree(self):
        root = tempfile.mkdtemp()
        write(root, "pooler/a/low.h", "#pragma once\n")
        write(root, "pooler/a/low.cc", '#include "pooler/a/low.h"\n')
        write(root, "pooler/a/high.h", '#pragma once\n#include "pooler/a/low.h"\n')
        write(root, "pooler/a/high.cc", '#include "pooler/a/high.h"\n')
        return root

    def test_a_clean_tree_passes(self):
        code, out = run(self.tree())
        self.assertEqual(code, 0, out)

    def test_a_cycle_between_units_fails(self):
        root = self.tree()
        write(root, "pooler/a/low.cc", '#include "pooler/a/low.h"\n#include "pooler/a/high.h"\n')
        code, out = run(root)
        self.assertEqual(code, 1)
        self.assertIn("include cycle between units: pooler/a/high -> pooler/a/low", out)

    def test_a_long_cc_fails(self):
        root = self.tree()
        write(root, "peering/long.cc", "//\n" * 651)
        code, out = run(root)
        self.assertEqual(code, 1)
        self.assertIn("peering/long.cc: 651 lines", out)

    def test_a_big_folder_fails(self):
        root = self.tree()
        for i in range(9):
            write(root, f"cmd/x/part{i}.cc", "//\n" * 600)
        code, out = run(root)
        self.assertEqual(code, 1)
        self.assertIn("cmd/x/: 5400 lines", out)


if __name__ == "__main__":
    unittest.main()
