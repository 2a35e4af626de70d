// apps/status_text: droced's JSON as the CLI's text.

#include "apps/status_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace droce::cli {
namespace {

using nlohmann::ordered_json;

TEST(StatusText, CellsShowNumbersStringsAndBooleansAsTheyAre) {
  EXPECT_EQ(cell_text(ordered_json(uint64_t{18446744073709551615u})), "18446744073709551615");  // no double on the way
  EXPECT_EQ(cell_text(ordered_json(int64_t{-1})), "-1");
  EXPECT_EQ(cell_text(ordered_json("ACTIVE")), "ACTIVE");
  EXPECT_EQ(cell_text(ordered_json(true)), "true");
  EXPECT_EQ(cell_text(ordered_json(nullptr)), "");
  EXPECT_EQ(cell_text(ordered_json::array({1, 2})), "");
}

TEST(StatusText, FlatTextIsOneLinePerValueInOrderNestedObjectsPrefixed) {
  const ordered_json c = ordered_json::parse(R"({"rx_frames":7,"transport":{"retransmits":3},"parse":{},"a":1})");
  EXPECT_EQ(flat_text(c), std::string("rx_frames") + std::string(31, ' ') + " 7\n" +
                              "transport.retransmits" + std::string(19, ' ') + " 3\n" +
                              "a" + std::string(39, ' ') + " 1\n");
  const std::string long_name(45, 'x');
  EXPECT_EQ(flat_text(ordered_json{{long_name, 1}}), long_name + " 1\n");
  EXPECT_EQ(flat_text(ordered_json::array()), "");
}

TEST(StatusText, TableHasAHeaderAndARowPerItemColumnsAsWideAsTheirWidestCell) {
  const ordered_json rows = ordered_json::parse(R"([{"qpn":17,"state":"RTS"},{"qpn":1234567,"type":"UD"}])");
  EXPECT_EQ(table_text(rows, {"qpn", "state"}),
            "qpn      state  \n"
            "17       RTS    \n"
            "1234567  -      \n");
  EXPECT_EQ(table_text(ordered_json::array(), {"qpn"}), "qpn  \n");
  EXPECT_EQ(table_text(ordered_json::object(), {"qpn"}), "");
}

}  // namespace
}  // namespace droce::cli
