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

The code, by concern, all in tests/layers/:
  check_layers.py    this entry point: the Checker (exceptions become notes,
                     stale ones errors, the row rule, --graph) and main();
  layers_table.py    reads the table, the layers-rule lines, exceptions.txt;
  layers_sources.py  lists the tree's files; checks includes and the rules
                     on C++ files;
  layers_cmake.py    reads CMakeLists.txt: targets made, links, variables;
  layers_links.py    checks the link graph and the no-grpc rule on links.
"""

import argparse
import os
import sys

import layers_links
import layers_sources
from layers_table import InputError, read_exceptions, read_table


class Checker:
    """One run of the checks on one tree: the table, the listed exceptions,
    and what the checks of layers_sources and layers_links found (errors,
    notes for listed exceptions, counts, and the graph for --graph)."""

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
    files = layers_sources.list_files(root)
    layers_sources.check_sources(checker, files)
    layers_sources.check_rules(checker, files)
    layers_links.check_cmake(checker, files)
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
