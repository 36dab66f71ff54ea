// One rank's runtime, continued: executing a response list, and completing tensors (see
// runtime.h).
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace ranktime {

void Runtime::execute(const ResponseList& list, int64_t arrival_ns) {
  if (!list.lane_ranks.empty()) timeline_->set_lane_ranks(list.lane_ranks);
  for (const Response& r : list.responses) {
    if (r.op == OpType::kAddProcessSet || r.op == OpType::kRemoveProcessSet ||
        r.op == OpType::kJoin) {
      entries_scratch_.clear();
      for (const std::string& name : r.names) {
        auto it = in_flight_.find(name);
        if (it != in_flight_.end()) entries_scratch_.push_back(it->second.get());
      }
      execute_set_change(r, entries_scratch_);
      continue;
    }
    if (!gather_entries(r)) continue;
    if (r.op == OpType::kTimelineStart || r.op == OpType::kTimelineStop) {
      execute_control(r, entries_scratch_);
      continue;
    }
    if (!r.error.empty()) {
      for (TensorEntry* e : entries_scratch_) complete(e, Status::Error(r.error));
      continue;
    }
    Backend* chosen = backend_for(r);
    if (chosen == nullptr) {
      // Members have a host backend, and a device tensor is refused at submission where there is
      // no device backend; but a joined rank's zeros were never submitted here.
      const std::string where = r.device == kCpuDevice
                                    ? std::string("host tensors")
                                    : "tensors on device " + std::to_string(r.device);
      const std::string set =
          r.process_set == kGlobalSet ? "" : " of process set " + std::to_string(r.process_set);
      for (TensorEntry* e : entries_scratch_) {
        complete(e, Status::Error("tensor '" + e->request.name + "': rank " +
                                  std::to_string(rank()) + " has no backend for " + where + set));
      }
      continue;
    }
    Backend& backend = *chosen;
    if (!backend.completes_in_enqueue()) {
      backend.enqueue(r, entries_scratch_, arrival_ns);  // completes later, on its own terms
      continue;
    }
    liveness_->executing(&r);
    backend.enqueue(r, entries_scratch_, arrival_ns);
    liveness_->executing(nullptr);
    // Every rank was alive (a process set's collective says so of its members only).
    if (r.process_set == kGlobalSet) liveness_->collective_done(clock_.now_ns());
    deliver(backend);
  }
  if (!list.cache_evicted.empty()) worker_cache_.evict(list.cache_evicted);
  if (!list.shutdown) return;
  fail_everything("ranktime has shut down: " + list.shutdown_reason);
  if (rank() == 0) {
    await_workers(finals_, 1, kFinalMessageTimeoutS, "the final messages");
    timeline_->record_steps(clock_.now_ns());
    timeline_->stop();
  } else {
    timeline_->record_steps(clock_.now_ns());
    send_worker_message({}, true, false);
    channel_->reap_sends(true);
    timeline_->stop();
  }
  finished_ = true;
  if (list.fatal) doom(list.shutdown_reason, list.stall);  // after rank 0's timeline is closed
}

void Runtime::execute_control(const Response& response, const std::vector<TensorEntry*>& entries) {
  Status status;
  if (response.op == OpType::kTimelineStart) {
    if (rank() == 0) {
      status =
          timeline_->start(response.argument, response.flags & 1, run_metadata(response.flags & 1));
    } else {
      timeline_->start("", response.flags & 1, {});
    }
  } else {
    drain_backends();  // device work before the stop belongs in this file
    if (rank() == 0) {
      // Other ranks send their last records with the acknowledgement; close after they are in.
      await_workers(timeline_acks_, ++timeline_stops_, kFinalMessageTimeoutS, "timeline records");
      timeline_->record_steps(clock_.now_ns());
    } else {
      timeline_->record_steps(clock_.now_ns());
      send_worker_message({}, false, true);
    }
    timeline_->stop();
  }
  for (TensorEntry* e : entries) complete(e, status);
}

bool Runtime::deliver(Backend& backend) {
  bool any = false;
  backend.take_completions([&](Completion& c) {
    any = true;
    timeline_->processed(c.response, c.entries, c.arrival_ns, c.start_ns, c.end_ns, c.log, c.status,
                         c.per_tensor ? &c.entry_logs : nullptr);
    if (inspector_ && c.status.ok()) inspector_->executed(c.response, c.start_ns, c.end_ns);
    if (live_) {
      uint64_t bytes = 0;
      for (const TensorEntry* e : c.entries) bytes += e->view.num_bytes();
      live_->processed(c.response.op, bytes);
    }
    for (TensorEntry* e : c.entries) complete(e, c.status);
  });
  return any;
}

Backend* Runtime::backend_for(const Response& r) const {
  if (r.process_set != kGlobalSet) return sets_.backend(r.process_set, r.device);
  return r.device == kCpuDevice ? host_.get() : device_.get();
}

void Runtime::each_device_backend(const std::function<void(Backend&)>& f) const {
  if (device_) f(*device_);
  sets_.each_device_backend(f);
}

bool Runtime::deliver_device(bool force) {
  // Without device backends the loop does not take the queue's lock for nothing, every cycle.
  if (!has_device_backend()) return false;
  // One wake-up flag for every device backend: whichever woke the loop, take from all.
  if (!queue_.take_completions_wake() && !force) return false;
  bool any = false;
  each_device_backend([&](Backend& b) { any = deliver(b) || any; });
  return any;
}

void Runtime::drain_backends() {
  // Host backends finish inside enqueue(): only device work can be in flight.
  each_device_backend([](Backend& b) { b.drain(); });
  deliver_device(true);
}

void Runtime::complete(TensorEntry* entry, const Status& status) {
  auto handle = entry->handle;
  const bool zeros = entry->join_zeros;  // read now: erasing the map node frees the entry
  auto it = in_flight_.find(entry->request.name);
  if (it != in_flight_.end() && it->second.get() == entry) {  // not a joined rank's zeros
    queue_.release(it->first);  // before waking the waiter: it may reuse the name at once
    in_flight_.erase(it);       // the entry dies with its map node
  }
  handle->complete(status);
  if (zeros) join_zeros_.release(entry);  // last: this frees it
}

void Runtime::fail_everything(const std::string& reason) {
  drain_backends();
  std::vector<std::unique_ptr<TensorEntry>> never_taken = queue_.stop(reason);
  for (auto& e : never_taken)
    e->handle->complete(Status::Error(reason + "; tensor '" + e->request.name + "' did not run"));
  for (auto& [name, e] : in_flight_)
    e->handle->complete(Status::Error(reason + "; tensor '" + name + "' did not run"));
  in_flight_.clear();
  if (coordinator_) coordinator_->drain();
}

}  // namespace ranktime
