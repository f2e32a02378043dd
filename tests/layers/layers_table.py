"""The Layers table and the rules of docs/architecture.md, and the known
exceptions of tests/layers/exceptions.txt: what check_layers.py checks the
tree against. The formats are described in check_layers.py's docstring.
"""

import os
import re

MARKER = "<!-- layers-table -->"
ROW_RE = re.compile(r"^\s*(\d+)\s+(.*)$")
FOLDER_RE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/$")
RULE_RE = re.compile(r"^\s*<!--\s*layers-rule:\s*([a-z-]+)\s+(.*?)\s*-->\s*$")
RULES = ("no-grpc", "flags-only-in")


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
