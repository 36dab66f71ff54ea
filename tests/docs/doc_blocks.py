"""Runs the code blocks of a Markdown page that are marked as runnable, and checks the output
they promise. ctest runs it once per page (tests/docs/CMakeLists.txt: `docs.<page>`).

A marker is an HTML comment (invisible on GitHub) right before a fenced block:

    <!-- doc-test: sh
    expect: slowest rank: 2
    -->
    ```sh
    ranktime summary t.json
    ```

The first line names what to do with the block:

    sh            run it with bash (`set -e -o pipefail`)
    write PATH    write it to PATH, for the blocks after it
    same-as PATH  it must be the repository's file PATH (trailing whitespace aside)

and each further line is an option:

    expect: REGEX   searched (re.MULTILINE) in the block's stdout and stderr together;
                    one line per promise, a fragment or a pattern, never the whole output
    status: N       the exit status the block must end with (default 0)
    timeout: S      seconds (default 120)

A page runs in a directory of its own that holds a link to every top-level entry of the source
tree and `build`, a link to the build directory, so commands read as from the root of a checkout
and whatever they write stays there. HOME is a fresh directory in it (so `~/.local` is an empty
prefix), and PATH starts with the build directory, where `bash scripts/setup.sh` leaves
`ranktime` (README: "where the command is"). The blocks of a page run in order and share the
working directory and exported variables.

    doc_blocks.py --source DIR --build DIR --work DIR PAGE.md   runs PAGE's marked blocks
    doc_blocks.py --list PAGE.md...                             parses and lists them
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

MARKER = "<!-- doc-test:"
KINDS = ("sh", "write", "same-as")
OPTIONS = ("expect", "status", "timeout")


class MarkerError(Exception):
    pass


@dataclass
class Block:
    page: str
    line: int  # of the marker, from 1
    kind: str
    path: str = ""  # for write and same-as
    text: str = ""
    expect: list = field(default_factory=list)
    status: int = 0
    timeout: float = 120.0

    def where(self):
        return "%s:%d" % (self.page, self.line)


def parse_marker(lines, page, line):
    """The Block a marker's lines (without `<!--` and `-->`) describe."""
    head = lines[0].split()
    if not head or head[0] not in KINDS:
        raise MarkerError("%s:%d: doc-test kind must be one of %s, not %r"
                          % (page, line, ", ".join(KINDS), lines[0]))
    block = Block(page, line, head[0])
    if block.kind == "sh":
        if len(head) != 1:
            raise MarkerError("%s:%d: 'sh' takes no argument" % (page, line))
    elif len(head) != 2:
        raise MarkerError("%s:%d: '%s' takes one path" % (page, line, block.kind))
    else:
        block.path = head[1]
    for option in lines[1:]:
        if not option.strip():
            continue
        key, sep, value = option.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or key not in OPTIONS:
            raise MarkerError("%s:%d: unknown doc-test option %r (known: %s)"
                              % (page, line, option.strip(), ", ".join(OPTIONS)))
        if key == "expect":
            try:
                re.compile(value)
            except re.error as e:
                raise MarkerError("%s:%d: bad expect pattern %r: %s" % (page, line, value, e))
            block.expect.append(value)
        elif key == "status":
            block.status = int(value)
        else:
            block.timeout = float(value)
    if block.kind != "sh" and (block.expect or block.status):
        raise MarkerError("%s:%d: expect and status are for 'sh' blocks" % (page, line))
    return block


def parse_page(path, name=None):
    """Every marked block of the Markdown file `path`, in page order."""
    name = name or os.path.basename(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith(MARKER):
            i += 1
            continue
        start = i
        marker = [lines[i][len(MARKER):]]
        while "-->" not in marker[-1]:
            i += 1
            if i == len(lines):
                raise MarkerError("%s:%d: doc-test marker is never closed" % (name, start + 1))
            marker.append(lines[i])
        marker[-1] = marker[-1][:marker[-1].index("-->")]
        block = parse_marker([m for m in marker if m.strip()] or [""], name, start + 1)
        i += 1
        fence = re.match(r"^(```+|~~~+)", lines[i]) if i < len(lines) else None
        if not fence:
            raise MarkerError("%s:%d: a doc-test marker must be followed at once by a fenced "
                              "block" % (name, start + 1))
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence.group(1)):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise MarkerError("%s:%d: the fenced block is never closed" % (name, start + 1))
        block.text = "\n".join(body) + "\n"
        blocks.append(block)
        i += 1
    return blocks


