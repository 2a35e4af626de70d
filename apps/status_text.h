#pragma once
// How the droce CLI shows droced's state as text (`droce counters`, `droce qps`, ...). droced
// sends JSON (droced/stats.h, generated from the counter tables); these turn it into text
// without a name list of their own, so a counter droced adds shows up here too.
//
// Errors: none; a value that is not a number, string or boolean shows as "".

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace droce::cli {

/// A value as a table cell: numbers and strings as they are, true/false, "" for the rest.
std::string cell_text(const nlohmann::ordered_json& v);

/// `droce counters`: one line per value, "NAME VALUE" (the name padded to 40 columns), in the
/// object's order; a nested object's values are named "OBJECT.NAME".
std::string flat_text(const nlohmann::ordered_json& object);

/// A table: a header line with `cols`, then one line per item of the array `rows` (each an
/// object), "-" where an item has no such key; every column as wide as its widest cell.
/// "" when `rows` is not an array.
std::string table_text(const nlohmann::ordered_json& rows, const std::vector<std::string>& cols);

}  // namespace droce::cli
