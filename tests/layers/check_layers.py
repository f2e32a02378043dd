#!/usr/bin/python3
"""Checks that the code follows the Layers table of docs/architecture.md.

The table is the fenced block after the marker `<!-- layers-table -->` in
the doc's "## Layers" section. Each row starts with its number (1, 2, ...
from the top) and lists its folders, each ending in '/', before the first
word that is not a folder; the rest of the line and any line that does not
start with a number is description. An entry may be a subfolder
(`ps_server/store/`): a path belongs to the longest entry it starts with.
A subfolder's row orders it among its parent's parts only; from outside
the parent (when the parent is an entry too) it counts as the parent.

Rules, for every .cc, .h, .cu and .cuh file of the tree (tests included):
  - an `#include "a/b.h"` whose first component is a folder of the repo must
    name the file's own entry or an entry on a row strictly above it;
  - a folder of the repo that holds C++, or is included, must be in the
    table.
and for every CMakeLists.txt: a target defined in folder F (add_library,
add_executable, any add_*) links, in target_link_libraries, only pst_*
targets of F or of rows above F. Targets of the top-level CMakeLists.txt
(pst_warnings) are row 0: any target may link them.

Two more rules, each stated in the doc by a marker line (and in words):
  <!-- layers-rule: no-grpc common/ ... -->       files under these entries
      include no gRPC header (<grpc...>, <grpcpp/...>, *.grpc.pb.h);
  <!-- layers-rule: flags-only-in cmd/ ... -->    only .cc files under these
      entries read a flag (absl::GetFlag).
An exception to them is listed as `<file> -> gRPC` or `<file> -> GetFlag`.

Known exceptions are in tests/layers/exceptions.txt, one per line:
  <file path> -> <included folder>/   # why, and the item that removes it
  <target> -> <pst_target>            # why, and the item that removes it
A listed pair is printed as a note. An exception that matches nothing is an
error (stale), so the list only shrinks.

Exit status: 0 when there is no error, 1 when there is one, 2 when the table
or the exceptions file cannot be read.

  /usr/bin/python3 tests/layers/check_layers.py [--root DIR] [--graph]
"""

import argparse
import os
import re
import subprocess
import sys