def make_workspace(source, build, work):
    """A fresh page directory: links to the source tree's top-level entries, build, and HOME."""
    if os.path.isdir(work):
        shutil.rmtree(work)
    os.makedirs(os.path.join(work, "home"))
    for entry in os.listdir(source):
        # Not build directories, ignored artefacts or dotfiles: only the checkout a user has.
        if entry.startswith((".", "build")) or entry.endswith(".egg-info"):
            continue
        os.symlink(os.path.join(source, entry), os.path.join(work, entry))
    os.symlink(build, os.path.join(work, "build"))


def page_environment(work):
    env = dict(os.environ)
    env["HOME"] = os.path.join(work, "home")
    env["PATH"] = os.path.join(work, "build") + os.pathsep + env.get("PATH", "")
    # What the test suite's own mpirun calls pass as flags: more ranks than cores, no single-copy
    # (CMA) transfers, which containers without ptrace rights refuse, and root.
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    if os.geteuid() == 0:  # as `ranktime run` does for root
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Unbuffered, Python writes a print() in pieces, and the pieces of ranks printing at once
    # interleave within a line; buffered, each line is one write.
    env.pop("PYTHONUNBUFFERED", None)
    return env


STATE = ".doc-test-state"  # the exported variables and working directory after the last block


def run_sh(block, work, env):
    """Runs an sh block in the page's state; returns (status, output)."""
    state = os.path.join(work, STATE)
    quoted = shlex.quote(state)
    script = "\n".join([
        "if [ -f %s ]; then . %s; fi" % (quoted, quoted),
        # Saved however the block ends (set -e may end it early).
        """trap '{ export -p; echo "cd $(printf %%q "$PWD")"; } > %s' EXIT""" % quoted,
        "set -e -o pipefail",
        block.text,
    ])
    process = subprocess.Popen(["bash", "-c", script], cwd=work, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=block.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # mpirun and its ranks with it
        output, _ = process.communicate()
        return None, output.decode(errors="replace")
    return process.returncode, output.decode(errors="replace")


def check_block(block, source, work, env):
    """Runs or checks one block; returns a list of problems (empty: it passed)."""
    if block.kind == "write":
        path = os.path.join(work, block.path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(block.text)
        return []
    if block.kind == "same-as":
        with open(os.path.join(source, block.path), encoding="utf-8") as f:
            file_lines = [line.rstrip() for line in f.read().rstrip().split("\n")]
        block_lines = [line.rstrip() for line in block.text.rstrip().split("\n")]
        if file_lines == block_lines:
            return []
        for n, (a, b) in enumerate(zip(block_lines, file_lines)):
            if a != b:
                return ["differs from %s at its line %d:\n  page: %s\n  file: %s"
                        % (block.path, n + 1, a, b)]
        return ["differs from %s: %d lines on the page, %d in the file"
                % (block.path, len(block_lines), len(file_lines))]
    status, output = run_sh(block, work, env)
    problems = []
    if status is None:
        problems.append("did not finish within %g s" % block.timeout)
    elif status != block.status:
        problems.append("exit status %d, expected %d" % (status, block.status))
    for pattern in block.expect:
        if not re.search(pattern, output, re.MULTILINE):
            problems.append("output lacks /%s/" % pattern)
    if problems:
        problems.append("output:\n" + output.rstrip())
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="+")
    parser.add_argument("--list", action="store_true", help="parse and list, run nothing")
    parser.add_argument("--source", help="the source tree")
    parser.add_argument("--build", help="the build directory")
    parser.add_argument("--work", help="a scratch directory for the page (emptied first)")
    args = parser.parse_args()
    try:
        pages = [(page, parse_page(page)) for page in args.pages]
    except MarkerError as e:
        sys.exit("doc_blocks: %s" % e)
    if args.list:
        for page, blocks in pages:
            for b in blocks:
                print("%s: %s %s%s" % (b.where(), b.kind, b.path,
                                       "".join("\n    expect: " + e for e in b.expect)))
        return
    if len(pages) != 1 or not (args.source and args.build and args.work):
        parser.error("running needs one page and --source, --build and --work")
    page, blocks = pages[0]
    if not blocks:
        sys.exit("doc_blocks: %s has no doc-test blocks" % page)
    source, work = os.path.abspath(args.source), os.path.abspath(args.work)
    make_workspace(source, os.path.abspath(args.build), work)
    env = page_environment(work)
    failed = 0
    for block in blocks:
        started = time.monotonic()
        problems = check_block(block, source, work, env)
        first = block.text.strip().split("\n")[0]
        print("%s %s: %s %s (%.1f s)" % ("FAIL" if problems else "ok  ", block.where(),
                                        block.kind, block.path or first,
                                        time.monotonic() - started), flush=True)
        for problem in problems:
            print("    " + problem.replace("\n", "\n    "))
        failed += bool(problems)
    print("%s: %d of %d blocks passed" % (page, len(blocks) - failed, len(blocks)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
