// The page `ranktime report` writes: one self-contained HTML file (script, style and data inline,
// a Content-Security-Policy that allows no network access and no script but its own) showing a
// run's aggregates, never its events, so that it opens at once at any trace size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attempts.h"
#include "ranktime/timeline/causes.h"
#include "ranktime/timeline/trace_analysis.h"

namespace ranktime::cli {

struct ReportInput {
  std::vector<std::string> paths;
  const timeline::Summary* summary = nullptr;  // analysed with by_step
  const timeline::Causes* causes = nullptr;    // from the regions; may be empty
  bool truncated = false;
  std::string error;  // the first file's read error, if any
  uint64_t events = 0;
  size_t top_k = 10;
  // An elastic job's attempts, on one time axis (the figures above are the last one's); may be
  // null or empty.
  const std::vector<Attempt>* attempts = nullptr;
};

// At most this many heat-map columns: more steps are grouped, so the page stays light.
inline constexpr size_t kMaxHeatColumns = 1000;

// The data the page draws, as JSON (names as plain strings).
nlohmann::json report_data(const ReportInput& input);
// The whole page. The data is embedded with '<', '>' and '&' escaped, so no name can end its
// <script type="application/json"> element.
std::string report_html(const ReportInput& input);
// The embedded data's text: JSON safe to place inside a <script> element.
std::string script_safe_json(const nlohmann::json& value);
// "sha256-<base64>" for a hex SHA-256 digest, as a Content-Security-Policy source.
std::string csp_hash_source(const std::string& hex_sha256);

}  // namespace ranktime::cli
