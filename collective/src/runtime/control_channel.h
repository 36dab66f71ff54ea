// How one rank's runtime talks to the others about the work (not the tensor data: that is the
// backends'). Two kinds of traffic:
//  - start-up exchanges, blocking and collective (every rank calls them in the same order):
//    who is who, rank 0's settings, the clock ping-pong;
//  - control messages, never blocking: encoded WorkerMessages from workers to rank 0 and
//    ResponseLists from rank 0 to workers (requests, responses, heartbeats, the shutdown
//    agreement, timeline records), each arriving whole, in order per pair of ranks.
// Implementations: MPI (backends/mpi/mpi_channel.h) and in-memory, ranks as threads
// (runtime/memory_channel.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ranktime {

class WakeWord;

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Start-up. Every rank gets every rank's host name and `numbers` (the same count from every
  // rank: its pid and placement), in rank order: `all_numbers` holds rank 0's, then rank 1's, ...
  virtual void allgather_hosts(const std::string& hostname, const std::vector<int64_t>& numbers,
                               std::vector<std::string>* hostnames,
                               std::vector<int64_t>* all_numbers) = 0;
  // Rank 0's `count` values replace every other rank's.
  virtual void broadcast(int* values, int count) = 0;
  // Clock ping-pong: rank 0 sends `rank` its time t0 and waits for the answer (t1: the rank got
  // the ping, t2: it answered, on its own clock); the rank waits for the ping and answers.
  virtual void send_ping(int rank, int64_t t0) = 0;
  virtual std::pair<int64_t, int64_t> receive_pong(int rank) = 0;
  virtual void receive_ping() = 0;
  virtual void send_pong(int64_t t1, int64_t t2) = 0;

  // Start-up, collective: where every rank can map one word with rank 0 (they share its host),
  // makes it and returns it on every rank; from then on a worker's send() to rank 0 wakes rank 0
  // sleeping on it (WakeWord::wait), so that rank 0 need not poll to notice a worker. Null on
  // every rank where any rank cannot: rank 0 then polls. The channel owns the word.
  virtual WakeWord* share_rank0_wake() { return nullptr; }

  // Control messages. Sends `message` to `to` (workers: to 0); the bytes are kept until the send
  // is done (a response list shares one buffer between every receiver).
  virtual void send(int to, std::shared_ptr<const std::vector<uint8_t>> message) = 0;
  // Rank 0: the next waiting message from any worker; workers: from rank 0. False when none.
  virtual bool receive(int* from, std::vector<uint8_t>* message) = 0;
  // Forgets sends that are done; `wait`: waits until all are.
  virtual void reap_sends(bool wait) = 0;
};

}  // namespace ranktime
