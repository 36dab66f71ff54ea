"""Starting and stopping the timeline at run time (every rank calls these, as collectives)."""

import contextlib
import os

from . import _core


def start_timeline(path, mark_cycles=False):
    """Starts writing the timeline to `path` (rank 0 writes it; all ranks contribute).

    Collective: every rank calls it. Starting with a new path writes a new, complete file.
    `mark_cycles` adds a CYCLE_START instant per background cycle.
    """
    _core.start_timeline(os.fspath(path), bool(mark_cycles))


def stop_timeline():
    """Stops the timeline and completes its file. Collective: every rank calls it."""
    _core.stop_timeline()


def mark_step(step=None):
    """Marks the start of a training step on this rank: `step`, or the one after this rank's
    last (from 0). Every rank calls it at the start of each step; rank 0's timeline shows each
    rank's steps as STEP slices, and TIMELINE_STEPS windows count them. Cheap, no communication.
    """
    _core.mark_step(None if step is None else int(step))


@contextlib.contextmanager
def timeline(path, mark_cycles=False):
    """``with ranktime.timeline("t.json"):`` records the block's collectives to t.json."""
    start_timeline(path, mark_cycles)
    try:
        yield path
    finally:
        stop_timeline()
