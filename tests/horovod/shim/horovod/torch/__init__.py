"""horovod.torch is ranktime.torch."""
from ranktime.torch import *  # noqa: F401,F403
