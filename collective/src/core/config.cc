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
    const auto ours = lookup(s.variable);
    if (ours) s.parse(*ours, &c);
    const auto horovods = s.horovod_name ? lookup(s.horovod_name) : std::nullopt;
    if (!horovods) continue;
    const bool special = s.horovod_special != nullptr && *horovods == s.horovod_special;
    const std::string text = special ? s.horovod_means : *horovods;
    Config theirs;
    s.parse(text, &theirs, s.horovod_name);  // a bad value is an error even when ours is set
    if (!ours) {
      s.parse(text, &c, s.horovod_name);
    } else if (s.show(theirs) != s.show(c)) {
      c.warnings.push_back(std::string(s.variable) + "='" + *ours + "' wins over " +
                           s.horovod_name + "='" + *horovods + "'");
    }
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
