"""The C++ side of check_layers.py: the files of the tree, every
`#include "..."` of our folders held to the Layers table, and the doc's
layers-rule lines (no gRPC header under a no-grpc entry, absl::GetFlag only
under a flags-only-in entry).

Each check takes the Checker of check_layers.py, which holds the table and
collects the errors, the notes (listed exceptions) and the counts.
"""

import os
import re
import subprocess

SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
# Folders that are never part of the source tree when walking without git.
SKIPPED_DIRS = {".git", ".cache", "node_modules", "__pycache__"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
GRPC_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*(<grpc[^>]*>|"[^"]*\.grpc\.pb\.h")')
GET_FLAG_RE = re.compile(r"\babsl::GetFlag\s*\(")


def list_files(root):
    """Every file of the tree, relative to root: git's tracked and untracked
    non-ignored files in a git work tree, else a walk that skips build*/ and
    hidden folders."""
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        in_git = os.path.realpath(top) == os.path.realpath(root)
    except (OSError, subprocess.CalledProcessError):
        in_git = False
    files = []
    if in_git:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"],
                             capture_output=True, text=True, check=True).stdout
        for path in sorted(set(p for p in out.split("\0") if p)):
            first = path.split("/")[0]
            if "/" in path and (first.startswith("build") or first in SKIPPED_DIRS):
                continue
            # A file staged for deletion or moved away is still in the index.
            if os.path.isfile(os.path.join(root, path)):
                files.append(path)
        return files
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in SKIPPED_DIRS and not d.startswith(".") and
            not (rel == "." and d.startswith("build")))
        for name in sorted(filenames):
            files.append(os.path.normpath(os.path.join(rel, name)))
    return files


def check_sources(checker, files):
    """Every #include of our folders in every .cc, .h, .cu and .cuh file: of
    the file's own entry or a row above it; every folder holding C++ has a row."""
    repo_folders = set(p.split("/")[0] for p in files if "/" in p)
    file_set = set(files)
    missing = {}  # top-level folder not in the table -> first file
    for path in files:
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        checker.files_checked += 1
        own = checker.table.entry_of(path)
        if own is None:
            folder = path.split("/")[0] + "/" if "/" in path else "the repository root"
            missing.setdefault(folder, path)
            continue
        try:
            with open(os.path.join(checker.root, path), encoding="utf-8",
                      errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as e:
            checker.errors.append("%s: cannot read: %s" % (path, e))
            continue
        for number, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            included = os.path.normpath(m.group(1))
            beside = os.path.normpath(os.path.join(os.path.dirname(path), included))
            if included.split("/")[0] not in repo_folders or "/" not in included:
                if beside in file_set:
                    included = beside  # `#include "x.h"` next to the file
                else:
                    continue  # absl/, gtest/, a system or generated header
            checker.includes_checked += 1
            other = checker.table.entry_of(included)
            where = "%s:%d: %s includes " % (path, number, checker.table.describe(own))
            if other is None:
                folder = included.split("/")[0] + "/"
                checker.errors.append("%s%s (no row): folder %s is not in the Layers table" %
                                      (where, folder, folder))
                continue
            edge = (own, other)
            checker.include_edges[edge] = checker.include_edges.get(edge, 0) + 1
            reason = checker.why_not(own, other)
            if reason:
                checker.report((path, other),
                               "%s%s: %s" % (where, checker.table.describe(other), reason))
    for folder, path in sorted(missing.items()):
        checker.errors.append("%s:1: folder %s holds C++ but is not in the Layers table" %
                              (path, folder))


def check_rules(checker, files):
    """The doc's layers-rule lines: no gRPC below rpc/, flags read only on top."""
    no_grpc = checker.table.rules.get("no-grpc", [])
    flag_readers = checker.table.rules.get("flags-only-in", None)
    for path in files:
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        grpc_free = [e for e in no_grpc if path.startswith(e)]
        reads_flags = flag_readers is not None and path.endswith(".cc") and not any(
            path.startswith(e) for e in flag_readers)
        if not grpc_free and not reads_flags:
            continue
        try:
            with open(os.path.join(checker.root, path), encoding="utf-8",
                      errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue  # check_sources reports it
        for number, line in enumerate(lines, 1):
            if grpc_free and GRPC_INCLUDE_RE.match(line):
                checker.report((path, "gRPC"),
                               "%s:%d: %s includes gRPC (%s): files under %s are gRPC-free" %
                               (path, number, grpc_free[0],
                                GRPC_INCLUDE_RE.match(line).group(1), grpc_free[0]))
            if reads_flags and GET_FLAG_RE.search(line):
                checker.report((path, "GetFlag"),
                               "%s:%d: absl::GetFlag outside %s: a library takes its settings"
                               " as options" % (path, number, " ".join(flag_readers)))
