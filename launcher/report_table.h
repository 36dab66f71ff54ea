// Tables the CLI prints: aligned text for people, CSV and JSON for machines, from one model.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace ranktime::cli {

// A double that is not finite (NaN) is "no value": "-" in text, empty in CSV, null in JSON.
using Cell = std::variant<std::string, int64_t, double, bool>;

struct Column {
  std::string name;  // snake_case with the unit: "mean_lag_ms"
  // Decimals of a double in text output; CSV and JSON keep three more (nanoseconds for a
  // microsecond column), which also drops the noise of decimal-to-binary subtraction.
  int precision = 0;
};

struct Table {
  std::string name;   // machine name: "lateness"
  std::string title;  // a line above the text table
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;
  std::string empty_note;  // printed instead of an empty table
  // Text output only: indentation of column `indent_column` per row (sub-phases under their
  // operation). Machines get the plain value.
  int indent_column = -1;
  std::vector<int> indents;
};

enum class OutputFormat { kText, kCsv, kJson };

void print_text(std::ostream& out, const Table& table);
// A header row starting with "table", then one row per table row: tables concatenated into one
// CSV separated by blank lines parse with any CSV reader and split on the first column.
void print_csv(std::ostream& out, const Table& table, bool with_table_column);
nlohmann::json to_json(const Table& table);  // an array of row objects
// {"name", "title", "columns": [{"name", "precision"}], "rows": [[values]], "empty"}: the same
// values, compact (for the report page).
nlohmann::json to_json_columns(const Table& table);

}  // namespace ranktime::cli
