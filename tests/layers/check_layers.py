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
and for every CMakeLists.txt of the tree, the same rule on the link graph:
  - a target made in folder F (add_library, add_executable,
    pybind11_add_module, any *_add_library/_executable/_module, in a
    foreach() loop too) belongs to F's entry, and each project library it
    links in target_link_libraries (a name some add_library of the tree
    makes, or an ALIAS of one) must be of that entry or of a row above it,
    exactly as an include would. Other names (absl::..., GTest::...,
    gRPC::grpc++, BLAS::BLAS, ${CMAKE_DL_LIBS}) are not ours and have no
    row; a pst_* name that no CMakeLists.txt makes is an error.
  - the top-level CMakeLists.txt has no row: its INTERFACE targets
    (pst_warnings) are settings every target may link, it makes no other
    library, and its own targets link only its own.

Two more rules, each stated in the doc by a marker line (and in words):
  <!-- layers-rule: no-grpc common/ ... -->       files under these entries
      include no gRPC header (<grpc...>, <grpcpp/...>, *.grpc.pb.h), and
      their targets link no gRPC library (gRPC::*) nor a project library
      of another folder that links one, at any depth (pst_rpc,
      pst_proto_grpc, pst_client_grpc);
  <!-- layers-rule: flags-only-in cmd/ ... -->    only .cc files under these
      entries read a flag (absl::GetFlag).
