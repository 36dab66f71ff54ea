// Table rendering: right-aligned numbers, left-aligned text, RFC 4180 quoting for CSV.
#include "report_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ranktime::cli {
namespace {

std::string text_of(const Cell& cell, int precision) {
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  if (const auto* b = std::get_if<bool>(&cell)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&cell)) return std::to_string(*i);
  double v = std::get<double>(cell);
  if (!std::isfinite(v)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", precision, v);
  return buffer;
}

double machine_value(double v, int precision) {
  const double scale = std::pow(10.0, precision + 3);
  double rounded = std::round(v * scale) / scale;
  return std::fabs(rounded) < 1e15 ? rounded : v;
}

std::string machine_text_of(const Cell& cell, int precision) {
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  if (const auto* b = std::get_if<bool>(&cell)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&cell)) return std::to_string(*i);
  double v = std::get<double>(cell);
  if (!std::isfinite(v)) return "";
  // The shortest text that reads back as the same double.
  return nlohmann::json(machine_value(v, precision)).dump();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

nlohmann::json cell_json(const Cell& cell, int precision) {
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  if (const auto* b = std::get_if<bool>(&cell)) return *b;
  if (const auto* i = std::get_if<int64_t>(&cell)) return *i;
  double v = std::get<double>(cell);
  return std::isfinite(v) ? nlohmann::json(machine_value(v, precision)) : nlohmann::json(nullptr);
}

}  // namespace

void print_text(std::ostream& out, const Table& table) {
  if (!table.title.empty()) out << table.title << "\n";
  if (table.rows.empty()) {
    out << "  " << (table.empty_note.empty() ? "(none)" : table.empty_note) << "\n";
    return;
  }
  const size_t n = table.columns.size();
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width(n, 0);
  std::vector<bool> numeric(n, false);
  for (size_t c = 0; c < n; ++c) width[c] = table.columns[c].name.size();
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    std::vector<std::string> line;
    for (size_t c = 0; c < n; ++c) {
      const Cell& cell = c < row.size() ? row[c] : Cell(std::string());
      line.push_back(text_of(cell, table.columns[c].precision));
      if (static_cast<int>(c) == table.indent_column && r < table.indents.size()) {
        line.back().insert(0, static_cast<size_t>(std::max(0, table.indents[r])), ' ');
      }
      if (!std::holds_alternative<std::string>(cell)) numeric[c] = true;
      width[c] = std::max(width[c], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  auto print_line = [&](const std::vector<std::string>& line) {
    std::string text = " ";
    for (size_t c = 0; c < n; ++c) {
      const std::string& s = line[c];
      std::string pad(width[c] - std::min(width[c], s.size()), ' ');
      text += " ";
      text += numeric[c] ? pad + s : s + pad;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << text << "\n";
  };
  std::vector<std::string> header;
  for (const Column& column : table.columns) header.push_back(column.name);
  print_line(header);
  for (const auto& line : cells) print_line(line);
}

void print_csv(std::ostream& out, const Table& table, bool with_table_column) {
  std::string header = with_table_column ? "table" : "";
  for (size_t c = 0; c < table.columns.size(); ++c) {
    if (c > 0 || with_table_column) header += ",";
    header += csv_field(table.columns[c].name);
  }
  out << header << "\n";
  for (const auto& row : table.rows) {
    std::string line = with_table_column ? csv_field(table.name) : "";
    for (size_t c = 0; c < table.columns.size(); ++c) {
      if (c > 0 || with_table_column) line += ",";
      line += csv_field(c < row.size() ? machine_text_of(row[c], table.columns[c].precision) : "");
    }
    out << line << "\n";
  }
}

nlohmann::json to_json(const Table& table) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : table.rows) {
    nlohmann::json object = nlohmann::json::object();
    for (size_t c = 0; c < table.columns.size() && c < row.size(); ++c) {
      object[table.columns[c].name] = cell_json(row[c], table.columns[c].precision);
    }
    rows.push_back(std::move(object));
  }
  return rows;
}

nlohmann::json to_json_columns(const Table& table) {
  nlohmann::json columns = nlohmann::json::array();
  for (const Column& column : table.columns) {
    columns.push_back({{"name", column.name}, {"precision", column.precision}});
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : table.rows) {
    nlohmann::json values = nlohmann::json::array();
    for (size_t c = 0; c < table.columns.size() && c < row.size(); ++c) {
      values.push_back(cell_json(row[c], table.columns[c].precision));
    }
    rows.push_back(std::move(values));
  }
  nlohmann::json sub = nlohmann::json::array();
  for (size_t r = 0; r < table.rows.size(); ++r) {
    sub.push_back(r < table.indents.size() && table.indents[r] > 0);
  }
  return {{"name", table.name},      {"title", table.title},  {"columns", std::move(columns)},
          {"rows", std::move(rows)}, {"sub", std::move(sub)}, {"empty", table.empty_note}};
}

}  // namespace ranktime::cli
