"""ranktime.torch.profile: torch.profiler, anchored in ranktime's clock so that `ranktime merge`
can put every rank's trace on the timeline (docs/python.md).

Each anchor is two profiler slices: ``ranktime.anchor.N``, during which the rank reads its
ranktime clock, then ``ranktime.anchor.N.ns.T.rank.R.pid.P.host.H`` carrying that reading and who
took it. The merge maps the profiler's time base onto ranktime's through them, whatever base the
torch version uses, and rejects a file whose recorder was not this run's rank R.
"""

import os
import socket

import torch

from . import _core

__all__ = ["profile"]


class profile:
    """``torch.profiler.profile`` (every other argument is the profiler's, by keyword) that writes
    ``DIR/profile.rank<R>.json`` on each rank R and anchors it at the start, at each ``step()``
    and at the end. Use it as the profiler: ``with ranktime.torch.profile(dir=d) as p: ...
    p.step()``. Needs ranktime.init() first. With a ``schedule``, each finished cycle rewrites the
    file (the last one stays) and ``on_trace_ready``, if given, is called after.
    """

    def __init__(self, *, dir, on_trace_ready=None, **kwargs):
        if not _core.is_initialized():
            raise RuntimeError("ranktime.torch.profile: call ranktime.init() first")
        self._rank = _core.rank()
        os.makedirs(dir, exist_ok=True)
        self.path = os.path.join(dir, "profile.rank%d.json" % self._rank)
        self._user_ready = on_trace_ready
        self._who = "rank.%d.pid.%d.host.%s" % (self._rank, os.getpid(), socket.gethostname())
        self._anchors = 0
        self._profiler = torch.profiler.profile(on_trace_ready=self._ready, **kwargs)

    def _anchor(self):
        n = self._anchors
        self._anchors += 1
        with torch.profiler.record_function("ranktime.anchor.%d" % n):
            at = _core.clock_ns()
        with torch.profiler.record_function("ranktime.anchor.%d.ns.%d.%s" % (n, at, self._who)):
            pass

    def _ready(self, profiler):
        # Written beside and renamed: a reader never sees half a file.
        temp = "%s.%d.tmp" % (self.path, os.getpid())
        profiler.export_chrome_trace(temp)
        os.replace(temp, self.path)
        if self._user_ready is not None:
            self._user_ready(profiler)

    def __enter__(self):
        self._profiler.__enter__()
        self._anchor()
        return self

    def step(self):
        # Before (the step that ends may be a cycle's last) and after (the next may start one).
        self._anchor()
        self._profiler.step()
        self._anchor()

    def __exit__(self, exc_type, exc, tb):
        self._anchor()
        return self._profiler.__exit__(exc_type, exc, tb)

    def __getattr__(self, name):
        return getattr(self._profiler, name)