An exception to them is listed as `<file> -> gRPC`, `<target> -> gRPC` or
`<file> -> GetFlag`.

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
RULE_RE = re.compile(r"^\s*<!--\s*layers-rule:\s*([a-z-]+)\s+(.*?)\s*-->\s*$")
RULES = ("no-grpc", "flags-only-in")
GRPC_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*(<grpc[^>]*>|"[^"]*\.grpc\.pb\.h")')
GET_FLAG_RE = re.compile(r"\babsl::GetFlag\s*\(")
# CMake: a `${VAR}` reference (the innermost, when nested), a name in a
# target_link_libraries argument, the gRPC libraries a target may link
# (gRPC::grpc++ and its kin from find_package(gRPC), or their bare names),
# and the commands whose body is a block.
VAR_REF_RE = re.compile(r"\$\{([A-Za-z0-9_.+/-]+)\}")
LINK_NAME_RE = re.compile(r"[A-Za-z_][\w.+-]*(?:::[\w.+-]+)*")
GRPC_LIBRARY_RE = re.compile(r"^(gRPC::.+|grpc(\+\+)?(_[a-z_]+)?|gpr)$")
BLOCK_ENDS = {"foreach": "endforeach", "function": "endfunction", "macro": "endmacro"}


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
        """Every target_link_libraries of every CMakeLists.txt: a project
        library linked from a target must be of the target's own entry or of
        a row above it (the include rule, on the link graph); a target under
        a no-grpc entry links no gRPC, directly or through a project library
        of another folder that does."""
        # Parents before their subfolders, so a subfolder sees its parent's
        # variables (set(), list(APPEND)) as CMake gives them.
        lists = sorted((p for p in files if os.path.basename(p) == "CMakeLists.txt"),
                       key=lambda p: (p.count("/"), p))
        scripts = []  # (path, folder, entry, CmakeScript)
        variables_of = {}  # folder -> its CMakeLists.txt's variables at the end
        owners = {}  # target -> (entry, folder, CMakeLists path); entry "" at the top level
        libraries = set()  # the project's linkable targets (add_library, not IMPORTED)
        aliases = {}  # ALIAS name -> the target it names
        for path in lists:
            folder = os.path.dirname(path)
            if folder:
                entry = self.table.entry_of(folder + "/")
                if entry is None:
                    self.errors.append("%s:1: folder %s holds a CMakeLists.txt but is not in"
                                       " the Layers table" % (path, folder.split("/")[0] + "/"))
            else:
                entry = ""
            parent = folder
            while parent and parent not in variables_of:
                parent = os.path.dirname(parent)
            try:
                with open(os.path.join(self.root, path), encoding="utf-8",
                          errors="replace") as f:
                    script = read_cmake(f.read(), variables_of.get(parent, {}))
            except OSError as e:
                self.errors.append("%s: cannot read: %s" % (path, e))
                continue
            variables_of[folder] = script.variables
            scripts.append((path, folder, entry, script))
            for target, kind, line in script.made:
                if kind == "imported":
                    continue
                if kind.startswith("alias:"):
                    aliases.setdefault(target, kind[len("alias:"):])
                    continue
                owners.setdefault(target, (entry, folder, path))
                if kind in ("library", "interface"):
                    libraries.add(target)
                    if entry == "" and kind == "library":
                        self.errors.append(
                            "%s:%d: library %s is made in the top-level CMakeLists.txt, which has"
                            " no row: only INTERFACE targets (settings every target may link,"
                            " like pst_warnings) live there; make it in its folder" %
                            (path, line, target))
        # Every link, by the name it resolves to (an ALIAS to its target).
        links = []  # (target, own entry, own folder, linked name, CMakeLists path, line)
        deps = {}  # target -> [linked names]
        for path, folder, entry, script in scripts:
            for target, words in script.links:
                own, own_folder = entry, folder
                if target in owners:  # linked from another folder's CMakeLists.txt
                    own, own_folder, _ = owners[target]
                for word, line in words:
                    for name in link_names(word):
                        name = aliases.get(name, name)
                        deps.setdefault(target, []).append(name)
                        links.append((target, own, own_folder, name, path, line))
        for target, own, own_folder, linked, path, line in links:
            if linked not in libraries:
                if linked.startswith("pst_") and linked not in owners:
                    self.errors.append("%s:%d: target %s links %s, which no CMakeLists.txt makes" %
                                       (path, line, target, linked))
                continue
            self.links_checked += 1
            other = owners[linked][0]
            if own is None or other is None:
                continue  # a folder missing from the table: reported above
            own_row = self.table.rows[own] if own else 0
            other_row = self.table.rows[other] if other else 0
            if other == "" or other == own:
                verdict = None  # the top level's INTERFACE targets go everywhere
            elif own == "":
                verdict = "the top-level CMakeLists.txt links only its own targets"
            else:
                verdict = self.why_not(own, other)
            self.link_edges[(target, own or "/", linked, other or "/")] = verdict
            if verdict:
                self.report((target, linked),
                            "%s:%d: target %s (folder %s, row %d) links %s (folder %s, row %d):"
                            " %s" % (path, line, target, own or "/", own_row, linked,
                                     other or "/", other_row, verdict))
        self.check_grpc_links(links, deps, libraries, owners)

    def check_grpc_links(self, links, deps, libraries, owners):
        """The no-grpc rule on the link graph: a target under a no-grpc entry
        links neither a gRPC library (gRPC::grpc++, grpc++, ...) nor a project
        library that brings one in. A project library under a no-grpc entry
        that links gRPC is reported at its own link, not at each user's."""
        no_grpc = self.table.rules.get("no-grpc", [])
        if not no_grpc:
            return
        memo = {}

        def grpc_via(target, visiting):
            """[linked name, ..., gRPC library] by which `target` links gRPC, or None."""
            if target in memo:
                return memo[target]
            if target in visiting:
                return None
            visiting.add(target)
            found = None
            for name in deps.get(target, []):
                if GRPC_LIBRARY_RE.match(name):
                    found = [name]
                    break
            if found is None:
                for name in deps.get(target, []):
                    if name in libraries:
                        via = grpc_via(name, visiting)
                        if via:
                            found = [name] + via
                            break
            visiting.discard(target)
            memo[target] = found
            return found

        def grpc_free_entry(folder):
            for entry in no_grpc:
                if (folder + "/").startswith(entry):
                    return entry
            return None

        for target, own, own_folder, linked, path, line in links:
            zone = grpc_free_entry(own_folder) if own_folder else None
            if zone is None:
                continue
            if GRPC_LIBRARY_RE.match(linked):
                chain = [linked]
            elif linked in libraries and grpc_free_entry(owners[linked][1]) is None:
                via = grpc_via(linked, set())
                if not via:
                    continue
                chain = [linked] + via
            else:
                continue
            self.report((target, "gRPC"),
                        "%s:%d: target %s (folder %s) links gRPC (%s): targets under %s are"
                        " gRPC-free" % (path, line, target, own_folder + "/", " -> ".join(chain),
                                        zone))

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
        print("CMake links to project libraries of other folders:")
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


class CmakeScript:
    """What one CMakeLists.txt says about targets: those it makes
    [(target, kind, line)], kind one of "library", "interface", "imported",
    "alias:<target>", "other" (executables, modules, custom targets); its
    target_link_libraries calls [(target, [(argument, line)])]; and its
    variables at the end (name -> list of values)."""

    def __init__(self, variables):
        self.made = []
        self.links = []
        self.variables = dict(variables)


def read_cmake(text, variables):
    """Follows the commands of a CMakeLists.txt that make and link targets.
    `${VAR}` takes the values set() and list(APPEND) gave it in this file or
    its parent folders' (both branches of an if() count); a foreach() body
    runs once per item, or once with its variable left as `${v}` when the
    items are unknown (a target `${t}_test` still belongs to the folder).
    function() and macro() bodies are read where they are defined."""
    script = CmakeScript(variables)
    run_cmake(parse_cmake(text), script, 0)
    return script


