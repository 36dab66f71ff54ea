"""Facts the documentation states about the code, checked against the code: the doc-test markers
of every page parse, the test names docs/reliability.md lists are ctest's, and the environment
variables the code names are the ones docs/user-guide.md's tables list.

RANKTIME_SOURCE_DIR and RANKTIME_BUILD_DIR say where the tree and the build are (ctest sets them).
"""
import glob
import os
import re
import subprocess
import sys

import pytest

SOURCE = os.environ.get("RANKTIME_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("RANKTIME_BUILD_DIR", os.path.join(SOURCE, "build"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_blocks  # noqa: E402

PAGES = [os.path.join(SOURCE, "README.md")] + sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md")))

# A variable is a name of this shape at the start of a string literal ("RANKTIME_X", 'TIMELINE_Y=').
VARIABLE = r"""["']((?:RANKTIME|TIMELINE)_[A-Z][A-Z0-9_]*)"""
CODE_EXTENSIONS = (".cc", ".h", ".cu", ".py", ".sh")
NOT_CODE = ("tests", "bench", "docs")  # test-only and benchmark-only variables are not the user's


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def table_rows(text):
    """The cells of every Markdown table row in `text` (header and separator rows included)."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.split("\n") if line.startswith("|")]


def ctest_names():
    out = subprocess.run(["ctest", "-N"], cwd=BUILD, capture_output=True, text=True, check=True)
    return re.findall(r"^\s*Test\s+#\d+: (\S+)", out.stdout, re.MULTILINE)


def name_pattern(name):
    """A doc's test name as a regex: `*` is any text, a trailing `...` any continuation."""
    name = name[:-3] + "*" if name.endswith("...") else name
    return re.compile("^" + ".*".join(map(re.escape, name.split("*"))) + "$")


def test_every_marker_parses():
    blocks = [b for page in PAGES for b in doc_blocks.parse_page(page)]
    assert blocks, "no page has doc-test blocks"


def test_reliability_test_names_are_ctest_names():
    """Names outside parentheses are ctest names; names inside are cases within those tests,
    which must exist in tests/ (a GoogleTest Suite.Case or a pytest function)."""
    ctest = ctest_names()
    sources = "\n".join(read(p) for p in glob.glob(os.path.join(SOURCE, "tests", "**", "*"),
                                                    recursive=True)
                        if p.endswith((".cc", ".py", ".h")))
    rows = table_rows(read(os.path.join(SOURCE, "docs", "reliability.md")))
    column = rows[0].index("test")
    missing, checked = [], 0
    for row in rows[2:]:
        cell = row[column]
        inside = " ".join(re.findall(r"\(([^()]*)\)", cell))
        outside = re.sub(r"\([^()]*\)", "", cell)
        for name in re.findall(r"`([^`]+)`", outside):
            checked += 1
            if not any(name_pattern(name).match(t) for t in ctest):
                missing.append("%s: no ctest test matches (ctest -N)" % name)
        for name in re.findall(r"`([^`]+)`", inside):
            checked += 1
            for part in name.replace("...", "").replace("*", "").split("."):
                if part and not re.search(r"\b" + re.escape(part), sources):
                    missing.append("%s: %s appears in no file under tests/" % (name, part))
    assert checked > 20, "the reliability table's test column was not found"
    assert not missing, "docs/reliability.md names tests that do not exist:\n" + "\n".join(missing)


def code_variables():
    found = {}
    for directory, subdirs, files in os.walk(SOURCE):
        if directory == SOURCE:
            subdirs[:] = [d for d in subdirs
                          if d not in NOT_CODE and not d.startswith((".", "build"))]
        for name in files:
            if name.endswith(CODE_EXTENSIONS):
                path = os.path.join(directory, name)
                for variable in re.findall(VARIABLE, read(path)):
                    found.setdefault(variable, os.path.relpath(path, SOURCE))
    return found


def test_every_environment_variable_is_in_the_user_guide():
    in_code = code_variables()
    assert "TIMELINE_FILENAME" in in_code, "the variable search found nothing it should"
    documented = {m.group(1) for row in table_rows(read(os.path.join(SOURCE, "docs",
                                                                     "user-guide.md")))
                  for m in [re.fullmatch(r"`((?:RANKTIME|TIMELINE)_[A-Z0-9_]+)`", row[0])] if m}
    undocumented = ["%s (%s)" % (v, path) for v, path in sorted(in_code.items())
                    if v not in documented]
    assert not undocumented, ("variables the code reads but docs/user-guide.md's tables do not "
                              "list: " + ", ".join(undocumented))
    stale = sorted(documented - set(in_code))
    assert not stale, "docs/user-guide.md lists variables no code reads: " + ", ".join(stale)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
