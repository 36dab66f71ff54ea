"""Shared helpers for the `ranktime` CLI tests: where the binaries are and how to run them.

ctest passes the binaries in RANKTIME_CLI, RANKTIME_TRACE_GEN and RANKTIME_SYNTH; run by hand,
the tests look in ./build.
"""
import csv
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _binary(variable, name):
    path = os.environ.get(variable) or str(ROOT / "build" / name)
    return path if os.access(path, os.X_OK) else None


CLI = _binary("RANKTIME_CLI", "ranktime")
TRACE_GEN = _binary("RANKTIME_TRACE_GEN", "tests/cli/ranktime_trace_gen")
SYNTH = _binary("RANKTIME_SYNTH", "ranktime-synth")


@pytest.fixture(scope="session")
def cli():
    if CLI is None:
        pytest.fail("the ranktime binary was not found (set RANKTIME_CLI)")
    return CLI


def ranktime(*args, cwd=None, env=None, timeout=120, input=None):
    """Runs `ranktime ARGS` and returns the CompletedProcess (text mode)."""
    return subprocess.run([CLI, *map(str, args)], cwd=cwd, env=env, timeout=timeout,
                          capture_output=True, text=True, input=input)


def generate(path, **options):
    """Writes a synthetic trace with ranktime_trace_gen; options are its flags (a list repeats
    the flag)."""
    if TRACE_GEN is None:
        pytest.fail("ranktime_trace_gen was not found (set RANKTIME_TRACE_GEN)")
    args = [TRACE_GEN, "-o", str(path)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                args += [flag, str(item)]
        elif value is not False and value is not None:
            args += [flag, str(value)]
    subprocess.run(args, check=True, capture_output=True, timeout=600)
    return path


def csv_tables(text):
    """Splits `summary --format csv` output into {table: [row dicts]}."""
    tables = {}
    for block in text.strip().split("\n\n"):
        rows = list(csv.DictReader(io.StringIO(block)))
        assert rows or block.startswith("table,"), block
        for row in rows:
            tables.setdefault(row.pop("table"), []).append(row)
    return tables


def summary_json(path, *args):
    result = ranktime("summary", path, "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def lateness_by_rank(summary):
    return {row["rank"]: row for row in summary["tables"]["lateness"]}
