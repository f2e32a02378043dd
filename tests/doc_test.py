#!/usr/bin/python3
"""The doc test: runs the commands the docs show, as a reader would.

Which blocks run:
  - the repository's README.md: every ```sh block of its tour (the section
    "A five-minute tour"), unless marked `<!-- doc-test: skip -->`;
  - every other file (docs/*.md by default): each fenced ```sh or ```python
    block marked runnable by the comment `<!-- doc-test -->` as the nearest
    non-blank line above its opening fence.

A marker may give smaller settings, for the test only:
    <!-- doc-test: --epochs=1 --rows=8000 -- --max_steps=100 -->
Each `--name=value` before a lone `--` replaces `--name=<anything>` in every
command of the block that shows it; when no command does, it is added to
the block's first command (before that command's ` -- `, if it has one).
What follows the marker's `--` is added at the end of the block's first
command, after its ` -- ` (one is added if it has none): flags that an
example passes on to `pstrain local`.

How they run: files in the order given (README.md first, then docs/ by
name), blocks in file order, all in one scratch directory, as a reader
working through the docs in one shell would: a later block may use what
an earlier one wrote, and two commands that share a directory by accident
meet there. The scratch directory holds a symbolic link to each top-level
entry of the repository, and `build` to the build directory, so that
`build/bin/pstrain`, `examples/...` and `PYTHONPATH=build/python` work as
written and relative outputs stay in it; `/tmp/...` in a block becomes
`<scratch>/tmp/...`. A sh block runs as one bash script (`set -e -o
pipefail`; one line with its `\\` continuations is one command); a python
block runs as a script under /usr/bin/python3, with PYTHONPATH=build/python.
The environment has no PYTHONPATH, PSTRAIN_BIN or TF_CONFIG: a command must
say what it needs, as the docs show it. Each block has --timeout seconds.

A failing command is reported as FILE:LINE: with the command, its exit
status and the tail of its output; the blocks of other files still run.
Exit status: 0 when every block succeeded; 1 when one failed, or when there
was nothing to run (no tour, no marked block); 2 for bad usage.

Usage: tests/doc_test.py --build_dir=build [--timeout=S] [--keep] [FILE...]
"""

import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, NamedTuple, Optional, Tuple

