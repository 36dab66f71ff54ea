"""A Python rank that never comes back from its own code, for test_doomed_exit.py.

Usage: stuck_program.py KIND, KIND one of sleep, busy, mpi (an MPI_Barrier on MPI_COMM_WORLD
that the other ranks never join). Rank 1 gets stuck after one allreduce; the others' second
allreduce fails when the stall shutdown comes. Prints "PID R <pid>" first and
"ERROR: <message> [rank R]" for the failure, then leaves through the interpreter's exit path.
"""
import ctypes
import os
import sys
import time

import numpy as np

import ranktime


def barrier_on_comm_world():
    # Open MPI's MPI_COMM_WORLD is the address of the symbol ompi_mpi_comm_world; libmpi is
    # already loaded by ranktime's extension module.
    libmpi = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)
    world = ctypes.addressof(ctypes.c_char.in_dll(libmpi, "ompi_mpi_comm_world"))
    libmpi.MPI_Barrier(ctypes.c_void_p(world))


def say(line):
    # One write per line: mpirun forwards each write as it comes, so print()'s separate writes
    # of the text and the newline can interleave with another rank's line.
    os.write(1, (line + "\n").encode())


def get_stuck(kind):
    until = time.monotonic() + 120
    if kind == "sleep":
        time.sleep(120)
    elif kind == "busy":
        while time.monotonic() < until:
            pass
    else:
        barrier_on_comm_world()


kind = sys.argv[1]
ranktime.init()
rank = ranktime.rank()
say(f"PID {rank} {os.getpid()}")
x = np.ones(16, np.float32)
ranktime.allreduce(x, name="stuck.a")
if rank == 1:
    get_stuck(kind)
try:
    ranktime.allreduce(x, name="stuck.b")
except RuntimeError as e:
    say(f"ERROR: {e} [rank {rank}]")
    raise
