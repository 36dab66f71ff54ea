"""What a timeline weighs per step, by kind of event, and what a step would weigh at more ranks
with each choice of lanes (TIMELINE_RANKS, issue 20).

Reads a trace (plain or .gz) of a run with step marks and every rank's lanes (e.g. ranktime-synth
with TIMELINE_FILENAME), sorts its events into kinds and measures each kind's bytes: text, and
gzip (each kind's text compressed on its own with zlib level 1, as the writer does):

  tick        one per rank per negotiation (the trace contract keeps every one)
  negotiation a NEGOTIATE_* slice, and its flow arrow (last tick -> rank 0's slice)
  lane        one tensor's operation slice and sub-phases on one rank's lane
  step        one rank's STEP slice
  other       run metadata, names (once per file), counters, instants: not projected

Then projects one step at --ranks N with the measured tensors per step for each lane setting:

  bytes per step = T x N x tick + T x negotiation + lanes x T x lane + N x step

with lanes = N (every rank's), 1 (TIMELINE_ALL_RANKS=0), 1 + K (TIMELINE_RANKS=slowest:K or a
list of K ranks). Rank numbers get wider at more ranks: a tick names its rank twice (its name and
args.rank), a lane event and a step mark once (tid); the projection adds the difference in mean
digits per rank number to the text (not to gzip, where it is a fraction of a byte).

Usage: trace_weight.py TRACE [--ranks 1024] [--slowest 1,4,16]
"""
import argparse
import gzip
import json
import zlib


def events(path):
    """(line text, event) for each event line of a ranktime trace (one event per line)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            text = line.strip().lstrip("[").rstrip("]").strip().strip(",")
            if text.startswith("{"):
                yield text, json.loads(text)


def kind(e):
    pid, tid, ph, name = e.get("pid", 0), e.get("tid", 0), e.get("ph"), e.get("name", "")
    if ph == "M":
        return "other"
    if ph in ("s", "t", "f"):
        return "negotiation"
    if pid == 0:
        return "step" if name == "STEP" else "other"
    if tid == 0:
        return "tick" if name.isdigit() else "negotiation"
    return "lane"


def mean_digits(n):
    return sum(len(str(r)) for r in range(n)) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--slowest", default="1,4,16", help="K values of TIMELINE_RANKS=slowest:K")
    a = ap.parse_args()

    text = {k: [] for k in ("tick", "negotiation", "lane", "step", "other")}
    count = {k: 0 for k in text}
    ranks, lane_ranks, steps, negotiations = 0, set(), 0, 0
    for line, e in events(a.trace):
        k = kind(e)
        text[k].append(line)
        count[k] += 1
        if e.get("name") == "ranktime_run":
            ranks = e["args"]["ranks"]
        if k == "lane":
            lane_ranks.add(e["tid"] - 1)
        if k == "step":
            steps += 1
        if k == "negotiation" and e.get("ph") == "X":
            negotiations += 1
    steps_per_rank = steps / ranks
    tensors = negotiations / steps_per_rank  # negotiations per step
    size = {k: sum(len(t) + 2 for t in v) for k, v in text.items()}  # ",\n" per event
    packed = {k: len(zlib.compress("\n".join(v).encode(), 1)) for k, v in text.items()}
    unit = {  # how many of each kind the trace holds
        "tick": negotiations * ranks, "negotiation": negotiations,
        "lane": negotiations * len(lane_ranks), "step": steps}
    per = {k: (size[k] / unit[k], packed[k] / unit[k]) for k in unit}
    print(f"{a.trace}: {ranks} ranks, {steps_per_rank:.0f} steps, {tensors:.0f} negotiations per "
          f"step, lanes of {len(lane_ranks)} ranks; bytes (text, gzip): " +
          ", ".join(f"{k} {t:.1f}, {z:.1f}" for k, (t, z) in per.items()) +
          f" (lane: per tensor per rank, {count['lane'] / unit['lane']:.1f} events)")

    n = a.ranks
    wider = mean_digits(n) - mean_digits(ranks)
    tick = per["tick"][0] + 2 * wider
    lane = per["lane"][0] + wider * count["lane"] / unit["lane"]
    step = per["step"][0] + wider
    fixed = tensors * n * tick + tensors * per["negotiation"][0] + n * step
    fixed_gz = tensors * n * per["tick"][1] + tensors * per["negotiation"][1] + n * per["step"][1]
    print(f"projected, {n} ranks, {tensors:.0f} tensors per step: ticks {tensors * n * tick / 1e6:.2f} MB, "
          f"negotiations {tensors * per['negotiation'][0] / 1e6:.3f} MB, step marks "
          f"{n * step / 1e6:.3f} MB, one rank's lanes {tensors * lane / 1e6:.3f} MB per step")
    settings = [("every rank's lanes (default)", n), ("rank 0's only (TIMELINE_ALL_RANKS=0)", 1)]
    settings += [(f"TIMELINE_RANKS=slowest:{k}", 1 + int(k)) for k in a.slowest.split(",")]
    for name, lanes in settings:
        total = fixed + lanes * tensors * lane
        total_gz = fixed_gz + lanes * tensors * per["lane"][1]
        print(f"  {name}: {total / 1e6:.1f} MB per step ({lanes} lanes: "
              f"{100 * lanes * tensors * lane / total:.0f}% lanes), gzip ~{total_gz / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
