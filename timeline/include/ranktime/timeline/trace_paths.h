// How a run names its other files: rotation (t.1.json), alert traces (t.alert1.json), elastic
// attempts (t.attempt1.json), all by one rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ranktime::timeline {

// `path` with `.tag` before its extension (.json.gz, .json or .gz), or after it when it has
// none: (t.json, alert1) -> t.alert1.json; the one naming rule of a run's other files.
std::string tagged_path(const std::string& path, std::string_view tag);
// The name of file `index` of a rotation of `path`: `path` itself for 0, else the number
// before the extension: t.json -> t.1.json, t.json.gz -> t.1.json.gz, trace -> trace.1.
std::string rotated_path(const std::string& path, uint64_t index);

}  // namespace ranktime::timeline
