"""The job of test_elastic.py: one attempt of an elastic job, as `ranktime run`'s elastic loop
starts it (RANKTIME_ELASTIC_DIR, RANKTIME_ELASTIC_ATTEMPT). Its model starts from a seed of its
own each attempt, so only a restored commit can make two attempts agree. It records what the
attempt started from, commits COMMITS steps, then does a step it never commits (lost at a
restart), and saves what it saw in OUT_DIR/attemptA.rankR.pt.

    elastic_job.py OUT_DIR COMMITS
"""
import copy
import os
import sys

import torch

import ranktime.torch as hvd
from ranktime.torch.elastic import ElasticSampler, TorchState, run

SAMPLES, BATCH = 20, 2


def main(out_dir, commits):
    attempt = int(os.environ["RANKTIME_ELASTIC_ATTEMPT"])
    hvd.init()
    torch.manual_seed(100 + attempt)
    model = torch.nn.Linear(3, 1)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        named_parameters=model.named_parameters())
    sampler = ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=5)
    state = TorchState(model, optimizer, sampler=sampler, epoch=attempt + 7, note="not restored")
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    x = torch.arange(SAMPLES * 3, dtype=torch.float32).reshape(SAMPLES, 3) / 10

    def step(batch):
        optimizer.zero_grad()
        model(x[batch]).pow(2).sum().backward()
        optimizer.step()

    def snapshot():
        return {"model": copy.deepcopy(model.state_dict()),
                "momentum": [optimizer.state[p]["momentum_buffer"].clone()
                             for p in model.parameters() if p in optimizer.state],
                "note": state.note, "epoch": state.epoch, "commits": state._commits,
                "processed": sorted(state.sampler.processed_indices),
                "mine": list(state.sampler)}

    @run
    def train(state):
        started = snapshot()
        mine = list(state.sampler)
        for b in range(commits):
            step(mine[b * BATCH:(b + 1) * BATCH])
            state.sampler.record_batch(b, BATCH)
            state.note = "commit %d" % (state._commits + 1)
            state.commit()
        committed = snapshot()
        step(mine[:BATCH])  # never committed
        state.note = "uncommitted"
        return started, committed

    started, committed = train(state)
    torch.save({"started": started, "committed": committed, "resets": resets},
               os.path.join(out_dir, "attempt%d.rank%d.pt" % (attempt, hvd.rank())))
    hvd.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
