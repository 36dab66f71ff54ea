// TextBuffer: the trace writer's growable text buffer. Unlike std::string it does not zero the
// room it makes, so the formatter can reserve an event's worst-case size, write the event
// there and keep only what it wrote, touching each byte once (std::string::resize would write
// every reserved byte twice; that was 7% of the writer's instructions).
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>

namespace ranktime::timeline {

class TextBuffer {
 public:
  // At least `n` writable bytes at the end of the text; commit() keeps those written. The
  // pointer stays valid until the next call that adds room.
  char* room(size_t n) {
    if (capacity_ - size_ < n) grow(size_ + n);
    return data_.get() + size_;
  }
  // Keeps the text up to `end`, a pointer into the room made last.
  void commit(const char* end) { size_ = static_cast<size_t>(end - data_.get()); }

  void append(std::string_view text) {
    std::memcpy(room(text.size()), text.data(), text.size());
    size_ += text.size();
  }
  void push_back(char c) {
    *room(1) = c;
    ++size_;
  }
  void clear() { size_ = 0; }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  char* data() { return data_.get(); }
  std::string_view view() const { return {data_.get(), size_}; }

 private:
  void grow(size_t needed) {
    const size_t capacity = std::max({needed, 2 * capacity_, size_t{4096}});
    std::unique_ptr<char[]> data(new char[capacity]);  // default-initialised: not zeroed
    if (size_ != 0) std::memcpy(data.get(), data_.get(), size_);
    data_ = std::move(data);
    capacity_ = capacity;
  }

  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace ranktime::timeline