TOUR_HEADING = "## A five-minute tour"
MARKER = re.compile(r"^\s*<!--\s*doc-test(?::\s*(.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
RUNNABLE = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python"}
TMP = re.compile(r"(?<![\w./~-])/tmp(?=/|\s|$|['\"):;])")
SCRIPT_HEADER = 3  # lines of the bash script before the block's first


class Block(NamedTuple):
    path: str          # as reported
    line: int          # 1-based line of the block's first content line
    kind: str          # "sh" or "python"
    lines: List[str]   # dedented content
    marker: Optional[str]  # the marker's text after "doc-test:", "" for a bare one


class Command(NamedTuple):
    first: int  # 0-based index of its first line in the block
    last: int   # and of its last (continuations)


def parse_blocks(path: str, shown: str, tour: bool) -> List[Block]:
    """The runnable blocks of a markdown file. In tour mode (README.md),
    every sh block under TOUR_HEADING that is not marked skip; otherwise
    every marked sh or python block."""
    with open(path) as f:
        text = f.read().split("\n")
    blocks, in_tour, i = [], False, 0
    while i < len(text):
        line = text[i]
        if line.startswith("## "):
            in_tour = line.strip() == TOUR_HEADING
        opened = FENCE.match(line)
        if not opened:
            i += 1
            continue
        indent, lang = opened.group(1), opened.group(2).lower()
        end = i + 1
        while end < len(text) and not re.match(r"^\s*```\s*$", text[end]):
            end += 1
        if end == len(text):
            raise ValueError(f"{shown}:{i + 1}: a code block that is never closed")
        above = i - 1
        while above >= 0 and not text[above].strip():
            above -= 1
        marked = MARKER.match(text[above]) if above >= 0 else None
        marker = (marked.group(1) or "") if marked else None
        wanted = (tour and in_tour and lang in ("sh", "bash")) or (not tour and marked)
        if marker is not None and marker.strip() == "skip":
            wanted = False
        if wanted:
            if lang not in RUNNABLE:
                raise ValueError(f"{shown}:{above + 1}: a doc-test marker on a ```{lang} block "
                                 "(only sh and python blocks run)")
            content = [l[len(indent):] if l.startswith(indent) else l.lstrip()
                       for l in text[i + 1:end]]
            blocks.append(Block(shown, i + 2, RUNNABLE[lang], content, marker))
        i = end + 1
    return blocks


def commands_of(lines: List[str]) -> List[Command]:
    """The commands of a sh block: each line with its `\\` continuations,
    blank lines and comment lines left out."""
    commands, i = [], 0
    while i < len(lines):
        if not lines[i].strip() or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        first = i
        while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
        commands.append(Command(first, i))
        i += 1
    return commands


DASHES = re.compile(r"\s--(\s|$)")


def split_tail(line: str) -> Tuple[str, str]:
    """(the command text of a line, its trailing ` \\` or ` # comment`)."""
    body = line.rstrip()
    hashed = re.search(r"\s+#[^'\"]*$", body)
    if hashed:
        return body[:hashed.start()], body[hashed.start():]
    if body.endswith("\\"):
        return body[:-1].rstrip(), " \\"
    return body, ""


def insert_args(line: str, args: str, at_end: bool = False) -> str:
    """`line` with `args` added before its ` -- ` if it has one (and not
    at_end), else at its end; before a trailing `\\` or `# comment`."""
    body, tail = split_tail(line)
    dashes = None if at_end else DASHES.search(body)
    if dashes:
        return f"{body[:dashes.start()]} {args}{body[dashes.start():]}{tail}"
    return f"{body} {args}{tail}"


def apply_marker(block: Block) -> List[str]:
    """The block's lines with the marker's settings applied (sh blocks)."""
    lines = list(block.lines)
    if not block.marker:
        return lines
    where = f"{block.path}:{block.line - 1}"
    try:
        words = shlex.split(block.marker)
    except ValueError as e:
        raise ValueError(f"{where}: the doc-test marker does not parse: {e}") from None
    if block.kind != "sh":
        raise ValueError(f"{where}: a doc-test marker with settings on a {block.kind} block")
    passed = words[words.index("--") + 1:] if "--" in words else []
    own = words[:words.index("--")] if "--" in words else words
    commands = commands_of(lines)
    if not commands:
        raise ValueError(f"{where}: a doc-test marker on a block with no command")
    first = commands[0]
    for word in own:
        flag = re.match(r"^(--[\w.-]+)=(.*)$", word)
        if not flag:
            raise ValueError(f"{where}: doc-test marker: '{word}' is not --name=value")
        pattern = re.compile(r"(?<![^\s'\"])" + re.escape(flag.group(1)) + r"=[^\s'\"]*")
        shown = [k for k, l in enumerate(lines) if pattern.search(l)]
        for k in shown:
            lines[k] = pattern.sub(lambda _: shlex.quote(word), lines[k])
        if not shown:
            # Before the first command's ` -- ` (on whichever line it is), or
            # at its end.
            at = next((k for k in range(first.first, first.last + 1)
                       if DASHES.search(split_tail(lines[k])[0])), first.last)
            lines[at] = insert_args(lines[at], shlex.quote(word))
    if passed:
        has_dashes = any(DASHES.search(split_tail(lines[k])[0])
                         for k in range(first.first, first.last + 1))
        lines[first.last] = insert_args(
            lines[first.last], ("" if has_dashes else "-- ") + shlex.join(passed), at_end=True)
    return lines


class Runner:
    """Runs blocks in one scratch directory and reports each."""

    def __init__(self, repo: str, build_dir: str, timeout: float, keep: bool):
        self.repo, self.timeout, self.keep = repo, timeout, keep
        self.scratch = tempfile.mkdtemp(prefix="pstrain-doc-test-")
        os.makedirs(os.path.join(self.scratch, "tmp"))
        os.makedirs(os.path.join(self.scratch, ".doc-test"))
        for entry in os.listdir(repo):
            if entry in ("build", ".git", "tmp", ".doc-test") or entry.startswith("build-"):
                continue
            os.symlink(os.path.join(repo, entry), os.path.join(self.scratch, entry))
        os.symlink(os.path.abspath(build_dir), os.path.join(self.scratch, "build"))
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "PSTRAIN_BIN", "TF_CONFIG")}
        self.failures = 0
        self.ran = 0

    def close(self) -> None:
        if self.keep:
            print(f"doc test: the scratch directory is kept: {self.scratch}")
        else:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def rewrite(self, text: str) -> str:
        return TMP.sub(os.path.join(self.scratch, "tmp"), text)

    def _run(self, argv: List[str], log: str, env: dict) -> Tuple[Optional[int], float]:
        """Runs argv in its own process group; (exit status or None on a
        timeout, seconds). The whole group is killed on a timeout."""
        start = time.time()
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, cwd=self.scratch, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                code = None
            # Nothing it started outlives it (a launcher's daemons die with it).
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                if sig == signal.SIGTERM:
                    time.sleep(0.5)
            proc.wait()
        return code, time.time() - start

    def run(self, block: Block) -> bool:
        name = f"{block.path.strip('./').replace('/', '_')}-{block.line}"
        work = os.path.join(self.scratch, ".doc-test")
        log = os.path.join(work, name + ".log")
        env = dict(self.env)
        if block.kind == "sh":
            lines = [self.rewrite(l) for l in apply_marker(block)]
            failed_at = os.path.join(work, name + ".failed")
            running_at = os.path.join(work, name + ".running")
            script = os.path.join(work, name + ".sh")
            with open(script, "w") as f:
                f.write("set -e -o pipefail\n"
                        "trap '[ -s \"$DOC_TEST_FAILED_AT\" ] || "
                        "echo $LINENO > \"$DOC_TEST_FAILED_AT\"' ERR\n"
                        "trap 'echo $LINENO > \"$DOC_TEST_RUNNING_AT\"' DEBUG\n")
                f.write("\n".join(lines) + "\n")
            env.update(DOC_TEST_FAILED_AT=failed_at, DOC_TEST_RUNNING_AT=running_at)
            code, seconds = self._run(["bash", script], log, env)
            commands = commands_of(lines)
        else:
            lines = [self.rewrite(l) for l in block.lines]
            script = os.path.join(work, name + ".py")
            with open(script, "w") as f:
                f.write("\n".join(lines) + "\n")
            env["PYTHONPATH"] = os.path.join(self.scratch, "build", "python")
            code, seconds = self._run(["/usr/bin/python3", script], log, env)
            commands = []  # a failure is reported at the line that raised
        self.ran += 1
        if code == 0:
            what = f"{len(commands)} command(s)" if block.kind == "sh" else "python"
            print(f"{block.path}:{block.line}: ok ({what}, {seconds:.1f} s)", flush=True)
            return True
        self.failures += 1
        with open(log, errors="replace") as f:
            output = f.read()
        index = self._failed_line(block, code, output, script, work, name)
        command = next((c for c in commands if c.first <= index <= c.last), None)
        shown = lines[command.first:command.last + 1] if command else lines[index:index + 1]
        line = block.line + (command.first if command else index)
        why = f"timed out after {self.timeout:.0f} s" if code is None else f"exit status {code}"
        tail = output.rstrip().split("\n")[-40:]
        print(f"{block.path}:{line}: FAILED ({why}, {seconds:.1f} s):\n" +
              "\n".join("    " + l for l in shown) + "\n  its output (last 40 lines):\n" +
              "\n".join("  | " + l for l in tail), flush=True)
        return False

    def _failed_line(self, block, code, output, script, work, name) -> int:
        """The 0-based index in the block of the line that failed (or was
        running at a timeout)."""
        if block.kind == "python":
            found = re.findall(r'File "' + re.escape(script) + r'", line (\d+)', output)
            return int(found[-1]) - 1 if found else 0
        for suffix in ((".failed", ".running") if code is not None else (".running",)):
            try:
                with open(os.path.join(work, name + suffix)) as f:
                    return max(0, int(f.read().split()[0]) - SCRIPT_HEADER - 1)
            except (OSError, ValueError, IndexError):
                continue
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="the repository root")
    parser.add_argument("--build_dir", required=True, help="the build tree (holds bin/, python/)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for each block")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("files", nargs="*",
                        help="markdown files (default: README.md, then docs/*.md); "
                             "the repository's README.md runs its tour")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.build_dir, "bin")):
        print(f"doc test: {args.build_dir} has no bin/: build first", file=sys.stderr)
        return 2
    files = args.files or [os.path.join(args.repo, "README.md")] + sorted(
        glob.glob(os.path.join(args.repo, "docs", "*.md")))
    blocks = []
    try:
        for path in files:
            inside = os.path.abspath(path).startswith(os.path.abspath(args.repo) + os.sep)
            shown = os.path.relpath(path, args.repo) if inside and os.path.isabs(path) else path
            tour = os.path.abspath(path) == os.path.join(os.path.abspath(args.repo), "README.md")
            found = parse_blocks(path, shown, tour)
            if tour and not found:
                print(f"doc test: {shown} has no sh block under '{TOUR_HEADING}'", flush=True)
                return 1
            blocks += found
        for block in blocks:
            apply_marker(block)  # a bad marker fails before anything runs
    except (OSError, ValueError) as e:
        print(f"doc test: {e}", flush=True)
        return 1
    if not blocks:
        print("doc test: no block to run", flush=True)
        return 1
    runner = Runner(args.repo, args.build_dir, args.timeout, args.keep)
    start = time.time()
    try:
        for block in blocks:
            runner.run(block)
    finally:
        runner.close()
    print(f"doc test: {runner.ran} block(s) from {len(files)} file(s) in "
          f"{time.time() - start:.0f} s: " +
          (f"{runner.failures} failed" if runner.failures else "every one succeeded"), flush=True)
    return 1 if runner.failures else 0


if __name__ == "__main__":
    sys.exit(main())
