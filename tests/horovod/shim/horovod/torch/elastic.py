"""horovod.torch.elastic is ranktime.torch.elastic."""
from ranktime.torch.elastic import *  # noqa: F401,F403
