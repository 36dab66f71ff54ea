"""Default tensor names: stable per call site, unique while in flight, identical on every rank.

Ranks match operations by name, so an unnamed call needs a name that every rank derives the same
way. ``allreduce(x)`` on line 42 of train.py is named ``allreduce.train.py:42.0``. While that
operation is still pending (its handle not waited on), the next call from the same line gets
``.1``, then ``.2``; once a handle is waited on its number is reused. A handle dropped without
waiting keeps its number for good (whether the operation had completed differs between ranks). A synchronous call
in a loop therefore keeps one name (one row in the timeline), and a loop that starts N async
operations and then waits for them uses the same N names every iteration. Ranks that run the same
program make the same calls and waits in the same order, so they pick the same names.
"""

import os
import sys
import threading

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_skipped_dirs = (_PACKAGE_DIR,)  # frames in these are not call sites (see skip_frames_in)

_lock = threading.Lock()
_pending = {}  # "allreduce.train.py:42" -> set of numbers held by pending operations


def _call_site():
    """file:line of the innermost caller outside this package."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_skipped_dirs):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return "%s:%d" % (os.path.basename(frame.f_code.co_filename), frame.f_lineno)


def skip_frames_in(directory):
    """Frames in `directory` are not call sites either (torch.autograd, between ranktime.torch's
    collectives and the caller, so that names do not depend on torch's version)."""
    global _skipped_dirs
    _skipped_dirs += (os.path.join(os.path.abspath(directory), ""),)


def acquire(op):
    """Returns (name, token) for an unnamed `op` call; pass the token to release()."""
    site = "%s.%s" % (op, _call_site())
    with _lock:
        held = _pending.setdefault(site, set())
        number = 0
        while number in held:
            number += 1
        held.add(number)
    return "%s.%d" % (site, number), (site, number)


def release(token):
    site, number = token
    with _lock:
        held = _pending.get(site)
        if held is not None:
            held.discard(number)
            if not held:
                del _pending[site]
