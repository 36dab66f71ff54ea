// Config from the environment, through the settings table (see config.h, settings.h).
#include "core/config.h"

#include <cstdlib>

#include "core/settings.h"

namespace ranktime {

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

Config::Config() {
  for (const Setting& s : settings()) s.parse(s.default_text, this);
}

Config parse_config(const EnvLookup& lookup) {
  Config c;
  for (const Setting& s : settings()) {
    if (auto v = lookup(s.variable)) s.parse(*v, &c);
  }
  if (c.timeline_ranks.on && !c.timeline_all_ranks) {
    throw ConfigError("TIMELINE_RANKS='" + c.timeline_ranks.text +
                      "' and TIMELINE_ALL_RANKS=0 both say whose lanes to write: set one of them");
  }
  if (c.alert_times > c.alert_steps) {
    throw ConfigError("RANKTIME_ALERT_TIMES='" + std::to_string(c.alert_times) +
                      "' is more than RANKTIME_ALERT_STEPS='" + std::to_string(c.alert_steps) +
                      "': a rank cannot be last in more steps than the rule looks at");
  }
  return c;
}

Config config_from_environment() {
  return parse_config([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

std::vector<std::pair<std::string, std::string>> Config::describe() const {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const Setting& s : settings()) pairs.emplace_back(s.variable, s.show(*this));
  return pairs;
}

}  // namespace ranktime
