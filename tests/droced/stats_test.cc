// droced/stats: the counter totals, generated from the counter tables, in droced's JSON and in
// the text `droce counters` makes of it (apps/status_text.h).
//
// Every counter of every table gets a value of its own, past 2^53 (a reader that goes through
// double would round it); each must then show in both outputs under its name with exactly that
// value, and nothing else may show. A counter left out of one output, or shown twice, fails.

#include "droced/stats.h"

#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "apps/status_text.h"

namespace droce::droced {
namespace {

using nlohmann::ordered_json;

// What should show: the counter `key` inside `object` ("" for the top level) with `value`.
struct Expected {
  std::string object, key;
  uint64_t value;
};

class Filler {
 public:
  // Every counter of the table a value no other counter has.
  template <class S, size_t N>
  void fill(const core::Counter<S> (&table)[N], S* s) {
    for (const core::Counter<S>& c : table) s->*c.member = next_++;
  }
  // What the table's counters must show as.
  template <class S, size_t N>
  void expect(const core::Counter<S> (&table)[N], const S& s, const std::string& object,
              const std::string& prefix = {}) {
    for (const core::Counter<S>& c : table) want.push_back({object, prefix + c.name, s.*c.member});
  }
  std::vector<Expected> want;

 private:
  uint64_t next_ = (uint64_t{1} << 60) + 1;
};

// The totals with every counter set, and what each must show as.
CounterTotals full_totals(std::vector<Expected>* want) {
  Filler f;
  CounterTotals t;
  f.fill(rocev2::kEngineCounters, &t.engine);
  f.fill(kDeviceCoreCounters, &t.device);
  f.fill(kWorkerCounters, &t.worker);
  f.fill(kDaemonCounters, &t.daemon);
  t.jobs.emplace();
  f.fill(kControlJobCounters, &*t.jobs);
  t.cm.emplace();
  f.fill(kCmHostCounters, &t.cm->host);
  f.fill(cm::kAgentCounters, &t.cm->agent);
  f.fill(cm::kUcmaCounters, &t.cm->ucma);
  t.cm->agent.dropped[1] = 5;
  t.cm->agent.dropped[6] = 7;
  f.fill(rocev2::kQpCounters, &t.transport);
  t.engine.parse.by_status[static_cast<size_t>(rocev2::ParseStatus::ok)] = 11;
  t.engine.parse.by_status[static_cast<size_t>(rocev2::ParseStatus::bad_icrc)] = 3;
  f.fill(net::kNeighborProtoCounters, &t.neighbor.arp);
  f.fill(net::kNeighborProtoCounters, &t.neighbor.nd);
  f.fill(net::kNeighborCounters, &t.neighbor);
  t.neighbor.dropped[0] = 2;
  t.neighbor.dropped[net::kNeighborDropCount - 1] = 4;
  t.kernel.emplace();
  f.fill(net::kKernelNetCounters, &*t.kernel);
  t.xdp.emplace();
  f.fill(net::kXdpFilterCounters, &*t.xdp);
  f.fill(kFaultCounters, &t.faults);

  f.expect(rocev2::kEngineCounters, t.engine, "");
  f.expect(kDeviceCoreCounters, t.device, "");
  f.expect(kWorkerCounters, t.worker, "");
  f.expect(kDaemonCounters, t.daemon, "");
  f.expect(kControlJobCounters, *t.jobs, "", "control_jobs_");
  f.expect(kCmHostCounters, t.cm->host, "", "cm_");
  f.want.push_back({"", "cm_mads_malformed", 12});
  f.expect(cm::kAgentCounters, t.cm->agent, "", "cm_");
  f.expect(cm::kUcmaCounters, t.cm->ucma, "", "cm_");
  f.expect(rocev2::kQpCounters, t.transport, "transport");
  f.want.push_back({"parse", "ok", 11});
  f.want.push_back({"parse", "bad_icrc", 3});
  f.expect(net::kNeighborProtoCounters, t.neighbor.arp, "neighbor", "arp_");
  f.expect(net::kNeighborProtoCounters, t.neighbor.nd, "neighbor", "nd_");
  f.expect(net::kNeighborCounters, t.neighbor, "neighbor");
  f.want.push_back({"neighbor", "frames_malformed", 6});
  f.expect(net::kKernelNetCounters, *t.kernel, "kernel");
  f.expect(net::kXdpFilterCounters, *t.xdp, "xdp");
  f.expect(kFaultCounters, t.faults, "faults");
  *want = f.want;
  return t;
}

// Every number in the JSON, as "object.key" (or "key" at the top).
void numbers_in(const ordered_json& j, const std::string& prefix, std::set<std::string>* out) {
  for (const auto& [k, v] : j.items()) {
    if (v.is_object()) numbers_in(v, prefix + k + ".", out);
    else out->insert(prefix + k);
  }
}

std::string path_of(const Expected& e) { return e.object.empty() ? e.key : e.object + "." + e.key; }

TEST(Stats, EveryCounterOfEveryTableShowsInTheJsonAndTheTextWithItsValue) {
  std::vector<Expected> want;
  const CounterTotals t = full_totals(&want);
  const ordered_json j = ordered_json::parse(counters_json(t));
  const std::string text = cli::flat_text(j);
  std::set<std::string> paths;
  for (const Expected& e : want) {
    const std::string path = path_of(e);
    EXPECT_TRUE(paths.insert(path).second) << path << " twice";
    const ordered_json& o = e.object.empty() ? j : j.value(e.object, ordered_json::object());
    ASSERT_TRUE(o.contains(e.key)) << path << " is not in the JSON";
    EXPECT_TRUE(o[e.key].is_number_unsigned()) << path;
    EXPECT_EQ(o[e.key].get<uint64_t>(), e.value) << path;
    std::string line = path;
    line.append(line.size() < 40 ? 40 - line.size() : 0, ' ');
    line += " " + std::to_string(e.value) + "\n";
    EXPECT_NE(text.find(line), std::string::npos) << path << " is not in the text:\n" << text;
  }
  // Nothing else: every number in the JSON is a counter of a table (or a parse status), and
  // every line of the text one of the JSON.
  std::set<std::string> shown;
  numbers_in(j, "", &shown);
  EXPECT_EQ(shown, paths);
  EXPECT_EQ(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')), want.size()) << text;
}

TEST(Stats, TheGroupsComeInOrderAndOptionalOnesOnlyWhenThere) {
  std::vector<Expected> want;
  CounterTotals t = full_totals(&want);
  std::vector<std::string> keys;
  const ordered_json full = ordered_json::parse(counters_json(t));
  for (const auto& [k, v] : full.items())
    if (v.is_object()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"transport", "parse", "neighbor", "kernel", "xdp", "faults"}));
  // Without a CM, the kernel's view or the XDP program (droced on a memif port): none of
  // theirs, and an empty "parse" and the fault rules' totals still show.
  t.cm.reset();
  t.kernel.reset();
  t.xdp.reset();
  t.engine.parse = {};
  const ordered_json j = ordered_json::parse(counters_json(t));
  keys.clear();
  for (const auto& [k, v] : j.items())
    if (v.is_object() || k.rfind("cm_", 0) == 0) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"transport", "parse", "neighbor", "faults"}));
  EXPECT_EQ(j["parse"], ordered_json::object());
}

// A sink that keeps what it is told.
class Recorder : public CounterSink {
 public:
  void group(std::string_view name) override { group_ = name; }
  void counter(std::string_view name, uint64_t, std::string_view help) override {
    seen.push_back(group_ + "." + std::string(name));
    helps.push_back(std::string(help));
  }
  std::vector<std::string> seen, helps;

 private:
  std::string group_;
};

TEST(Stats, EveryCounterWalkedHasAHelpLine) {
  std::vector<Expected> want;
  const CounterTotals t = full_totals(&want);
  Recorder r;
  walk_counters(t, r);
  EXPECT_EQ(r.seen.size(), want.size());
  for (size_t i = 0; i < r.helps.size(); ++i) EXPECT_FALSE(r.helps[i].empty()) << r.seen[i];
}

}  // namespace
}  // namespace droce::droced
