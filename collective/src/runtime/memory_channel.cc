// In-memory control channel (see memory_channel.h).
#include "runtime/memory_channel.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ranktime {
namespace {

using Bytes = std::vector<uint8_t>;

template <typename T>
std::shared_ptr<const Bytes> bytes_of(const T* values, size_t count) {
  auto bytes = std::make_shared<Bytes>(sizeof(T) * count);
  if (count) std::memcpy(bytes->data(), values, bytes->size());
  return bytes;
}

template <typename T>
void copy_out(const Bytes& bytes, T* values, size_t count) {
  if (bytes.size() != sizeof(T) * count) throw std::logic_error("memory channel: size mismatch");
  if (count) std::memcpy(values, bytes.data(), bytes.size());
}

}  // namespace

MemoryHub::MemoryHub(int size)
    : size_(size), mailboxes_(size), link_due_(static_cast<size_t>(size) * size) {}

void MemoryHub::set_faults(Faults faults) {
  std::lock_guard<std::mutex> lock(mutex_);
  faults_ = std::move(faults);
}

void MemoryHub::post(int from, int to, Tag tag, std::shared_ptr<const Bytes> bytes) {
  auto due = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tag == Tag::kControl) {
      const MessageFate fate = faults_ ? faults_(from, to, *bytes) : MessageFate{};
      if (fate.drop) return;
      if (fate.truncate) {
        bytes = std::make_shared<Bytes>(bytes->begin(), bytes->begin() + bytes->size() / 2);
      }
      if (!fate.replace.empty()) bytes = std::make_shared<Bytes>(fate.replace);
      auto& link = link_due_[static_cast<size_t>(from) * size_ + to];
      due = std::max(due + fate.delay, link);
      link = due;
    }
    mailboxes_.at(to).push_back({from, tag, std::move(bytes), due});
  }
  posted_.notify_all();
}

Bytes MemoryHub::take(int to, int from, Tag tag) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& box = mailboxes_.at(to);
  while (true) {
    for (auto it = box.begin(); it != box.end(); ++it) {
      if (it->from != from || it->tag != tag) continue;
      Bytes out = *it->bytes;
      box.erase(it);
      return out;
    }
    posted_.wait(lock);
  }
}

bool MemoryHub::try_take_control(int to, int* from, Bytes* out) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  auto& box = mailboxes_.at(to);
  for (auto it = box.begin(); it != box.end(); ++it) {
    // Links keep their order: a link's later messages are never due before its earlier ones.
    if (it->tag != Tag::kControl || it->due > now) continue;
    *from = it->from;
    out->assign(it->bytes->begin(), it->bytes->end());
    box.erase(it);
    return true;
  }
  return false;
}

MemoryChannel::MemoryChannel(std::shared_ptr<MemoryHub> hub, int rank)
    : hub_(std::move(hub)), rank_(rank) {}

void MemoryChannel::allgather_hosts(const std::string& hostname,
                                    const std::vector<int64_t>& numbers,
                                    std::vector<std::string>* hostnames,
                                    std::vector<int64_t>* all_numbers) {
  using Tag = MemoryHub::Tag;
  // numbers, then the host name
  auto mine = std::make_shared<Bytes>(sizeof(int64_t) * numbers.size() + hostname.size());
  if (!numbers.empty()) std::memcpy(mine->data(), numbers.data(), sizeof(int64_t) * numbers.size());
  std::copy(hostname.begin(), hostname.end(), mine->begin() + sizeof(int64_t) * numbers.size());
  for (int r = 0; r < size(); ++r) {
    if (r != rank_) hub_->post(rank_, r, Tag::kHosts, mine);
  }
  hostnames->clear();
  all_numbers->assign(numbers.size() * size(), 0);
  for (int r = 0; r < size(); ++r) {
    const Bytes b = r == rank_ ? *mine : hub_->take(rank_, r, Tag::kHosts);
    const size_t number_bytes = sizeof(int64_t) * numbers.size();
    if (b.size() < number_bytes) throw std::logic_error("memory channel: size mismatch");
    if (number_bytes) std::memcpy(all_numbers->data() + r * numbers.size(), b.data(), number_bytes);
    hostnames->emplace_back(b.begin() + number_bytes, b.end());
  }
}

void MemoryChannel::broadcast(int* values, int count) {
  if (rank_ == 0) {
    auto bytes = bytes_of(values, count);
    for (int r = 1; r < size(); ++r) hub_->post(0, r, MemoryHub::Tag::kSettings, bytes);
  } else {
    copy_out(hub_->take(rank_, 0, MemoryHub::Tag::kSettings), values, count);
  }
}

void MemoryChannel::send_ping(int rank, int64_t t0) {
  hub_->post(0, rank, MemoryHub::Tag::kPing, bytes_of(&t0, 1));
}

std::pair<int64_t, int64_t> MemoryChannel::receive_pong(int rank) {
  int64_t reply[2];
  copy_out(hub_->take(0, rank, MemoryHub::Tag::kPong), reply, 2);
  return {reply[0], reply[1]};
}

void MemoryChannel::receive_ping() {
  int64_t t0 = 0;
  copy_out(hub_->take(rank_, 0, MemoryHub::Tag::kPing), &t0, 1);
}

void MemoryChannel::send_pong(int64_t t1, int64_t t2) {
  const int64_t reply[2] = {t1, t2};
  hub_->post(rank_, 0, MemoryHub::Tag::kPong, bytes_of(reply, 2));
}

void MemoryChannel::send(int to, std::shared_ptr<const Bytes> message) {
  hub_->post(rank_, to, MemoryHub::Tag::kControl, std::move(message));
}

bool MemoryChannel::receive(int* from, Bytes* message) {
  return hub_->try_take_control(rank_, from, message);
}

}  // namespace ranktime
