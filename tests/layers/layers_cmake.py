"""A small reader of CMakeLists.txt for check_layers.py: the commands of a
file, and from them the targets it makes, the libraries each links, and its
variables (set(), list(APPEND), foreach() followed; nothing is built).
"""

import re

# CMake: a `${VAR}` reference (the innermost, when nested), a name in a
# target_link_libraries argument, and the commands whose body is a block.
VAR_REF_RE = re.compile(r"\$\{([A-Za-z0-9_.+/-]+)\}")
LINK_NAME_RE = re.compile(r"[A-Za-z_][\w.+-]*(?:::[\w.+-]+)*")
BLOCK_ENDS = {"foreach": "endforeach", "function": "endfunction", "macro": "endmacro"}


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
