// droced/metrics: the counters as OpenMetrics text. Crafted totals and QP rows, each counter a
// value no other has, must come out as exactly the lines the format asks for: a TYPE and a HELP
// line per family, one `_total` sample per total with the device label, one per live QP with
// qpn, the kernel's hw_counters names beside droce's, escaped labels, `# EOF` last. Every
// counter walk_counters() walks (what `droce counters --json` shows) must show with its value.

#include "droced/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

namespace droce::droced {
namespace {

// Every counter of every table a value of its own, the optional groups present.
CounterTotals full_totals() {
  uint64_t next = 1000;
  const auto fill = [&next](const auto& table, auto* s) {
    for (const auto& c : table) s->*c.member = next++;
  };
  CounterTotals t;
  fill(rocev2::kEngineCounters, &t.engine);
  fill(kDeviceCoreCounters, &t.device);
  fill(kWorkerCounters, &t.worker);
  fill(kDaemonCounters, &t.daemon);
  t.jobs.emplace();
  fill(kControlJobCounters, &*t.jobs);
  t.cm.emplace();
  fill(kCmHostCounters, &t.cm->host);
  fill(cm::kAgentCounters, &t.cm->agent);
  fill(cm::kUcmaCounters, &t.cm->ucma);
  fill(rocev2::kQpCounters, &t.transport);
  t.engine.parse.by_status[static_cast<size_t>(rocev2::ParseStatus::bad_icrc)] = 3;
  fill(net::kNeighborProtoCounters, &t.neighbor.arp);
  fill(net::kNeighborProtoCounters, &t.neighbor.nd);
  fill(net::kNeighborCounters, &t.neighbor);
  t.kernel.emplace();
  fill(net::kKernelNetCounters, &*t.kernel);
  t.xdp.emplace();
  fill(net::kXdpFilterCounters, &*t.xdp);
  return t;
}

rocev2::QpCounters qp_counters(uint64_t base) {
  rocev2::QpCounters q;
  for (const auto& c : rocev2::kQpCounters) q.*c.member = base++;
  return q;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  const std::vector<std::string> all = lines_of(text);
  return std::find(all.begin(), all.end(), line) != all.end();
}

// What walk_counters() tells, as (family name, value, help).
struct Walked {
  std::string family, help;
  uint64_t value;
};
class Recorder : public CounterSink {
 public:
  void group(std::string_view name) override { group_ = name; }
  void counter(std::string_view name, uint64_t value, std::string_view help) override {
    seen.push_back({"droce_" + (group_.empty() ? "" : group_ + "_") + std::string(name), std::string(help), value});
    by_group_name[group_ + "." + std::string(name)] = value;
  }
  std::vector<Walked> seen;
  std::map<std::string, uint64_t> by_group_name;

