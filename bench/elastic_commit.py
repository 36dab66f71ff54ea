"""What ranktime.elastic's commit() costs per call: a TorchState of an MLP (PARAMS million float32
parameters, SGD with momentum, so the optimizer state is as large again) committed N times, with
RANKTIME_ELASTIC_DIR set (state saved in memory, written to disk, the hosts_updated broadcast) and
without (in memory only, as Horovod's commit). Prints the median per commit on rank 0.

    ranktime run -np 2 -- /usr/bin/python3 bench/elastic_commit.py [PARAMS_MILLIONS] [N]
"""
import os
import statistics
import sys
import tempfile
import time

import torch

import ranktime.torch as hvd


def median_commit_s(state, n):
    times = []
    for _ in range(n):
        start = time.perf_counter()
        state.commit()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(millions, n):
    hvd.init()
    width = int((millions * 1e6 / 4) ** 0.5)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(4)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()  # momentum buffers: the optimizer state is as large as the model
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    mb = sum(p.numel() for p in model.parameters()) * 4 / 2**20
    with tempfile.TemporaryDirectory() as directory:
        os.environ["RANKTIME_ELASTIC_DIR"] = directory
        on_disk = median_commit_s(state, n)
        files = os.listdir(directory)  # written by each host's first rank only
        size = os.path.getsize(os.path.join(directory, files[0])) / 2**20 if files else 0
    del os.environ["RANKTIME_ELASTIC_DIR"]
    in_memory = median_commit_s(state, n)
    if hvd.rank() == 0:
        print(f"ranks={hvd.size()} model={mb:.1f} MiB commit file={size:.1f} MiB: "
              f"commit to disk {on_disk * 1e3:.1f} ms, in memory only {in_memory * 1e3:.1f} ms "
              f"(median of {n})")
    hvd.shutdown()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 10,
         int(sys.argv[2]) if len(sys.argv) > 2 else 20)
