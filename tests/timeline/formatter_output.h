// Runs the EventFormatter alone (no writer thread, no file) over a list of Records and hands its
// output back as text, as parsed events, or as the numbers it wrote: the formatter tests' way in.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "event_formatter.h"
#include "ranktime/timeline/record.h"
#include "ranktime/timeline/run_metadata.h"
#include "ranktime/timeline/string_table.h"
#include "text_buffer.h"
#include "trace_test_data.h"

namespace ranktime::timeline::test {

// What one fresh formatter (as a new file gets) appends for `records`, preceded by the run
// metadata events when `metadata` is given. `events` is the count the append calls returned
// (the writer's events_written adds them up).
struct FormatterOutput {
  std::string text;  // each event as ",\n{...}", the way the writer appends them
  size_t events = 0;
};

inline FormatterOutput run_formatter(const StringTable& strings, const std::vector<Record>& records,
                                     const RunMetadata* metadata = nullptr) {
  EventFormatter formatter(strings, metadata != nullptr ? metadata->start_ns : kStartNs);
  TextBuffer out;
  size_t events = 0;
  if (metadata != nullptr) {
    events += formatter.append_run_metadata(*metadata, metadata->start_ns, 0, &out);
  }
  for (const Record& record : records) events += formatter.append_record(record, &out);
  return {std::string(out.view()), events};
}

// The formatter's raw text for `records` (see run_formatter).
inline std::string format_text(const StringTable& strings, const std::vector<Record>& records,
                               const RunMetadata* metadata = nullptr) {
  return run_formatter(strings, records, metadata).text;
}

// The formatter's events as one JSON array text, as the writer's file holds them: "[" for the
// first separator, then the closing bracket.
inline std::string as_json_array(std::string_view text) {
  if (text.empty()) return "[]";
  std::string array = "[";
  array.append(text.substr(1));
  array.append("\n]\n");
  return array;
}

// The events the formatter gives for `records`, parsed (a JSON array; parsing throws, failing the
// test, unless the text is valid JSON); checks that their count is the one the formatter returned.
inline json format_events(const StringTable& strings, const std::vector<Record>& records,
                          const RunMetadata* metadata = nullptr) {
  const FormatterOutput output = run_formatter(strings, records, metadata);
  json events = json::parse(as_json_array(output.text));
  EXPECT_EQ(events.size(), output.events) << "events appended vs. the count returned";
  return events;
}

// The events of `records` other than metadata: what the records themselves turn into.
inline std::vector<json> events_of(const StringTable& strings, const std::vector<Record>& records) {
  return events_other_than_metadata(format_events(strings, records));
}

// Every number of a JSON text with the key it belongs to, as written (the lexeme), so the tests
// can check the format of "ts" and friends rather than only their value.
class NumberLexemes : public nlohmann::json_sax<json> {
 public:
  std::vector<std::pair<std::string, std::string>> numbers;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t value) override {
    numbers.emplace_back(key_, std::to_string(value));
    return true;
  }
  bool number_unsigned(number_unsigned_t value) override {
    numbers.emplace_back(key_, std::to_string(value));
    return true;
  }
  bool number_float(number_float_t, const string_t& lexeme) override {
    numbers.emplace_back(key_, lexeme);
    return true;
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t& key) override {
    key_ = key;
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  std::string key_;
};

inline NumberLexemes number_lexemes(const std::string& json_text) {
  NumberLexemes lexemes;
  EXPECT_TRUE(json::sax_parse(json_text, &lexemes));
  return lexemes;
}

}  // namespace ranktime::timeline::test
