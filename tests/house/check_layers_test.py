#!/usr/bin/env python3
"""The layers check finds what it exists to find: in a scratch tree, an
include that goes up, one that goes sideways on a floor and a folder on no
floor give one problem each, and includes down the house give none."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402


def scratch(files):
    root = tempfile.mkdtemp(prefix="check-layers-")
    unittest.addModuleCleanup(shutil.rmtree, root, ignore_errors=True)
    for folder in ("common", "controller", "cluster", "plane", "cli"):
        os.makedirs(os.path.join(root, "src", folder))
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    return root


class CheckLayers(unittest.TestCase):
    def test_up_sideways_and_unplaced_are_found_one_line_each(self):
        root = scratch({"src/common/status.h": '#include "plane/plane.h"\n',
                        "src/controller/policy.cc": '#include "common/status.h"\n#include "cluster/layout.h"\n',
                        "src/gadgets/gadget.h": '#include "common/status.h"\n'})
        problems = check_layers.check(root)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("src/common/status.h:1: src/common (floor 0) includes src/plane (floor 2)", problems[0])
        self.assertIn("src/controller/policy.cc:2: src/controller (floor 1) includes src/cluster (floor 1)",
                      problems[1])
        self.assertIn("src/gadgets is on no floor", problems[2])

    def test_includes_down_the_house_pass(self):
        root = scratch({"src/cli/main.cc": '#include "plane/plane.h"\n#include "cli/args.h"\n#include <vector>\n',
                        "src/plane/plane.cc": '#include "controller/policy.h"\n#include "bulwark.pb.h"\n',
                        "src/controller/policy.cc": '#include "common/status.h"\n'})
        self.assertEqual(check_layers.check(root), [])


if __name__ == "__main__":
    unittest.main()