MARKER = "<!-- layers-table -->"
SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
# Folders that are never part of the source tree when walking without git.
SKIPPED_DIRS = {".git", ".cache", "node_modules", "__pycache__"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ROW_RE = re.compile(r"^\s*(\d+)\s+(.*)$")
FOLDER_RE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/$")
PST_TARGET_RE = re.compile(r"(?<![\w{])pst_\w+")
RULE_RE = re.compile(r"^\s*<!--\s*layers-rule:\s*([a-z-]+)\s+(.*?)\s*-->\s*$")
RULES = ("no-grpc", "flags-only-in")
GRPC_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*(<grpc[^>]*>|"[^"]*\.grpc\.pb\.h")')
GET_FLAG_RE = re.compile(r"\babsl::GetFlag\s*\(")


class InputError(Exception):
    """The table or the exceptions file cannot be used."""


class Table:
    """The Layers table: entry ('ps_server/' or 'ps_server/store/') -> row."""

    def __init__(self, rows, rules=None):
        self.rows = rows  # dict: entry -> row number
        self.rules = rules or {}  # rule name -> list of entries

    def entry_of(self, path):
        """The longest entry `path` starts with, or None."""
        best = None
        for entry in self.rows:
            if path.startswith(entry) and (best is None or len(entry) > len(best)):
                best = entry
        return best

    def describe(self, entry):
        return "%s (row %d)" % (entry, self.rows[entry])


def read_table(doc_path):
    """Reads the marked block of `doc_path` into a Table."""
    try:
        with open(doc_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError("cannot read %s: %s" % (doc_path, e))
    start = None
    for i, line in enumerate(lines):
        if line.strip() == MARKER:
            start = i
            break
    if start is None:
        raise InputError("%s: no %s marker before the Layers table" % (doc_path, MARKER))
    i = start + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not lines[i].startswith("```"):
        raise InputError("%s:%d: the %s marker is not followed by a fenced block" %
                         (doc_path, start + 1, MARKER))
    rows = {}
    expected = 1
    i += 1
    while i < len(lines) and not lines[i].startswith("```"):
        m = ROW_RE.match(lines[i])
        if m:
            number = int(m.group(1))
            if number != expected:
                raise InputError("%s:%d: row %d where row %d was expected" %
                                 (doc_path, i + 1, number, expected))
            folders = []
            for word in m.group(2).split():
                if not FOLDER_RE.match(word):
                    break
                folders.append(word)
            if not folders:
                raise InputError("%s:%d: row %d lists no folder" % (doc_path, i + 1, number))
            for folder in folders:
                if folder in rows:
                    raise InputError("%s:%d: %s is on rows %d and %d" %
                                     (doc_path, i + 1, folder, rows[folder], number))
                rows[folder] = number
            expected += 1
        i += 1
    if i >= len(lines):
        raise InputError("%s: the Layers table's block is not closed" % doc_path)
    if not rows:
        raise InputError("%s: the Layers table has no rows" % doc_path)
    rules = {}
    for number, line in enumerate(lines, 1):
        m = RULE_RE.match(line)
        if not m:
            continue
        name, entries = m.group(1), m.group(2).split()
        if name not in RULES:
            raise InputError("%s:%d: unknown layers-rule %s (known: %s)" %
                             (doc_path, number, name, ", ".join(RULES)))
        for entry in entries:
            if not FOLDER_RE.match(entry):
                raise InputError("%s:%d: %s is not a folder ending in '/'" %
                                 (doc_path, number, entry))
        rules.setdefault(name, []).extend(entries)
    return Table(rows, rules)


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


def read_exceptions(path):
    """[(lhs, rhs, line)] from the exceptions file (none if it is missing)."""
    if not os.path.exists(path):
        return []
    result = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            parts = [p.strip() for p in text.split("->")]
            if len(parts) != 2 or not all(parts) or any(" " in p for p in parts):
                raise InputError("%s:%d: expected '<path or target> -> <folder/ or pst_target>'"
                                 " and a '# why' comment" % (path, number))
            if "#" not in line:
                raise InputError("%s:%d: say why (and which item removes it) after '#'" %
                                 (path, number))
            result.append((parts[0], parts[1], number))
    return result


class Checker:
    def __init__(self, root, table, exceptions, exceptions_path):
        self.root = root
        self.table = table
        self.exceptions = {(lhs, rhs): line for lhs, rhs, line in exceptions}
        self.exceptions_path = exceptions_path
        self.used_exceptions = set()
        self.errors = []
        self.notes = []
        self.files_checked = 0
        self.includes_checked = 0
        self.links_checked = 0
        self.include_edges = {}  # (from entry, to entry) -> count
        self.link_edges = {}  # (target, folder, pst target, folder) -> verdict

    def report(self, key, message):
        """An error, or a note when `key` is a listed exception."""
        if key in self.exceptions:
            self.used_exceptions.add(key)
            self.notes.append("%s [listed in %s:%d]" %
                              (message, self.exceptions_path, self.exceptions[key]))
        else:
            self.errors.append(message)

    def why_not(self, own, other):
        """None when `own` may use `other`, else the reason."""
        if other == own:
            return None
        # A subfolder's row orders it within its parent only: from outside
        # the parent, it counts as the parent (chief/ may not reach into
        # ps_server/store/, though store/ sits on a row above chief/).
        parent = other.split("/")[0] + "/"
        if other != parent and parent in self.table.rows and not own.startswith(parent):
            other = parent
        r, s = self.table.rows[own], self.table.rows[other]
        if s < r:
            return None
        if s == r:
            return "%s is beside %s on row %d; a folder uses only rows above its own" % (
                other, own, r)
        return "%s is below %s; a folder uses only rows above its own" % (other, own)

    def check_sources(self, files):
        repo_folders = set(p.split("/")[0] for p in files if "/" in p)
        file_set = set(files)
        missing = {}  # top-level folder not in the table -> first file
        for path in files:
            if not path.endswith(SOURCE_SUFFIXES):
                continue
            self.files_checked += 1
            own = self.table.entry_of(path)
            if own is None:
                folder = path.split("/")[0] + "/" if "/" in path else "the repository root"
                missing.setdefault(folder, path)
                continue
            try:
                with open(os.path.join(self.root, path), encoding="utf-8",
                          errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError as e:
                self.errors.append("%s: cannot read: %s" % (path, e))
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
                self.includes_checked += 1
                other = self.table.entry_of(included)
                where = "%s:%d: %s includes " % (path, number, self.table.describe(own))
                if other is None:
                    folder = included.split("/")[0] + "/"
                    self.errors.append("%s%s (no row): folder %s is not in the Layers table" %
                                       (where, folder, folder))
                    continue
                edge = (own, other)
                self.include_edges[edge] = self.include_edges.get(edge, 0) + 1
                reason = self.why_not(own, other)
                if reason:
                    self.report((path, other),
                                "%s%s: %s" % (where, self.table.describe(other), reason))
        for folder, path in sorted(missing.items()):
            self.errors.append("%s:1: folder %s holds C++ but is not in the Layers table" %
                               (path, folder))

    def check_rules(self, files):
        """The doc's layers-rule lines: no gRPC below rpc/, flags read only on top."""
        no_grpc = self.table.rules.get("no-grpc", [])
        flag_readers = self.table.rules.get("flags-only-in", None)
        for path in files:
            if not path.endswith(SOURCE_SUFFIXES):
                continue
            grpc_free = [e for e in no_grpc if path.startswith(e)]
            reads_flags = flag_readers is not None and path.endswith(".cc") and not any(
                path.startswith(e) for e in flag_readers)
            if not grpc_free and not reads_flags:
                continue
            try:
                with open(os.path.join(self.root, path), encoding="utf-8",
                          errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue  # check_sources reports it
            for number, line in enumerate(lines, 1):
                if grpc_free and GRPC_INCLUDE_RE.match(line):
                    self.report((path, "gRPC"),
                                "%s:%d: %s includes gRPC (%s): files under %s are gRPC-free" %
                                (path, number, grpc_free[0],
                                 GRPC_INCLUDE_RE.match(line).group(1), grpc_free[0]))
                if reads_flags and GET_FLAG_RE.search(line):
                    self.report((path, "GetFlag"),
                                "%s:%d: absl::GetFlag outside %s: a library takes its settings"
                                " as options" % (path, number, " ".join(flag_readers)))

    def check_cmake(self, files):
        lists = [p for p in files if os.path.basename(p) == "CMakeLists.txt"]
        defined = {}  # target -> (folder entry or "" for the top level, CMakeLists path)
        links = []  # (target, pst target, CMakeLists path, line)
        for path in lists:
            folder = os.path.dirname(path)
            if folder:
                entry = self.table.entry_of(folder + "/")
                if entry is None:
                    top = folder.split("/")[0] + "/"
                    self.errors.append("%s:1: folder %s holds a CMakeLists.txt but is not in"
                                       " the Layers table" % (path, top))
                    continue
            else:
                entry = ""
            with open(os.path.join(self.root, path), encoding="utf-8") as f:
                commands = parse_cmake(f.read())
            for name, args in expand_foreach(commands):
                if not args:
                    continue
                target = args[0][0]
                if name.startswith("add_") or name.endswith("_add_module"):
                    if name in ("add_subdirectory", "add_test", "add_dependencies",
                                "add_custom_command", "add_compile_options",
                                "add_compile_definitions", "add_link_options"):
                        continue
                    if len(args) > 1 and args[1][0] in ("ALIAS", "IMPORTED"):
                        continue
                    defined.setdefault(target, (entry, path))
                elif name == "target_link_libraries":
                    defined.setdefault(target, (entry, path))  # a target defined elsewhere
                    for word, line in args[1:]:
                        for linked in PST_TARGET_RE.findall(word):
                            links.append((target, linked, path, line))
        for target, linked, path, line in links:
            self.links_checked += 1
            own, _ = defined[target]
            if linked not in defined:
                self.errors.append("%s:%d: target %s links %s, which no CMakeLists.txt defines" %
                                   (path, line, target, linked))
                continue
            other, _ = defined[linked]
            own_row = self.table.rows[own] if own else 0
            other_row = self.table.rows[other] if other else 0
            if other_row == 0 or other == own:
                verdict = None
            elif own_row == 0:
                verdict = "the top-level CMakeLists.txt links only its own targets"
            else:
                verdict = self.why_not(own, other)
            self.link_edges[(target, own or "/", linked, other or "/")] = verdict
            if verdict:
                self.report((target, linked),
                            "%s:%d: target %s (folder %s, row %d) links %s (folder %s, row %d): %s" %
                            (path, line, target, own, own_row, linked, other, other_row, verdict))

    def check_stale(self):
        for (lhs, rhs), line in sorted(self.exceptions.items(), key=lambda kv: kv[1]):
            if (lhs, rhs) not in self.used_exceptions:
                self.errors.append("%s:%d: stale exception, delete it: %s -> %s matches no"
                                   " violation" % (self.exceptions_path, line, lhs, rhs))

    def print_graph(self):
        print("Include graph (folder -> folder: includes), by row:")
        for (own, other), count in sorted(
                self.include_edges.items(),
                key=lambda kv: (self.table.rows[kv[0][0]], kv[0][0],
                                self.table.rows[kv[0][1]], kv[0][1])):
            if own == other:
                continue
            verdict = self.why_not(own, other)
            print("  %-28s -> %-28s %4d  %s" %
                  (self.table.describe(own), self.table.describe(other), count,
                   "ok" if verdict is None else
                   ("BESIDE" if self.table.rows[own] == self.table.rows[other] else "BELOW")))
        print("CMake links to pst_* targets of other folders:")
        for (target, own, linked, other), verdict in sorted(self.link_edges.items()):
            if own == other or other == "/":
                continue
            print("  %-32s (%s) -> %-24s (%s)  %s" %
                  (target, own, linked, other, "ok" if verdict is None else "NOT ALLOWED"))


def parse_cmake(text):
    """[(command name, [(argument, line)])] of a CMake file. Quoted arguments
    keep their quotes; comments are dropped; nested parentheses stay inside
    their command."""
    tokens = []  # (kind, text, line)
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c == "#":
            m = re.match(r"#\[(=*)\[", text[i:])
            if m:
                end = text.find("]" + m.group(1) + "]", i)
                end = n if end < 0 else end + len(m.group(0))
            else:
                end = text.find("\n", i)
                end = n if end < 0 else end
            line += text.count("\n", i, end)
            i = end
        elif c in "()":
            tokens.append((c, c, line))
            i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            tokens.append(("word", text[i:j + 1], line))
            line += text.count("\n", i, j)
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '()#"':
                j += 1
            tokens.append(("word", text[i:j], line))
            i = j
    commands = []
    k = 0
    while k < len(tokens):
        kind, word, _ = tokens[k]
        if kind == "word" and k + 1 < len(tokens) and tokens[k + 1][0] == "(":
            depth, args, k = 1, [], k + 2
            while k < len(tokens) and depth:
                if tokens[k][0] == "(":
                    depth += 1
                elif tokens[k][0] == ")":
                    depth -= 1
                elif depth == 1:
                    args.append((tokens[k][1], tokens[k][2]))
                k += 1
            commands.append((word.lower(), args))
        else:
            k += 1
    return commands


def expand_foreach(commands):
    """The commands with each `foreach(v a b c)` body repeated once per item,
    ${v} replaced (other foreach forms are left as they are)."""
    out = []
    k = 0
    while k < len(commands):
        name, args = commands[k]
        if name == "foreach" and args and len(args) > 1 and \
                args[1][0] not in ("IN", "RANGE"):
            depth, body, k = 1, [], k + 1
            while k < len(commands) and depth:
                if commands[k][0] == "foreach":
                    depth += 1
                elif commands[k][0] == "endforeach":
                    depth -= 1
                if depth:
                    body.append(commands[k])
                k += 1
            var = "${%s}" % args[0][0]
            for item, _ in args[1:]:
                body_items = [(n, [(a.replace(var, item), l) for a, l in a_list])
                              for n, a_list in body]
                out.extend(expand_foreach(body_items))
        else:
            out.append((name, args))
            k += 1
    return out


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(
        description="Checks includes and CMake links against the Layers table of "
                    "docs/architecture.md.")
    parser.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")),
                        help="the repository root (default: this script's ../..)")
    parser.add_argument("--doc", default="docs/architecture.md",
                        help="the doc holding the table, relative to --root")
    parser.add_argument("--exceptions", default="tests/layers/exceptions.txt",
                        help="the known exceptions, relative to --root")
    parser.add_argument("--graph", action="store_true",
                        help="also print the folder include graph and the CMake links")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    try:
        table = read_table(os.path.join(root, args.doc))
        exceptions = read_exceptions(os.path.join(root, args.exceptions))
    except InputError as e:
        print("check_layers: %s" % e, file=sys.stderr)
        return 2
    checker = Checker(root, table, exceptions, args.exceptions)
    files = list_files(root)
    checker.check_sources(files)
    checker.check_rules(files)
    checker.check_cmake(files)
    checker.check_stale()
    if args.graph:
        checker.print_graph()
    for note in checker.notes:
        print("note: %s" % note)
    for error in checker.errors:
        print(error)
    print("check_layers: %d files, %d includes of our folders, %d CMake links to pst_* targets "
          "checked against %s: %d errors, %d known exceptions" %
          (checker.files_checked, checker.includes_checked, checker.links_checked, args.doc,
           len(checker.errors), len(checker.notes)))
    if checker.errors:
        print("check_layers: FAILED. Fix each include or link (move the code to the right "
              "folder), or change the table in %s if the layering itself changed; %s is "
              "for known debts only." % (args.doc, args.exceptions))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
