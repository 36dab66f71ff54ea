// Every environment variable ranktime reads, declared once: one row of settings() per variable,
// with its Config field, its default, how its text is parsed, `ranktime run`'s flag for it and why
// it exists (the shape of NCCL's NCCL_PARAM lines). parse_config(), Config's defaults,
// Config::describe(), the launcher's flags and help, and the config tests all iterate the table.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/config.h"

namespace ranktime {

// How `ranktime run`'s flag for a setting becomes the variable's value on every rank.
enum class FlagForm : uint8_t {
  kNone,       // no flag: set the variable in the environment
  kValue,      // --flag VALUE: checked, then passed as it is
  kPath,       // --flag PATH: made absolute, its directory checked
  kMebibytes,  // --flag MIB: a number of MiB, passed as bytes
  kSwitch,     // --flag alone: sets the variable to switch_value
};

// The Config field a setting fills; its type picks the parser.
using SettingField = std::variant<std::string Config::*, bool Config::*, int64_t Config::*,
                                  double Config::*, LogLevel Config::*, StepWindow Config::*,
                                  LaneRanks Config::*, ListenAddress Config::*>;

struct Setting {
  Setting(const char* variable, SettingField field, const char* default_text, const char* why);

  // Numbers: the smallest value allowed (at_least) or the bound values must exceed (above), and
  // what a valid value looks like, for the error message.
  Setting& at_least(int64_t bound, const char* expected_text);
  Setting& above(int64_t bound, const char* expected_text);
  // `ranktime run --flag`; help defaults to `why`.
  Setting& run_flag(const char* flag_name, FlagForm form, const char* help = nullptr);
  // `ranktime run --flag` without a value, setting the variable to `value`.
  Setting& run_switch(const char* flag_name, const char* value, const char* help = nullptr);
  // Horovod's name for the variable, read with the same meaning and units; where both are set
  // and disagree, ours wins (parse_config warns). `special`, if given, is a Horovod value that
  // stands for `means` (HOROVOD_TIMELINE=DYNAMIC: no file until start_timeline()).
  Setting& horovod(const char* name, const char* special = nullptr, const char* means = nullptr);

  // Sets the field from the variable's text; throws ConfigError naming the variable (`as`, if
  // given: the name the text was read under) and the text.
  void parse(const std::string& text, Config* config, const char* as = nullptr) const;
  // The field's value as text that parses back to the same value.
  std::string show(const Config& config) const;
  // A number that must be greater than zero.
  bool positive() const { return !bound_allowed && bound == 0; }

  const char* variable;
  SettingField field;
  const char* default_text;  // as the variable would spell it
  const char* why;           // one line
  int64_t bound = 0;         // numbers only
  bool bound_allowed = true;
  const char* expected = nullptr;
  const char* flag = nullptr;  // `ranktime run`'s flag; nullptr: none
  FlagForm flag_form = FlagForm::kNone;
  const char* switch_value = nullptr;
  const char* flag_help = nullptr;
  const char* horovod_name = nullptr;  // Horovod's variable; nullptr: none
  const char* horovod_special = nullptr;
  const char* horovod_means = nullptr;
};

// In the order describe() lists them (the timeline's run metadata).
const std::vector<Setting>& settings();

}  // namespace ranktime
