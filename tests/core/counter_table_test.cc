// core/counter_table.h: a table describes every counter of its struct once.

#include "core/counter_table.h"

#include <gtest/gtest.h>

namespace droce::core {
namespace {

struct Two {
  uint64_t a = 0, b = 0;
};
struct WithArray {
  uint64_t a = 0;
  uint64_t by_reason[3] = {};
};

constexpr Counter<Two> kTwo[] = {{"a", &Two::a, "the a's"}, {"b", &Two::b, "the b's"}};
static_assert(covers(kTwo));
// A counter of the struct left out of the table.
constexpr Counter<Two> kMissing[] = {{"a", &Two::a, "the a's"}};
static_assert(!covers(kMissing));
// One member twice (so another is missing), one name twice, no help.
constexpr Counter<Two> kMemberTwice[] = {{"a", &Two::a, "the a's"}, {"b", &Two::a, "the b's"}};
static_assert(!covers(kMemberTwice));
constexpr Counter<Two> kNameTwice[] = {{"a", &Two::a, "the a's"}, {"a", &Two::b, "the b's"}};
static_assert(!covers(kNameTwice));
constexpr Counter<Two> kNoHelp[] = {{"a", &Two::a, "the a's"}, {"b", &Two::b, ""}};
static_assert(!covers(kNoHelp));
// What is not a counter of the table is said so.
constexpr Counter<WithArray> kWithArray[] = {{"a", &WithArray::a, "the a's"}};
static_assert(!covers(kWithArray));
static_assert(covers(kWithArray, sizeof(WithArray::by_reason)));
static_assert(counter_named(kTwo, "b").member == &Two::b);

TEST(CounterTable, AddsEveryCounter) {
  Two sum{1, 2};
  add_counters(kTwo, Two{10, 20}, &sum);
  EXPECT_EQ(sum.a, 11u);
  EXPECT_EQ(sum.b, 22u);
}

}  // namespace
}  // namespace droce::core