def run_cmake(commands, script, if_depth):
    k = 0
    while k < len(commands):
        name, args = commands[k]
        k += 1
        if name in BLOCK_ENDS:
            end = BLOCK_ENDS[name]
            depth, body = 1, []
            while k < len(commands):
                if commands[k][0] == name:
                    depth += 1
                elif commands[k][0] == end:
                    depth -= 1
                    if not depth:
                        k += 1
                        break
                body.append(commands[k])
                k += 1
            if name == "foreach":
                run_foreach(args, body, script, if_depth)
            else:
                run_cmake(body, script, if_depth + 1)
            continue
        if name == "if":
            if_depth += 1
        elif name == "endif":
            if_depth = max(0, if_depth - 1)
        args = expand_args(args, script.variables)
        if not args:
            continue
        first = args[0][0]
        if name == "set" or (name == "list" and first in ("APPEND", "PREPEND")):
            if name == "list":
                args = args[1:]
                if not args:
                    continue
            var = args[0][0]
            values = []
            for value, _ in args[1:]:
                if value in ("CACHE", "PARENT_SCOPE"):
                    break
                values.append(value)
            old = script.variables.get(var, [])
            if name == "list":
                script.variables[var] = values + old if first == "PREPEND" else old + values
            elif if_depth:
                script.variables[var] = old + [v for v in values if v not in old]
            else:
                script.variables[var] = values
        elif name == "add_library" or name.endswith("_add_library"):
            kind = "library"
            if len(args) > 1:
                if args[1][0] == "ALIAS":
                    kind = "alias:" + (args[2][0] if len(args) > 2 else "")
                elif any(a == "IMPORTED" for a, _ in args[1:3]):
                    kind = "imported"
                elif args[1][0] == "INTERFACE":
                    kind = "interface"
            script.made.append((first, kind, args[0][1]))
        elif name in ("add_executable", "add_custom_target") or \
                name.endswith(("_add_executable", "_add_module")):
            if not any(a in ("ALIAS", "IMPORTED") for a, _ in args[1:3]):
                script.made.append((first, "other", args[0][1]))
        elif name == "target_link_libraries":
            script.links.append((first, args[1:]))


def run_foreach(args, body, script, if_depth):
    """foreach(v a b c), foreach(v IN ITEMS ... LISTS ...), foreach(v RANGE ...)."""
    if not args:
        return
    var = args[0][0]
    rest = expand_args(args[1:], script.variables)
    words = [w for w, _ in rest]
    items = []
    if words and words[0] == "IN":
        mode = None
        for word in words[1:]:
            if word in ("ITEMS", "LISTS", "ZIP_LISTS"):
                mode = word
            elif mode == "ITEMS":
                items.append(word)
            elif mode == "LISTS":
                items.extend(script.variables.get(word, []))
    elif words and words[0] == "RANGE":
        try:
            bounds = [int(w) for w in words[1:]]
            start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else \
                (bounds + [1])[:3]
            items = [str(i) for i in range(start, stop + 1, max(step, 1))]
        except (ValueError, IndexError):
            items = []
    else:
        items = words
    known = [i for i in items if not VAR_REF_RE.search(i)]
    saved = script.variables.pop(var, None)
    if not known:
        run_cmake(body, script, if_depth)
    for item in known:
        script.variables[var] = [item]
        run_cmake(body, script, if_depth)
    script.variables.pop(var, None)
    if saved is not None:
        script.variables[var] = saved


def expand_args(args, variables):
    """The arguments with the known `${VAR}`s replaced; an unquoted argument
    splits into a list at ';', a quoted one keeps its quotes off and stays one."""
    out = []
    for word, line in args:
        quoted = len(word) >= 2 and word[0] == '"' and word[-1] == '"'
        text = word[1:-1] if quoted else word
        for _ in range(8):  # ${a_${b}}: the inner one first
            new = VAR_REF_RE.sub(
                lambda m: ";".join(variables[m.group(1)]) if m.group(1) in variables
                else m.group(0), text)
            if new == text:
                break
            text = new
        if quoted:
            out.append((text, line))
        else:
            out.extend((part, line) for part in text.split(";") if part)
    return out


def link_names(word):
    """The names a target_link_libraries argument links: the word itself, or
    each name inside a generator expression ($<$<BOOL:x>:pst_a;pst_b>);
    `${VAR}`s left unknown are dropped."""
    return LINK_NAME_RE.findall(VAR_REF_RE.sub(" ", word))


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
    print("check_layers: %d files, %d includes of our folders, %d CMake links to project libraries "
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
