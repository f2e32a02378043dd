#!/usr/bin/python3
"""The doc test on its fixture (tests/doc_test_fixture.md), so that it
cannot pass by running nothing: marked blocks run and unmarked ones do
not, a marker's settings reach the commands, /tmp paths land in the scratch
directory, and a failing command, a failing python block and a block that
runs past its time are each reported with the file and line of the command.

Usage: DOC_TEST_BUILD_DIR=build /usr/bin/python3 tests/doc_test_test.py
"""

import os
import re
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FIXTURE = os.path.join(HERE, "doc_test_fixture.md")
SHOWN = os.path.relpath(FIXTURE, REPO)


def line_of(text):
    """The 1-based line of the fixture that holds `text`."""
    with open(FIXTURE) as f:
        for number, line in enumerate(f, 1):
            if text in line:
                return number
    raise AssertionError(f"{text!r} is not in {FIXTURE}")


class DocTestOnItsFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        build = os.environ.get("DOC_TEST_BUILD_DIR", os.path.join(REPO, "build"))
        done = subprocess.run([sys.executable, os.path.join(HERE, "doc_test.py"),
                               f"--build_dir={build}", "--timeout=5", "--keep", FIXTURE],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        cls.code, cls.output = done.returncode, done.stdout + done.stderr
        kept = re.search(r"the scratch directory is kept: (\S+)", cls.output)
        cls.scratch = kept.group(1) if kept else None
        print(cls.output)

    @classmethod
    def tearDownClass(cls):
        if cls.scratch:
            shutil.rmtree(cls.scratch, ignore_errors=True)

    def read(self, name):
        with open(os.path.join(self.scratch, "tmp", "doc_test_fixture", name)) as f:
            return f.read().strip()

    def exists(self, name):
        return os.path.exists(os.path.join(self.scratch, "tmp", "doc_test_fixture", name))

    def test_ExitsOne_CountingEveryBlockAndTheFailures(self):
        self.assertEqual(self.code, 1, self.output)
        self.assertIn("doc test: 7 block(s) from 1 file(s)", self.output)
        self.assertIn("3 failed", self.output)

    def test_AFailingCommand_IsReportedWithItsFileAndLine(self):
        line = line_of("ls /tmp/doc_test_fixture/no-such-file")
        self.assertRegex(self.output, rf"{re.escape(SHOWN)}:{line}: FAILED \(exit status 2, ")
        self.assertIn("    ls ", self.output)  # the command
        self.assertIn("No such file or directory", self.output)  # its output
        self.assertTrue(self.exists("before.txt"))
        self.assertFalse(self.exists("after.txt"), "the block went on after a failed command")

    def test_AFailingPythonBlock_IsReportedAtTheLineThatRaised(self):
        line = line_of('raise RuntimeError("PYTHON-FAILS-HERE")')
        self.assertRegex(self.output, rf"{re.escape(SHOWN)}:{line}: FAILED \(exit status 1, ")

    def test_ABlockPastItsTime_IsReportedAtTheCommandRunning(self):
        line = line_of("TIMES-OUT-HERE")
        self.assertRegex(self.output, rf"{re.escape(SHOWN)}:{line}: FAILED \(timed out after 5 s")

    def test_MarkedBlocksRun_InTheScratchDirectory_UnmarkedOnesDoNot(self):
        self.assertIsNotNone(self.scratch, self.output)
        self.assertRegex(self.output, rf"{re.escape(SHOWN)}:{line_of('mkdir -p')}: ok ")
        self.assertEqual(self.read("first.txt"), "ran")
        self.assertEqual(self.read("python.txt"), "python")
        self.assertFalse(self.exists("unmarked.txt"))
        self.assertFalse(os.path.exists("/tmp/doc_test_fixture/first.txt"),
                         "a /tmp path was not moved into the scratch directory")

    def test_MarkerSettings_ReplaceShownFlags_AddTheOthers(self):
        # --epochs replaced where shown; --seed added before the first
        # command's ` -- `; what follows the marker's `--`, after it.
        self.assertEqual(self.read("flags.txt"),
                         "--ps=2 --epochs=1 --seed=7 -- --after --max_steps=5")
        self.assertEqual(self.read("second.txt"), "--epochs=1 --ps=2")
        # A command whose ` -- ` is on an earlier line than its end.
        self.assertEqual(self.read("dashes.txt"), "a --seed=7 -- b --max_steps=5")


if __name__ == "__main__":
    unittest.main()
