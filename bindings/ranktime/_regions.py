"""Regions: named parts of a rank's own work in a step, on the timeline (docs/python.md)."""

import functools

from . import _core

# Begins region `name` on this thread; region_end(name) ends it, the innermost open region on
# this thread, or raises RanktimeError naming the region and the rank.
region_begin = _core.region_begin
region_end = _core.region_end


class region:
    """``with ranktime.region("data"):`` or ``@ranktime.region("forward")``: the block, or each
    call of the function, is a region of this rank, a slice on its ``regions`` thread in rank 0's
    timeline (with ``blocked_us``, the time it spent waiting inside ranktime). Regions nest.
    """

    __slots__ = ("name",)

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError(f"ranktime.region: the name must be a str, not {type(name).__name__}")
        self.name = name

    def __enter__(self):
        region_begin(self.name)
        return self

    def __exit__(self, exc_type, exc, traceback):
        region_end(self.name)
        return False

    def __call__(self, function):
        name = self.name

        @functools.wraps(function)
        def in_region(*args, **kwargs):
            region_begin(name)
            try:
                return function(*args, **kwargs)
            finally:
                region_end(name)

        return in_region

    def __repr__(self):
        return f"ranktime.region({self.name!r})"
