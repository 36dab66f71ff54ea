// Tests for config.h and the settings table behind it (settings.h): defaults, every variable's
// accepted spellings, errors that name the variable and the malformed value, and the table's
// rows (each read, described, defaulted and bounded as it declares).
#include "core/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "core/settings.h"

namespace ranktime {
namespace {

using ::testing::HasSubstr;

using Env = std::map<std::string, std::string>;

Config parse(const Env& env) {
  return parse_config([&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// Every variable config.h documents, in describe() order.
const std::vector<std::string> kAllVariables = {"TIMELINE_FILENAME",
                                                "TIMELINE_MARK_CYCLES",
                                                "TIMELINE_ALL_RANKS",
                                                "RANKTIME_FUSION_THRESHOLD",
                                                "RANKTIME_FUSION_MAX_TENSOR",
                                                "RANKTIME_ALLREDUCE_CHUNK",
                                                "RANKTIME_CYCLE_TIME_MS",
                                                "RANKTIME_SPIN_US",
                                                "RANKTIME_STALL_WARNING_S",
                                                "RANKTIME_STALL_SHUTDOWN_S",
                                                "RANKTIME_PEER_TIMEOUT_S",
                                                "RANKTIME_STRAGGLER_THRESHOLD_MS",
                                                "RANKTIME_STRAGGLER_WARNING_INTERVAL_S",
                                                "RANKTIME_LOG_LEVEL",
                                                "RANKTIME_TEST_CLOCK_SKEW_US",
                                                "RANKTIME_HIERARCHICAL_ALLREDUCE",
                                                "RANKTIME_TEST_FAIL_LOCAL",
                                                "RANKTIME_STATUS_FILE"};

std::vector<std::string> described_names(const Config& c) {
  std::vector<std::string> names;
  for (const auto& [name, value] : c.describe()) names.push_back(name);
  return names;
}

std::map<std::string, std::string> described(const Config& c) {
  auto pairs = c.describe();
  return {pairs.begin(), pairs.end()};
}

TEST(Config, DefaultsWhenNothingIsSet) {
  Config c = parse({});
  EXPECT_EQ(c.timeline_filename, "");
  EXPECT_FALSE(c.timeline_mark_cycles);
  EXPECT_TRUE(c.timeline_all_ranks);
  EXPECT_EQ(c.fusion_threshold, 64 * 1024 * 1024);
  EXPECT_EQ(c.fusion_max_tensor, 0);
  EXPECT_EQ(c.allreduce_chunk, 512 * 1024);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 5.0);
  EXPECT_EQ(c.spin(), std::chrono::microseconds(30));
  EXPECT_DOUBLE_EQ(c.stall_warning_s, 60.0);
  EXPECT_DOUBLE_EQ(c.stall_shutdown_s, 0.0);
  EXPECT_DOUBLE_EQ(c.peer_timeout_s, 60.0);
  EXPECT_DOUBLE_EQ(c.straggler_threshold_ms, 5.0);
  EXPECT_DOUBLE_EQ(c.straggler_warning_interval_s, 60.0);
  EXPECT_EQ(c.log_level, LogLevel::kWarning);
  EXPECT_EQ(c.test_clock_skew_us, 0);
  EXPECT_FALSE(c.hierarchical_allreduce);
}

TEST(Config, ReadsExactlyTheVariablesDescribeListsAndHorovodsNamesForThem) {
  std::set<std::string> asked;
  parse_config([&asked](const char* name) -> std::optional<std::string> {
    asked.insert(name);
    return std::nullopt;
  });
  auto names = described_names(Config{});
  std::set<std::string> expected(names.begin(), names.end());
  for (const Setting& s : settings()) {
    if (s.horovod_name != nullptr) expected.insert(s.horovod_name);
  }
  EXPECT_EQ(asked, expected);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size())
      << "describe() lists a variable twice";
}

TEST(Config, TimelineFilenameIsTakenVerbatim) {
  EXPECT_EQ(parse({{"TIMELINE_FILENAME", "/tmp/run 1/trace.json"}}).timeline_filename,
            "/tmp/run 1/trace.json");
  EXPECT_EQ(parse({{"TIMELINE_FILENAME", ""}}).timeline_filename, "");
}

// Each boolean variable with a pointer to its field.
struct BoolVariable {
  const char* name;
  bool Config::*field;
};
const BoolVariable kBoolVariables[] = {
    {"TIMELINE_MARK_CYCLES", &Config::timeline_mark_cycles},
    {"TIMELINE_ALL_RANKS", &Config::timeline_all_ranks},
    {"RANKTIME_HIERARCHICAL_ALLREDUCE", &Config::hierarchical_allreduce},
};

TEST(Config, BooleansAcceptEverySpelling) {
  const char* truthy[] = {"1", "true", "TRUE", "True", "yes", "on"};
  const char* falsy[] = {"0", "false", "FALSE", "False", "no", "off"};
  for (const BoolVariable& var : kBoolVariables) {
    for (const char* v : truthy) {
      EXPECT_TRUE(parse({{var.name, v}}).*var.field) << var.name << "=" << v;
    }
    for (const char* v : falsy) {
      EXPECT_FALSE(parse({{var.name, v}}).*var.field) << var.name << "=" << v;
    }
  }
}

TEST(Config, Numbers) {
  Config c = parse({{"RANKTIME_FUSION_THRESHOLD", "0"},
                    {"RANKTIME_FUSION_MAX_TENSOR", "9223372036854775807"},
                    {"RANKTIME_ALLREDUCE_CHUNK", "0"},
                    {"RANKTIME_CYCLE_TIME_MS", "0.25"},
                    {"RANKTIME_SPIN_US", "0"},
                    {"RANKTIME_STALL_WARNING_S", "1e3"},
                    {"RANKTIME_STALL_SHUTDOWN_S", "0"},
                    {"RANKTIME_PEER_TIMEOUT_S", "0"},
                    {"RANKTIME_STRAGGLER_THRESHOLD_MS", "0"},
                    {"RANKTIME_STRAGGLER_WARNING_INTERVAL_S", "0"},
                    {"RANKTIME_TEST_CLOCK_SKEW_US", "-1500"}});
  EXPECT_EQ(c.fusion_threshold, 0);
  EXPECT_EQ(c.fusion_max_tensor, INT64_MAX);
  EXPECT_EQ(c.allreduce_chunk, 0);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 0.25);
  EXPECT_EQ(c.spin().count(), 0);
  EXPECT_DOUBLE_EQ(c.stall_warning_s, 1000.0);
  EXPECT_DOUBLE_EQ(c.stall_shutdown_s, 0.0);
  EXPECT_DOUBLE_EQ(c.peer_timeout_s, 0.0);
  EXPECT_DOUBLE_EQ(c.straggler_threshold_ms, 0.0);
  EXPECT_DOUBLE_EQ(c.straggler_warning_interval_s, 0.0);
  EXPECT_EQ(c.test_clock_skew_us, -1500);

  c = parse({{"RANKTIME_FUSION_THRESHOLD", "134217728"},
             {"RANKTIME_FUSION_MAX_TENSOR", "65536"},
             {"RANKTIME_ALLREDUCE_CHUNK", "1000"},
             {"RANKTIME_CYCLE_TIME_MS", "12"},
             {"RANKTIME_SPIN_US", "2.5"},
             {"RANKTIME_STALL_WARNING_S", "0.5"},
             {"RANKTIME_STALL_SHUTDOWN_S", "300"},
             {"RANKTIME_PEER_TIMEOUT_S", "2.5"},
             {"RANKTIME_STRAGGLER_THRESHOLD_MS", "2.5"},
             {"RANKTIME_STRAGGLER_WARNING_INTERVAL_S", "10"},
             {"RANKTIME_TEST_CLOCK_SKEW_US", "250"}});
  EXPECT_EQ(c.fusion_threshold, 134217728);
  EXPECT_EQ(c.fusion_max_tensor, 65536);
  EXPECT_EQ(c.allreduce_chunk, 1000);
  EXPECT_DOUBLE_EQ(c.cycle_time_ms, 12.0);
  EXPECT_EQ(c.spin().count(), 2500);  // nanoseconds
  EXPECT_EQ(parse({{"RANKTIME_SPIN_US", "1e300"}}).spin(), std::chrono::hours(1));
  EXPECT_DOUBLE_EQ(c.stall_warning_s, 0.5);
  EXPECT_DOUBLE_EQ(c.stall_shutdown_s, 300.0);
  EXPECT_DOUBLE_EQ(c.peer_timeout_s, 2.5);
  EXPECT_DOUBLE_EQ(c.straggler_threshold_ms, 2.5);
  EXPECT_DOUBLE_EQ(c.straggler_warning_interval_s, 10.0);
  EXPECT_EQ(c.test_clock_skew_us, 250);
}

TEST(Config, LogLevels) {
  const std::pair<const char*, LogLevel> levels[] = {
      {"trace", LogLevel::kTrace},     {"debug", LogLevel::kDebug},  {"info", LogLevel::kInfo},
      {"warning", LogLevel::kWarning}, {"warn", LogLevel::kWarning}, {"error", LogLevel::kError}};
  for (const auto& [text, level] : levels) {
    EXPECT_EQ(parse({{"RANKTIME_LOG_LEVEL", text}}).log_level, level) << text;
  }
}

TEST(Config, LogLevelNames) {
  EXPECT_STREQ(log_level_name(LogLevel::kTrace), "trace");
  EXPECT_STREQ(log_level_name(LogLevel::kDebug), "debug");
  EXPECT_STREQ(log_level_name(LogLevel::kInfo), "info");
  EXPECT_STREQ(log_level_name(LogLevel::kWarning), "warning");
  EXPECT_STREQ(log_level_name(LogLevel::kError), "error");
}

struct Malformed {
  const char* variable;
  const char* value;
};

// For test names and failure messages.
void PrintTo(const Malformed& m, std::ostream* os) { *os << m.variable << "='" << m.value << "'"; }

class MalformedConfig : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedConfig, ThrowsConfigErrorNamingVariableAndValue) {
  const Malformed& m = GetParam();
  try {
    parse({{m.variable, m.value}});
    FAIL() << m.variable << "='" << m.value << "' was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(m.variable));
    EXPECT_THAT(e.what(), HasSubstr(std::string("'") + m.value + "'"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllVariables, MalformedConfig,
    ::testing::Values(
        Malformed{"RANKTIME_CYCLE_TIME_MS", "abc"}, Malformed{"RANKTIME_CYCLE_TIME_MS", "-1"},
        Malformed{"RANKTIME_CYCLE_TIME_MS", "0"}, Malformed{"RANKTIME_CYCLE_TIME_MS", "1e999"},
        Malformed{"RANKTIME_CYCLE_TIME_MS", ""}, Malformed{"RANKTIME_CYCLE_TIME_MS", "nan"},
        Malformed{"RANKTIME_CYCLE_TIME_MS", "inf"}, Malformed{"RANKTIME_CYCLE_TIME_MS", "5ms"},
        Malformed{"RANKTIME_CYCLE_TIME_MS", "5 "}, Malformed{"RANKTIME_FUSION_THRESHOLD", "-5"},
        Malformed{"RANKTIME_FUSION_THRESHOLD", "12MB"},
        Malformed{"RANKTIME_FUSION_THRESHOLD", "1.5"},
        Malformed{"RANKTIME_FUSION_THRESHOLD", "0x10"}, Malformed{"RANKTIME_FUSION_THRESHOLD", ""},
        Malformed{"RANKTIME_FUSION_THRESHOLD", "99999999999999999999"},
        Malformed{"RANKTIME_FUSION_MAX_TENSOR", "-1"},
        Malformed{"RANKTIME_FUSION_MAX_TENSOR", "1MiB"},
        Malformed{"RANKTIME_ALLREDUCE_CHUNK", "-1"}, Malformed{"RANKTIME_ALLREDUCE_CHUNK", "4M"},
        Malformed{"RANKTIME_SPIN_US", "-1"}, Malformed{"RANKTIME_SPIN_US", "30us"},
        Malformed{"RANKTIME_STALL_WARNING_S", "0"}, Malformed{"RANKTIME_STALL_WARNING_S", "-3"},
        Malformed{"RANKTIME_STALL_WARNING_S", "soon"}, Malformed{"RANKTIME_STALL_SHUTDOWN_S", "-1"},
        Malformed{"RANKTIME_STALL_SHUTDOWN_S", "1e999"},
        Malformed{"RANKTIME_STALL_SHUTDOWN_S", "never"}, Malformed{"RANKTIME_PEER_TIMEOUT_S", "-2"},
        Malformed{"RANKTIME_PEER_TIMEOUT_S", "30s"},
        Malformed{"RANKTIME_STRAGGLER_THRESHOLD_MS", "-1"},
        Malformed{"RANKTIME_STRAGGLER_THRESHOLD_MS", "5ms"},
        Malformed{"RANKTIME_STRAGGLER_WARNING_INTERVAL_S", "-0.5"},
        Malformed{"RANKTIME_STRAGGLER_WARNING_INTERVAL_S", "1e999"},
        Malformed{"RANKTIME_LOG_LEVEL", "loud"}, Malformed{"RANKTIME_LOG_LEVEL", ""},
        Malformed{"RANKTIME_LOG_LEVEL", "3"}, Malformed{"RANKTIME_TEST_CLOCK_SKEW_US", "1.5"},
        Malformed{"RANKTIME_TEST_CLOCK_SKEW_US", "abc"},
        Malformed{"RANKTIME_TEST_CLOCK_SKEW_US", "-9223372036854775808"},
        Malformed{"TIMELINE_MARK_CYCLES", "maybe"}, Malformed{"TIMELINE_MARK_CYCLES", "2"},
        Malformed{"TIMELINE_MARK_CYCLES", ""}, Malformed{"TIMELINE_ALL_RANKS", "y"},
        Malformed{"RANKTIME_HIERARCHICAL_ALLREDUCE", "enabled"},
        Malformed{"RANKTIME_METRICS_ADDR", "9100"}, Malformed{"RANKTIME_METRICS_ADDR", ":9100"},
        Malformed{"RANKTIME_METRICS_ADDR", "localhost:"},
        Malformed{"RANKTIME_METRICS_ADDR", "127.0.0.1:0"},
        Malformed{"RANKTIME_METRICS_ADDR", "127.0.0.1:65536"},
        Malformed{"RANKTIME_METRICS_ADDR", "::1:9100"},
        Malformed{"RANKTIME_METRICS_ADDR", "a b:9100"},
        Malformed{"RANKTIME_METRICS_ADDR", "127.0.0.1:91x"},
        Malformed{"RANKTIME_ALERT_MIN_LAG_MS", "-1"}, Malformed{"RANKTIME_ALERT_TIMES", "0"},
        Malformed{"RANKTIME_ALERT_STEPS", "two"}, Malformed{"RANKTIME_ALERT_MIN_COST_PCT", "5%"},
        Malformed{"RANKTIME_ALERT_COMMAND_TIMEOUT_S", "0"},
        Malformed{"RANKTIME_ALERT_INTERVAL_S", "-1"}),
    [](const ::testing::TestParamInfo<Malformed>& p) {
      return std::to_string(p.index) + "_" + p.param.variable;
    });

TEST(Config, MetricsAddressNamesItsHost) {
  EXPECT_FALSE(parse({}).metrics_addr.on);  // off unless asked for
  const Config c = parse({{"RANKTIME_METRICS_ADDR", "127.0.0.1:9100"}});
  EXPECT_TRUE(c.metrics_addr.on);
  EXPECT_EQ(c.metrics_addr.host, "127.0.0.1");
  EXPECT_EQ(c.metrics_addr.port, 9100);
  const Config v6 = parse({{"RANKTIME_METRICS_ADDR", "[::1]:80"}});
  EXPECT_EQ(v6.metrics_addr.host, "::1");
  EXPECT_EQ(described(v6)["RANKTIME_METRICS_ADDR"], "[::1]:80");
}

TEST(Config, AlertTimesAtMostAlertSteps) {
  try {
    parse({{"RANKTIME_ALERT_TIMES", "6"}});  // more than the default 5 steps
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("RANKTIME_ALERT_TIMES='6'"));
    EXPECT_THAT(e.what(), HasSubstr("RANKTIME_ALERT_STEPS='5'"));
  }
  EXPECT_EQ(parse({{"RANKTIME_ALERT_TIMES", "6"}, {"RANKTIME_ALERT_STEPS", "6"}}).alert_times, 6);
}

TEST(Config, DescribeListsEveryDocumentedVariableInOrder) {
  // Variables added later may appear anywhere; the documented ones keep their relative order.
  std::vector<std::string> names = described_names(Config{});
  auto at = names.begin();
  for (const std::string& name : kAllVariables) {
    auto found = std::find(at, names.end(), name);
    ASSERT_NE(found, names.end()) << name << " missing or out of order";
    at = found + 1;
  }
}

TEST(Config, DescribeShowsTheParsedValues) {
  Config c = parse({{"TIMELINE_FILENAME", "/tmp/t.json"},
                    {"TIMELINE_MARK_CYCLES", "yes"},
                    {"TIMELINE_ALL_RANKS", "off"},
                    {"RANKTIME_FUSION_THRESHOLD", "1000"},
                    {"RANKTIME_FUSION_MAX_TENSOR", "2000"},
                    {"RANKTIME_CYCLE_TIME_MS", "2.5"},
                    {"RANKTIME_STALL_WARNING_S", "30"},
                    {"RANKTIME_STALL_SHUTDOWN_S", "120"},
                    {"RANKTIME_STRAGGLER_THRESHOLD_MS", "0.5"},
                    {"RANKTIME_STRAGGLER_WARNING_INTERVAL_S", "15"},
                    {"RANKTIME_LOG_LEVEL", "warn"},
                    {"RANKTIME_TEST_CLOCK_SKEW_US", "-7"},
                    {"RANKTIME_HIERARCHICAL_ALLREDUCE", "True"}});
  const std::map<std::string, std::string> expected = {
      {"TIMELINE_FILENAME", "/tmp/t.json"},
      {"TIMELINE_MARK_CYCLES", "1"},
      {"TIMELINE_ALL_RANKS", "0"},
      {"RANKTIME_FUSION_THRESHOLD", "1000"},
      {"RANKTIME_FUSION_MAX_TENSOR", "2000"},
      {"RANKTIME_CYCLE_TIME_MS", "2.5"},
      {"RANKTIME_STALL_WARNING_S", "30"},
      {"RANKTIME_STALL_SHUTDOWN_S", "120"},
      {"RANKTIME_STRAGGLER_THRESHOLD_MS", "0.5"},
      {"RANKTIME_STRAGGLER_WARNING_INTERVAL_S", "15"},
      {"RANKTIME_LOG_LEVEL", "warning"},
      {"RANKTIME_TEST_CLOCK_SKEW_US", "-7"},
      {"RANKTIME_HIERARCHICAL_ALLREDUCE", "1"}};
  const auto actual = described(c);
  for (const auto& [name, value] : expected) {
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << name;
    EXPECT_EQ(it->second, value) << name;
  }
}

// describe() feeds the timeline's run metadata: each value must read back as the setting that was
// in force, so that a run can be reproduced from its trace.
TEST(Config, DescribedValuesParseBackToTheSameConfig) {
  Config c = parse({{"RANKTIME_CYCLE_TIME_MS", "0.1234567"},
                    {"RANKTIME_STALL_WARNING_S", "1234567"},
                    {"RANKTIME_STALL_SHUTDOWN_S", "86400.25"}});
  Env env = described(c);
  Config back = parse(env);
  EXPECT_EQ(back.cycle_time_ms, c.cycle_time_ms) << env["RANKTIME_CYCLE_TIME_MS"];
  EXPECT_EQ(back.stall_warning_s, c.stall_warning_s) << env["RANKTIME_STALL_WARNING_S"];
  EXPECT_EQ(back.stall_shutdown_s, c.stall_shutdown_s) << env["RANKTIME_STALL_SHUTDOWN_S"];
  EXPECT_EQ(back.describe(), c.describe());
}

// The table: one row per variable, in describe() order; each row's default is what Config holds
// when nothing is set, and parses back to itself.
TEST(Settings, TheTableIsWhatParseAndDescribeIterate) {
  std::vector<std::string> rows;
  for (const Setting& s : settings()) rows.push_back(s.variable);
  EXPECT_EQ(rows, described_names(Config{}));
  EXPECT_EQ(std::set<std::string>(rows.begin(), rows.end()).size(), rows.size());
  const Config defaults;
  for (const Setting& s : settings()) {
    EXPECT_EQ(s.show(defaults), s.show(parse({{s.variable, s.default_text}}))) << s.variable;
    EXPECT_NE(std::string(s.why), "") << s.variable;
  }
}

TEST(Settings, NumbersBelowTheirBoundAreErrorsNamingVariableAndValue) {
  for (const Setting& s : settings()) {
    if (s.expected == nullptr) continue;  // not a number
    const std::string bad = std::to_string(s.bound_allowed ? s.bound - 1 : s.bound);
    try {
      parse({{s.variable, bad}});
      ADD_FAILURE() << s.variable << "='" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string(s.variable) + "='" + bad + "' is not valid: expected " + s.expected);
    }
    Env env = {{s.variable, std::to_string(s.bound + 1)}};
    env.emplace("RANKTIME_ALERT_TIMES", "1");  // at most RANKTIME_ALERT_STEPS, whatever that is
    EXPECT_NO_THROW(parse(env)) << s.variable;
  }
}

TEST(Settings, RunFlagsAreUniqueAndEachHasHelp) {
  std::set<std::string> flags;
  for (const Setting& s : settings()) {
    if (s.flag == nullptr) {
      EXPECT_EQ(s.flag_form, FlagForm::kNone) << s.variable;
      continue;
    }
    EXPECT_TRUE(flags.insert(s.flag).second) << s.flag << " twice";
    EXPECT_EQ(std::string(s.flag).rfind("--", 0), 0u) << s.flag;
    EXPECT_NE(s.flag_help, nullptr) << s.flag;
    if (s.flag_form == FlagForm::kSwitch) {
      // The value a switch sets is one its variable accepts.
      EXPECT_NO_THROW(parse({{s.variable, s.switch_value}})) << s.flag;
    }
  }
  EXPECT_TRUE(flags.count("--timeline-filename"));
  EXPECT_TRUE(flags.count("--cycle-time-ms"));
}

// Horovod's variables, with Horovod's meaning and units: each sets the field its ranktime name
// sets.
struct HorovodCase {
  const char* horovod;
  const char* value;
  const char* ours;  // the ranktime variable, and the value it takes
  const char* ours_value;
};
const HorovodCase kHorovodCases[] = {
    {"HOROVOD_TIMELINE", "/tmp/h t.json", "TIMELINE_FILENAME", "/tmp/h t.json"},
    {"HOROVOD_TIMELINE", "DYNAMIC", "TIMELINE_FILENAME", ""},  // start_timeline() later
    {"HOROVOD_TIMELINE_MARK_CYCLES", "1", "TIMELINE_MARK_CYCLES", "1"},
    {"HOROVOD_FUSION_THRESHOLD", "33554432", "RANKTIME_FUSION_THRESHOLD", "33554432"},  // bytes
    {"HOROVOD_CYCLE_TIME", "3.5", "RANKTIME_CYCLE_TIME_MS", "3.5"},                     // ms
    {"HOROVOD_CACHE_CAPACITY", "0", "RANKTIME_CACHE_CAPACITY", "0"},
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1", "RANKTIME_HIERARCHICAL_ALLREDUCE", "1"},
    {"HOROVOD_STALL_CHECK_TIME_SECONDS", "2", "RANKTIME_STALL_WARNING_S", "2"},
    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "5", "RANKTIME_STALL_SHUTDOWN_S", "5"},
    {"HOROVOD_STALL_CHECK_DISABLE", "1", "RANKTIME_STALL_CHECK_DISABLE", "1"},
    {"HOROVOD_LOG_LEVEL", "DEBUG", "RANKTIME_LOG_LEVEL", "debug"},
    {"HOROVOD_LOG_LEVEL", "fatal", "RANKTIME_LOG_LEVEL", "error"},
    {"HOROVOD_START_TIMEOUT", "30", "RANKTIME_START_TIMEOUT_S", "30"},
};

TEST(Horovod, EachHorovodVariableSetsItsRanktimeSetting) {
  std::set<std::string> covered;
  for (const HorovodCase& h : kHorovodCases) {
    covered.insert(h.horovod);
    const Config c = parse({{h.horovod, h.value}});
    EXPECT_EQ(described(c)[h.ours], h.ours_value) << h.horovod << "=" << h.value;
    if (std::string(h.value) != "DYNAMIC") {  // DYNAMIC is the default: no file at start
      EXPECT_NE(described(c)[h.ours], described(Config{})[h.ours]) << h.horovod << " no effect";
    }
    EXPECT_TRUE(c.warnings.empty());
  }
  for (const Setting& s : settings()) {
    if (s.horovod_name != nullptr) {
      EXPECT_TRUE(covered.count(s.horovod_name)) << s.horovod_name;
    }
  }
  EXPECT_EQ(parse({{"HOROVOD_STALL_CHECK_DISABLE", "1"}}).stall_check_disable, true);
}

TEST(Horovod, OursWinsWhenBothAreSetAndDisagreeAndTheWarningNamesBoth) {
  Config c = parse({{"RANKTIME_FUSION_THRESHOLD", "1024"}, {"HOROVOD_FUSION_THRESHOLD", "2048"}});
  EXPECT_EQ(c.fusion_threshold, 1024);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0],
            "RANKTIME_FUSION_THRESHOLD='1024' wins over HOROVOD_FUSION_THRESHOLD='2048'");
  c = parse({{"TIMELINE_FILENAME", "/a.json"}, {"HOROVOD_TIMELINE", "DYNAMIC"}});
  EXPECT_EQ(c.timeline_filename, "/a.json");
  EXPECT_THAT(c.warnings.at(0), HasSubstr("HOROVOD_TIMELINE='DYNAMIC'"));
  // The same value spelled two ways agrees: no warning.
  c = parse({{"RANKTIME_LOG_LEVEL", "debug"},
             {"HOROVOD_LOG_LEVEL", "DEBUG"},
             {"RANKTIME_CYCLE_TIME_MS", "2"},
             {"HOROVOD_CYCLE_TIME", "2.0"}});
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Horovod, ABadValueIsAnErrorNamingHorovodsVariableAndTheValue) {
  const std::pair<const char*, const char*> bad[] = {
      {"HOROVOD_FUSION_THRESHOLD", "64MB"}, {"HOROVOD_CYCLE_TIME", "fast"},
      {"HOROVOD_CACHE_CAPACITY", "-1"},     {"HOROVOD_TIMELINE_MARK_CYCLES", "sometimes"},
      {"HOROVOD_LOG_LEVEL", "loud"},        {"HOROVOD_STALL_CHECK_TIME_SECONDS", "0"},
      {"HOROVOD_STALL_CHECK_DISABLE", "x"}, {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-5"},
      {"HOROVOD_START_TIMEOUT", "30s"},     {"HOROVOD_HIERARCHICAL_ALLREDUCE", "yes please"},
  };
  for (const auto& [variable, value] : bad) {
    for (const bool ours_too : {false, true}) {
      Env env = {{variable, value}};
      for (const Setting& s : settings()) {
        if (ours_too && s.horovod_name != nullptr && s.horovod_name == std::string(variable))
          env[s.variable] = s.default_text;
      }
      try {
        parse(env);
        ADD_FAILURE() << variable << "='" << value << "' was accepted";
      } catch (const ConfigError& e) {
        EXPECT_THAT(e.what(), HasSubstr(std::string(variable) + "='" + value + "'"));
      }
    }
  }
}

}  // namespace
}  // namespace ranktime
