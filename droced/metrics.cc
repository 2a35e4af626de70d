#include "droced/metrics.h"

#include <optional>

namespace droce::droced {

namespace {

// One counter family with its samples, appended to the text as they come (OpenMetrics wants a
// family's samples together, after its metadata).
class Family {
 public:
  Family(std::string* out, std::string_view name, std::string_view help) : out_(out), name_(metric_name(name)) {
    *out_ += "# TYPE " + name_ + " counter\n";
    if (!help.empty()) *out_ += "# HELP " + name_ + " " + escape_text(help) + "\n";
  }
  // `labels` as written between the braces (already escaped).
  void sample(std::string_view labels, uint64_t value) {
    *out_ += name_ + "_total{";
    *out_ += labels;
    *out_ += "} " + std::to_string(value) + "\n";
  }

 private:
  std::string* out_;
  std::string name_;
};

std::string label(std::string_view name, std::string_view value) {
  return std::string(name) + "=\"" + escape_text(value) + "\"";
}

// The totals as droce_<group>_<counter>, and the values kHwCounterNames asks for, kept for the
// rdma_ families that come after.
class OpenMetricsSink : public CounterSink {
 public:
  OpenMetricsSink(std::string* out, std::string labels) : out_(out), labels_(std::move(labels)) {}
  void group(std::string_view name) override { group_ = name; }
  void counter(std::string_view name, uint64_t value, std::string_view help) override {
    Family(out_, "droce_" + (group_.empty() ? std::string() : group_ + "_") + std::string(name), help)
        .sample(labels_, value);
    for (size_t i = 0; i < std::size(kHwCounterNames); ++i)
      if (kHwCounterNames[i].group == group_ && kHwCounterNames[i].counter == name) hw_[i] = {value, help};
  }
  struct Seen {
    uint64_t value;
    std::string_view help;
  };
  // What the walk gave for kHwCounterNames[i]; none for a group the totals lack.
  const std::optional<Seen>& hw(size_t i) const { return hw_[i]; }

 private:
  std::string* out_;
  std::string labels_;
  std::string group_;
  std::optional<Seen> hw_[std::size(kHwCounterNames)];
};

std::string hw_help(const HwCounterName& h, std::string_view help) {
  return std::string(h.driver) + "'s " + std::string(h.hw) + ": droce's " +
         (h.group.empty() ? std::string() : std::string(h.group) + " ") + std::string(h.counter) + ", " +
         std::string(help);
}

const core::Counter<rocev2::QpCounters>* qp_counter(std::string_view name) {
  for (const auto& c : rocev2::kQpCounters)
    if (name == c.name) return &c;
  return nullptr;
}

}  // namespace

std::string metric_name(std::string_view name) {
  std::string out;
  if (!name.empty() && name[0] >= '0' && name[0] <= '9') out += '_';
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out += ok ? c : '_';
  }
  return out;
}

std::string escape_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string render_openmetrics(const MetricsSnapshot& m) {
  std::string out;
  const std::string device = label("device", m.device);
  OpenMetricsSink sink(&out, device);
  walk_counters(m.totals, sink);

  std::vector<std::string> qp_labels;
  for (const QpCounterRow& row : m.qps) qp_labels.push_back(device + "," + label("qpn", std::to_string(row.qpn)));
  if (!m.qps.empty()) {
    for (const auto& c : rocev2::kQpCounters) {
      Family f(&out, "droce_qp_" + std::string(c.name), c.help);
      for (size_t i = 0; i < m.qps.size(); ++i) f.sample(qp_labels[i], m.qps[i].counters.*c.member);
    }
  }

  const std::string port = device + "," + label("port", "1");
  for (size_t i = 0; i < std::size(kHwCounterNames); ++i) {
    const HwCounterName& h = kHwCounterNames[i];
    if (const auto& seen = sink.hw(i)) Family(&out, "rdma_" + std::string(h.hw), hw_help(h, seen->help)).sample(port, seen->value);
  }
  if (!m.qps.empty()) {
    for (const HwCounterName& h : kHwCounterNames) {
      const core::Counter<rocev2::QpCounters>* c = h.group == "transport" ? qp_counter(h.counter) : nullptr;
      if (c == nullptr) continue;
      Family f(&out, "rdma_qp_" + std::string(h.hw), hw_help(h, c->help) + " (per QP)");
      for (const QpCounterRow& row : m.qps)
        f.sample(port + "," + label("qpn", std::to_string(row.qpn)), row.counters.*c->member);
    }
  }
  out += "# EOF\n";
  return out;
}

}  // namespace droce::droced