 private:
  std::string group_;
};

TEST(Metrics, EveryWalkedCounterIsAFamilyWithItsTypeHelpAndValue) {
  MetricsSnapshot m;
  m.device = "droce0";
  m.totals = full_totals();
  const std::string text = render_openmetrics(m);
  Recorder r;
  walk_counters(m.totals, r);
  ASSERT_GT(r.seen.size(), 100u);
  for (const Walked& w : r.seen) {
    EXPECT_TRUE(has_line(text, "# TYPE " + w.family + " counter")) << w.family;
    EXPECT_TRUE(has_line(text, "# HELP " + w.family + " " + w.help)) << w.family;
    EXPECT_TRUE(has_line(text, w.family + "_total{device=\"droce0\"} " + std::to_string(w.value))) << w.family;
  }
  // A few by name, as a dashboard would ask for them.
  EXPECT_TRUE(has_line(text, "# TYPE droce_transport_retransmits counter"));
  EXPECT_TRUE(has_line(text, "droce_transport_retransmits_total{device=\"droce0\"} " +
                                 std::to_string(m.totals.transport.retransmits)));
  EXPECT_TRUE(has_line(text, "droce_parse_bad_icrc_total{device=\"droce0\"} 3"));
  EXPECT_TRUE(has_line(text, "droce_rx_frames_total{device=\"droce0\"} " + std::to_string(m.totals.engine.rx_frames)));
  EXPECT_TRUE(has_line(text, "# HELP droce_rx_frames " + std::string(core::counter_named(rocev2::kEngineCounters,
                                                                                          "rx_frames").help)));
  // The parse results show only those not 0, as in the JSON.
  EXPECT_EQ(text.find("droce_parse_ok"), std::string::npos);
}

TEST(Metrics, TheTextIsWellFormedAndEndsWithEof) {
  MetricsSnapshot m;
  m.device = "droce0";
  m.totals = full_totals();
  m.qps = {{17, qp_counters(5)}, {18, qp_counters(500)}};
  const std::string text = render_openmetrics(m);
  ASSERT_GE(text.size(), 6u);
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n");
  EXPECT_EQ(text.find("# EOF"), text.size() - 6);  // once, last
  std::set<std::string> families;
  std::string current;
  for (const std::string& l : lines_of(text)) {
    ASSERT_FALSE(l.empty()) << "a blank line";
    if (l == "# EOF") continue;
    if (l.rfind("# TYPE ", 0) == 0) {
      current = l.substr(7, l.find(' ', 7) - 7);
      EXPECT_EQ(l, "# TYPE " + current + " counter");
      EXPECT_TRUE(families.insert(current).second) << current << " twice";
      // Clashing names: no family may be another's sample name.
      EXPECT_EQ(current.size() > 6 && current.substr(current.size() - 6) == "_total", false) << current;
      continue;
    }
    if (l.rfind("# HELP ", 0) == 0) {
      EXPECT_EQ(l.rfind("# HELP " + current + " ", 0), 0u) << l;
      continue;
    }
    // A sample of the family just declared: name_total{labels} value, nothing else.
    EXPECT_EQ(l.rfind(current + "_total{", 0), 0u) << l;
    const size_t close = l.find("} ");
    ASSERT_NE(close, std::string::npos) << l;
    EXPECT_EQ(l.find_first_not_of("0123456789", close + 2), std::string::npos) << l;
    for (char c : current) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << current;
  }
}

TEST(Metrics, LiveQpsHaveTheirOwnFamiliesLabelledWithTheirQpn) {
  MetricsSnapshot m;
  m.device = "droce0";
  m.totals = full_totals();
  const rocev2::QpCounters a = qp_counters(5), b = qp_counters(500);
  m.qps = {{17, a}, {18, b}};
  const std::string text = render_openmetrics(m);
  for (const auto& c : rocev2::kQpCounters) {
    const std::string f = "droce_qp_" + std::string(c.name);
    EXPECT_TRUE(has_line(text, "# TYPE " + f + " counter")) << f;
    EXPECT_TRUE(has_line(text, "# HELP " + f + " " + c.help)) << f;
    EXPECT_TRUE(has_line(text, f + "_total{device=\"droce0\",qpn=\"17\"} " + std::to_string(a.*c.member))) << f;
    EXPECT_TRUE(has_line(text, f + "_total{device=\"droce0\",qpn=\"18\"} " + std::to_string(b.*c.member))) << f;
  }
  // Without live QPs, no per-QP family at all.
  m.qps.clear();
  const std::string none = render_openmetrics(m);
  EXPECT_EQ(none.find("droce_qp_"), std::string::npos);
  EXPECT_EQ(none.find("rdma_qp_"), std::string::npos);
}

TEST(Metrics, TheKernelsHwCounterNamesCarryTheSameValues) {
  MetricsSnapshot m;
  m.device = "droce0";
  m.totals = full_totals();
  const rocev2::QpCounters a = qp_counters(5);
  m.qps = {{17, a}};
  const std::string text = render_openmetrics(m);
  Recorder r;
  walk_counters(m.totals, r);
  for (const HwCounterName& h : kHwCounterNames) {
    const std::string key = std::string(h.group) + "." + std::string(h.counter);
    ASSERT_TRUE(r.by_group_name.count(key)) << key << " is no counter walk_counters() walks";
    const std::string f = "rdma_" + std::string(h.hw);
    EXPECT_TRUE(has_line(text, "# TYPE " + f + " counter")) << f;
    EXPECT_TRUE(has_line(text, f + "_total{device=\"droce0\",port=\"1\"} " + std::to_string(r.by_group_name[key])))
        << f;
    if (h.group != "transport") {
      EXPECT_EQ(text.find("rdma_qp_" + std::string(h.hw)), std::string::npos) << h.hw;
      continue;
    }
    uint64_t per_qp = 0;
    for (const auto& c : rocev2::kQpCounters)
      if (h.counter == c.name) per_qp = a.*c.member;
    EXPECT_TRUE(has_line(text, "rdma_qp_" + std::string(h.hw) + "_total{device=\"droce0\",port=\"1\",qpn=\"17\"} " +
                                   std::to_string(per_qp)))
        << h.hw;
  }
  // The rxe names the kernel's soft-RoCE dashboards ask for first.
  for (const char* name : {"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
                           "send_rnr_err", "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err",
                           "link_downed"})
    EXPECT_TRUE(has_line(text, "# TYPE rdma_" + std::string(name) + " counter")) << name;
  EXPECT_TRUE(has_line(text, "rdma_sent_pkts_total{device=\"droce0\",port=\"1\"} " +
                                 std::to_string(m.totals.transport.tx_packets)));
  EXPECT_TRUE(has_line(text, "rdma_link_downed_total{device=\"droce0\",port=\"1\"} " +
                                 std::to_string(m.totals.daemon.link_downs)));
}

TEST(Metrics, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(escape_text("plain"), "plain");
  EXPECT_EQ(escape_text("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  MetricsSnapshot m;
  m.device = "dev\"1\\\n";
  const std::string text = render_openmetrics(m);
  EXPECT_TRUE(has_line(text, "droce_rx_frames_total{device=\"dev\\\"1\\\\\\n\"} 0")) << text.substr(0, 400);
  EXPECT_EQ(text.find("dev\"1"), std::string::npos);  // never unescaped
}

TEST(Metrics, NamesKeepOnlyLettersDigitsAndUnderscores) {
  EXPECT_EQ(metric_name("droce_rx_frames"), "droce_rx_frames");
  EXPECT_EQ(metric_name("a-b.c d"), "a_b_c_d");
  EXPECT_EQ(metric_name("9lives"), "_9lives");
}

}  // namespace
}  // namespace droce::droced
