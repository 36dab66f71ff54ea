"""horovod.torch.mpi_ops is ranktime.torch."""
from ranktime.torch import *  # noqa: F401,F403
