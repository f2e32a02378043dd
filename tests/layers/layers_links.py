"""The CMake side of check_layers.py: the link graph of every CMakeLists.txt
held to the Layers table (as an include would be), and the no-grpc rule on
links (no gRPC library, directly or through a project library).

Each check takes the Checker of check_layers.py, which holds the table and
collects the errors, the notes (listed exceptions) and the counts.
"""

import os
import re

from layers_cmake import link_names, read_cmake

# The gRPC libraries a target may link (gRPC::grpc++ and its kin from
# find_package(gRPC), or their bare names).
GRPC_LIBRARY_RE = re.compile(r"^(gRPC::.+|grpc(\+\+)?(_[a-z_]+)?|gpr)$")


def check_cmake(checker, files):
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
            entry = checker.table.entry_of(folder + "/")
            if entry is None:
                checker.errors.append("%s:1: folder %s holds a CMakeLists.txt but is not in"
                                      " the Layers table" % (path, folder.split("/")[0] + "/"))
        else:
            entry = ""
        parent = folder
        while parent and parent not in variables_of:
            parent = os.path.dirname(parent)
        try:
            with open(os.path.join(checker.root, path), encoding="utf-8",
                      errors="replace") as f:
                script = read_cmake(f.read(), variables_of.get(parent, {}))
        except OSError as e:
            checker.errors.append("%s: cannot read: %s" % (path, e))
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
                    checker.errors.append(
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
                checker.errors.append("%s:%d: target %s links %s, which no CMakeLists.txt makes" %
                                      (path, line, target, linked))
            continue
        checker.links_checked += 1
        other = owners[linked][0]
        if own is None or other is None:
            continue  # a folder missing from the table: reported above
        own_row = checker.table.rows[own] if own else 0
        other_row = checker.table.rows[other] if other else 0
        if other == "" or other == own:
            verdict = None  # the top level's INTERFACE targets go everywhere
        elif own == "":
            verdict = "the top-level CMakeLists.txt links only its own targets"
        else:
            verdict = checker.why_not(own, other)
        checker.link_edges[(target, own or "/", linked, other or "/")] = verdict
        if verdict:
            checker.report((target, linked),
                           "%s:%d: target %s (folder %s, row %d) links %s (folder %s, row %d):"
                           " %s" % (path, line, target, own or "/", own_row, linked,
                                    other or "/", other_row, verdict))
    check_grpc_links(checker, links, deps, libraries, owners)


def check_grpc_links(checker, links, deps, libraries, owners):
    """The no-grpc rule on the link graph: a target under a no-grpc entry
    links neither a gRPC library (gRPC::grpc++, grpc++, ...) nor a project
    library that brings one in. A project library under a no-grpc entry
    that links gRPC is reported at its own link, not at each user's."""
    no_grpc = checker.table.rules.get("no-grpc", [])
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
        checker.report((target, "gRPC"),
                       "%s:%d: target %s (folder %s) links gRPC (%s): targets under %s are"
                       " gRPC-free" % (path, line, target, own_folder + "/", " -> ".join(chain),
                                       zone))
