"""The `ranktime` command that `pip install .` puts on PATH: runs the ranktime executable bundled
in this package (run, summary, check; see docs/cli.md)."""

import os
import sys


def main():
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "ranktime")
    if not os.access(binary, os.X_OK):
        sys.exit("ranktime: this package has no bundled command (%s): it was not installed by "
                 "`pip install .`; the command is <build>/ranktime, or <prefix>/bin/ranktime after "
                 "`cmake --install`" % binary)
    os.execv(binary, [binary] + sys.argv[1:])
