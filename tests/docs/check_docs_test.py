#!/usr/bin/env python3
"""The docs check finds what it exists to find: a doc in a scratch
repository naming a missing file, an unknown command, an unknown flag and
an environment variable no code reads gives one problem each, and the same
doc corrected gives none.

usage: check_docs_test.py BIN_DIR
"""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_docs  # noqa: E402

BIN_DIR = sys.argv.pop(1) if len(sys.argv) > 1 else "build/bin"


def scratch(doc):
    root = tempfile.mkdtemp(prefix="check-docs-")
    unittest.addModuleCleanup(shutil.rmtree, root, ignore_errors=True)
    os.makedirs(os.path.join(root, "docs"))
    os.makedirs(os.path.join(root, "src", "plane"))
    with open(os.path.join(root, "src", "plane", "plane.h"), "w") as f:
        f.write('const char* kRoot = std::getenv("BULWARK_ROOT");\n')
    with open(os.path.join(root, "docs", "x.md"), "w") as f:
        f.write(doc)
    return root


class CheckDocs(unittest.TestCase):
    def test_stale_references_are_found_one_line_each(self):
        root = scratch("The plane is `src/plane/plane.h` and `src/plane/gone.h`.\n"
                       "Set BULWARK_ROOT, or BULWARK_ROOTS.\n\n"
                       "```\nbulwark statuz --json\nbulwark up --machines 2 --no-such-flag\n"
                       "bulwark-train --batch-size 8 --no-such-key 1\n```\n")
        problems = check_docs.check(root, BIN_DIR)
        self.assertEqual(len(problems), 5, problems)
        self.assertIn("src/plane/gone.h", problems[0])
        self.assertIn("names BULWARK_ROOTS, which no code reads", problems[1])
        self.assertIn("'bulwark statuz' is no command", problems[2])
        self.assertIn("--no-such-flag", problems[3])
        self.assertIn("--no-such-key", problems[4])

    def test_a_correct_doc_and_a_shown_typo_pass(self):
        root = scratch("`src/plane/plane.h`, `src/plane/{plane}.h`, `BULWARK_ROOT=/x`\n\n"
                       "```\n$ bulwark status --json\n$ bulwark stauts\n"
                       "bulwark: error: unknown command 'stauts'\n```\n")
        self.assertEqual(check_docs.check(root, BIN_DIR), [])


if __name__ == "__main__":
    unittest.main()
