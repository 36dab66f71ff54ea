"""An elastic training script, Horovod's shape (hvd.elastic.run, TorchState, ElasticSampler, a
commit every batch), for tests/multihost/test_elastic.py: a linear model on fixed data. Each
committed step's per-rank batches are kept in the state (`schedule`), so the final weights can be
checked against one process replaying exactly the committed steps.

    elastic_train.py OUT.pt EPOCHS SLEEP_S
"""
import sys
import time

import torch
import torch.nn.functional as F

SAMPLES, BATCH = 36, 2


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(SAMPLES, 4, generator=g), torch.randn(SAMPLES, 1, generator=g)


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def main(out, epochs, sleep_s):
    import ranktime.torch as hvd  # here: the test's replay() runs without ranktime
    hvd.init()
    x, y = data()
    model, optimizer = model_and_optimizer()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, schedule=[])
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state):
        if hvd.rank() == 0:
            print(f"elastic-start size {hvd.size()} commits {len(state.schedule)} resets {resets}",
                  flush=True)
        while state.epoch < epochs:
            mine = list(state.sampler)
            for b in range((len(mine) + BATCH - 1) // BATCH):
                batch = mine[b * BATCH:(b + 1) * BATCH]
                optimizer.zero_grad()
                F.mse_loss(model(x[batch]), y[batch]).backward()
                optimizer.step()
                state.schedule.append(hvd.allgather_object(batch, name="batches"))
                state.sampler.record_batch(b, BATCH)
                state.commit()
                if hvd.rank() == 0:
                    print(f"elastic-step {len(state.schedule)} size {hvd.size()}", flush=True)
                time.sleep(sleep_s)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    if hvd.rank() == 0:
        torch.save({"weights": model.state_dict(), "schedule": state.schedule}, out)


def replay(schedule):
    """One process, the same steps: each step's gradient is the average over that step's ranks of
    each rank's batch gradient, as DistributedOptimizer computes it."""
    x, y = data()
    model, optimizer = model_and_optimizer()
    for batches in schedule:
        grads = []
        for batch in batches:
            model.zero_grad()
            F.mse_loss(model(x[batch]), y[batch]).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, *per_rank in zip(model.parameters(), *grads):
            p.grad = torch.stack(per_rank).mean(0)
        optimizer.step()
    return model.state_dict()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
