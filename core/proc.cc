#include "core/proc.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace droce::core {

namespace {

void skip_blanks(std::string_view* s) {
  while (!s->empty() && (s->front() == ' ' || s->front() == '\t')) s->remove_prefix(1);
}

// The next line of `text`, without its '\n'; advances `text` past it.
std::string_view take_line(std::string_view* text) {
  const size_t end = text->find('\n');
  const std::string_view line = text->substr(0, end);
  text->remove_prefix(end == std::string_view::npos ? text->size() : end + 1);
  return line;
}

// The first unsigned decimal of `s` after blanks; advances `s` past it.
bool take_u64(std::string_view* s, uint64_t* v) {
  skip_blanks(s);
  const auto [end, ec] = std::from_chars(s->data(), s->data() + s->size(), *v);
  if (ec != std::errc() || end == s->data()) return false;
  s->remove_prefix(size_t(end - s->data()));
  return true;
}

bool whole_u64(std::string_view s, uint64_t* v) {
  if (!take_u64(&s, v)) return false;
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  return s.empty();
}

}  // namespace

std::string_view status_value(std::string_view status, std::string_view key) {
  while (!status.empty()) {
    std::string_view line = take_line(&status);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':') {
      line.remove_prefix(key.size() + 1);
      skip_blanks(&line);
      return line;
    }
  }
  return {};
}

bool read_text(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

bool parse_thread_sched(std::string_view schedstat, std::string_view stat, std::string_view status, ThreadSched* out) {
  if (!take_u64(&schedstat, &out->run_ns) || !take_u64(&schedstat, &out->wait_ns)) return false;
  // stat: "pid (comm) state ppid ...": comm may hold blanks and parentheses, so count the
  // fields after the last ')' (state is the 1st): the CPU is field 39, the 37th after it, then
  // the real-time priority and the policy.
  const size_t paren = stat.rfind(')');
  if (paren == std::string_view::npos) return false;
  std::string_view rest = stat.substr(paren + 1);
  uint64_t cpu = 0, rt_priority = 0, policy = 0;
  for (int field = 1; field <= 39; ++field) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest.empty()) return false;
    const size_t end = std::min(rest.find_first_of(" \n"), rest.size());
    const std::string_view value = rest.substr(0, end);
    if ((field == 37 && !whole_u64(value, &cpu)) || (field == 38 && !whole_u64(value, &rt_priority)) ||
        (field == 39 && !whole_u64(value, &policy)))
      return false;
    rest.remove_prefix(end);
  }
  // Linux's highest RT priority is 99, its highest policy number SCHED_EXT's 7.
  if (cpu > 1u << 20 || rt_priority > 99 || policy > 7) return false;
  out->cpu = int(cpu);
  out->rt_priority = int(rt_priority);
  out->policy = int(policy);
  return whole_u64(status_value(status, "voluntary_ctxt_switches"), &out->voluntary) &&
         whole_u64(status_value(status, "nonvoluntary_ctxt_switches"), &out->involuntary);
}

bool read_thread_sched(pid_t tid, ThreadSched* out) {
  const std::string dir = "/proc/self/task/" + std::to_string(tid) + "/";
  std::string schedstat, stat, status;
  return read_text(dir + "schedstat", &schedstat) && read_text(dir + "stat", &stat) &&
         read_text(dir + "status", &status) && parse_thread_sched(schedstat, stat, status, out);
}

bool parse_cpu_idle(std::string_view proc_stat, std::vector<uint64_t>* ticks) {
  ticks->clear();
  bool any = false;
  while (!proc_stat.empty()) {
    std::string_view line = take_line(&proc_stat);
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"; the line
    // "cpu " (all CPUs together) and every other key are skipped.
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    line.remove_prefix(3);
    uint64_t cpu = 0, v[5];
    if (!take_u64(&line, &cpu) || cpu >= CPU_SETSIZE) return false;
    for (uint64_t& x : v)
      if (!take_u64(&line, &x)) return false;
    if (ticks->size() <= cpu) ticks->resize(cpu + 1, kNoCpu);
    (*ticks)[cpu] = v[3] + v[4];
    any = true;
  }
  return any;
}

bool read_cpu_idle(std::vector<uint64_t>* ticks) {
  std::string text;
  return read_text("/proc/stat", &text) && parse_cpu_idle(text, ticks);
}

uint64_t most_idle_elsewhere(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after,
                             const cpu_set_t& among, int except) {
  uint64_t most = 0;
  for (size_t c = 0; c < after.size() && c < CPU_SETSIZE; ++c) {
    if (int(c) == except || !CPU_ISSET(c, &among)) continue;
    // A CPU missing from either sample (hot-plugged meanwhile) has nothing to compare.
    if (c >= before.size() || after[c] == kNoCpu || before[c] == kNoCpu || after[c] < before[c]) continue;
    most = std::max(most, after[c] - before[c]);
  }
  return most;
}

}  // namespace droce::core
