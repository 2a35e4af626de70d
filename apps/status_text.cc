#include "apps/status_text.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace droce::cli {

using nlohmann::ordered_json;

std::string cell_text(const ordered_json& v) {
  if (v.is_string()) return v.get_ref<const std::string&>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v.get<double>());
    return buf;
  }
  return "";
}

namespace {

void flat_into(const ordered_json& object, const std::string& prefix, std::string* out) {
  for (const auto& [key, value] : object.items()) {
    if (value.is_object()) {
      flat_into(value, prefix + key + ".", out);
      continue;
    }
    const std::string name = prefix + key;
    *out += name;
    out->append(name.size() < 40 ? 40 - name.size() : 0, ' ');
    *out += ' ' + cell_text(value) + '\n';
  }
}

void pad(std::string* out, const std::string& s, size_t width) {
  *out += s;
  out->append(width > s.size() ? width - s.size() : 0, ' ');
  *out += "  ";
}

}  // namespace

std::string flat_text(const ordered_json& object) {
  std::string out;
  if (object.is_object()) flat_into(object, "", &out);
  return out;
}

std::string table_text(const ordered_json& rows, const std::vector<std::string>& cols) {
  if (!rows.is_array()) return "";
  std::vector<size_t> w(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) w[c] = cols[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < cols.size(); ++c)
      if (r.is_object() && r.contains(cols[c])) w[c] = std::max(w[c], cell_text(r[cols[c]]).size());
  std::string out;
  for (size_t c = 0; c < cols.size(); ++c) pad(&out, cols[c], w[c]);
  out += '\n';
  for (const auto& r : rows) {
    for (size_t c = 0; c < cols.size(); ++c)
      pad(&out, r.is_object() && r.contains(cols[c]) ? cell_text(r[cols[c]]) : "-", w[c]);
    out += '\n';
  }
  return out;
}

}  // namespace droce::cli
