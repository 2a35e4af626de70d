#include "droced/stats.h"

#include <sched.h>

#include <mutex>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/proc.h"
#include "hw_offload/select.h"
#include "rocev2/format.h"

namespace droce::droced {

namespace {

using Json = nlohmann::ordered_json;  // keys in the order they are set: the output's order

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Every counter of a table, its name prefixed.
template <class S, size_t N>
void walk(CounterSink& sink, const core::Counter<S> (&table)[N], const S& s, std::string_view prefix = {}) {
  for (const core::Counter<S>& c : table)
    sink.counter(prefix.empty() ? std::string(c.name) : std::string(prefix) + c.name, s.*c.member, c.help);
}

// The totals as nested JSON objects. at_ points at the object being filled: the top one, or
// the group last added to it (adding a member may move the others, so it is taken again at
// every group()).
class JsonSink : public CounterSink {
 public:
  explicit JsonSink(Json* out) : top_(out), at_(out) { *out = Json::object(); }
  void group(std::string_view name) override { at_ = &((*top_)[std::string(name)] = Json::object()); }
  void counter(std::string_view name, uint64_t value, std::string_view) override {
    (*at_)[std::string(name)] = value;
  }

 private:
  Json* top_;
  Json* at_;
};

Json counters_object(const CounterTotals& t) {
  Json j;
  JsonSink sink(&j);
  walk_counters(t, sink);
  return j;
}

// Every counter of a table into a row.
template <class S, size_t N>
void put_all(Json& row, const core::Counter<S> (&table)[N], const S& s) {
  for (const core::Counter<S>& c : table) row[c.name] = s.*c.member;
}

// One entry of a table (core::counter_named) into a row.
template <class S>
void put(Json& row, const core::Counter<S>& c, const S& s) {
  row[c.name] = s.*c.member;
}

// The scheduling policy the kernel applies to a worker's thread (ThreadSched::policy), as chrt
// names it ("?" before the thread runs): what --event-policy asked for, or what was refused, or
// what chrt changed.
const char* policy_name(int policy) {
  switch (policy) {
    case SCHED_OTHER: return "other";
    case SCHED_RR: return "rr";
    case SCHED_FIFO: return "fifo";
    case SCHED_BATCH: return "batch";
    case SCHED_IDLE: return "idle";
    default: return "?";
  }
}

// "239.1.2.3,ff0e::42" or "-".
std::string groups_text(const std::vector<net::IpAddr>& groups) {
  std::string out;
  for (const net::IpAddr& g : groups) out += (out.empty() ? "" : ",") + rocev2::format_ip(g);
  return out.empty() ? "-" : out;
}

Json device_section(const StatsSources& s) {
  size_t clients = 0;
  for (const auto& w : *s.workers) clients += w->sessions().size();
  Json d;
  d["name"] = s.cfg->name;
  d["node_guid"] = net::format_guid(s.node_guid);
  d["socket"] = s.socket_path;
  d["clients"] = clients;
  d["lcores"] = s.workers->size();
  return d;
}

Json ports_section(const StatsSources& s) {
  net::Port& port = *s.port;
  const net::LinkState link = port.link();
  Json p;
  p["port"] = 1;
  p["devargs"] = s.cfg->port;
  p["driver"] = port.driver_name();
  p["mac"] = rocev2::format_mac(port.mac());
  p["mtu"] = port.wire_mtu();
  p["offloads"] = hw_offload::select_offloads(port).name;  // what the engines were given at start
  // On a netdev shared with the kernel (--netdev), what keeps the kernel from taking in droce's
  // RoCE frames a second time: droce's XDP program (af_xdp), its TC ingress filter (af_packet,
  // packet), or nothing (droced warned at start; the kernel then segments and receives each).
  if (!s.cfg->netdev.empty())
    p["kernel_filter"] = s.xdp == nullptr ? "none" : s.xdp->on_tc() ? "tc droce_tc" : "xdp droce_xdp";
  p["state"] = link.up ? "ACTIVE" : "DOWN";
  p["speed_mbps"] = link.speed_mbps;
  p["rx_queues"] = port.rx_queues();
  p["tx_queues"] = port.tx_queues();
  if (rte_eth_stats st{}; port.stats(&st) == 0) {
    Json& j = p["stats"];
    j["rx_packets"] = st.ipackets;
    j["tx_packets"] = st.opackets;
    j["rx_bytes"] = st.ibytes;
    j["tx_bytes"] = st.obytes;
    j["rx_missed"] = st.imissed;
    j["rx_errors"] = st.ierrors;
    j["tx_errors"] = st.oerrors;
  }
  // The driver's own counters (droce_shm: ring full, wake-ups sent, bad slots from the peer...).
  if (std::vector<std::pair<std::string, uint64_t>> xs; port.xstats(&xs) == 0) {
    Json& j = p["xstats"] = Json::object();
    for (const auto& [name, value] : xs) j[name] = value;
  }
  return Json::array({p});
}

Json gids_section(const StatsSources& s) {
  Json gids = Json::array();
  for (uint32_t i = 0; i < s.gids->capacity(); ++i) {
    const net::GidEntry* g = s.gids->at(i);
    if (g == nullptr) continue;
    Json e;
    e["index"] = i;
    e["gid"] = net::format_gid(g->gid);
    e["address"] = rocev2::format_ip(g->gid);
    e["type"] = g->type == net::GidType::roce_v2 ? "RoCE v2" : "RoCE v1";
    e["vlan"] = g->vlan == net::kNoVlan ? 0 : g->vlan;
    gids.push_back(std::move(e));
  }
  return gids;
}

}  // namespace

// The totals: every worker's counters added up, worker 0's CM, the group's neighbour table
// and kernel view (under its lock), the XDP program's.
CounterTotals counter_totals(const StatsSources& s) {
  CounterTotals t;
  for (const auto& w : *s.workers) {
    t.transport += w->core().engine().qp_totals();
    const rocev2::EngineCounters& e = w->core().engine().counters();
    t.engine.parse += e.parse;
    core::add_counters(rocev2::kEngineCounters, e, &t.engine);
    core::add_counters(kDeviceCoreCounters, w->core().counters(), &t.device);
    core::add_counters(kWorkerCounters, w->counters(), &t.worker);
    t.faults += w->core().faults().totals();
  }
  t.daemon = s.counters;
  if (const CmHost* cm = s.workers->empty() ? nullptr : (*s.workers)[0]->cm())
    t.cm = CmCounters{cm->counters(), cm->agent_counters(), cm->ucma().counters()};
  {
    std::lock_guard l(s.group->neighbor_mutex());
    t.neighbor = s.group->neighbors().counters();
    if (const net::KernelNet* k = s.group->kernel()) t.kernel = k->counters();
  }
  if (net::XdpFilterCounters xc; s.xdp != nullptr && s.xdp->counters(&xc) == 0) t.xdp = xc;
  if (s.jobs != nullptr) t.jobs = s.jobs->snapshot();
  return t;
}

std::vector<QpCounterRow> qp_counter_rows(const StatsSources& s) {
  std::vector<QpCounterRow> rows;
  for (const auto& w : *s.workers) {
    rocev2::Engine& e = w->core().engine();
    for (const auto& [k, session] : w->sessions())
      for (uint32_t qpn : session->qpns())
        if (const rocev2::Qp* q = e.qp(qpn)) rows.push_back({qpn, q->counters});
  }
  return rows;
}

namespace {

// One row per worker: its place, its thread as the scheduler saw it, its policies' counters
// and a few of its engine's and device core's.
Json cores_section(const StatsSources& s) {
  Json cores = Json::array();
  for (const auto& w : *s.workers) {
    const rocev2::EngineCounters& e = w->core().engine().counters();
    const DeviceCoreCounters& d = w->core().counters();
    const WorkerCounters& wc = w->counters();
    size_t qps = 0;
    for (const auto& [k, session] : w->sessions()) qps += session->qp_count();
    const int rxq = s.group->rx_queue_of(w->index());
    // How the scheduler has treated the worker's thread: time waiting for a CPU and
    // preemptions say that it shares its CPU with busy programs.
    core::ThreadSched ts;
    const bool have_ts = w->tid() != 0 && core::read_thread_sched(w->tid(), &ts);
    Json r;
    r["core"] = w->index();
    r["lcore"] = w->lcore();
    r["rx_queue"] = rxq < 0 ? std::string("-") : std::to_string(rxq);
    r["tx_queue"] = s.group->tx_queue_of(w->index());
    r["clients"] = w->sessions().size();
    r["qps"] = qps;
    r["mode"] = w->polling() ? "poll" : "event";
    r["mode_reason"] = w->mode_reason();
    r["cpus"] = w->cpus();
    r["policy"] = policy_name(have_ts ? ts.policy : -1);
    put(r, core::counter_named(kWorkerCounters, "affinity_changes"), wc);
    put(r, core::counter_named(kWorkerCounters, "affinity_stays"), wc);
    r["on_cpu"] = have_ts ? std::to_string(ts.cpu) : std::string("?");
    r["cpu_ms"] = ts.run_ns / 1'000'000;
    r["wait_ms"] = ts.wait_ns / 1'000'000;
    r["blocked"] = ts.voluntary;
    r["preempted"] = ts.involuntary;
    r["spin_us"] = w->polling() ? 0 : w->spin_us();
    r["wake_us"] = w->polling() ? 0 : w->wake_us();
    put_all(r, kSpinCounters, w->spin_counters());
    put_all(r, kYieldCounters, w->yield_counters());
    put(r, core::counter_named(kWorkerCounters, "loops"), wc);
    put(r, core::counter_named(kWorkerCounters, "sleeps"), wc);
    put(r, core::counter_named(kWorkerCounters, "wakeups_by_port"), wc);
    put(r, core::counter_named(kWorkerCounters, "wakeups_by_client"), wc);
    put(r, core::counter_named(kWorkerCounters, "wakeups_by_timer"), wc);
    put(r, core::counter_named(kWorkerCounters, "stuck_blocks"), wc);
    put_all(r, kAckHoldCounters, w->ack_hold_counters());
    put_all(r, kRealtimeCounters, w->realtime_counters());
    put(r, core::counter_named(rocev2::kEngineCounters, "rx_frames"), e);
    put(r, core::counter_named(rocev2::kEngineCounters, "tx_frames"), e);
    put(r, core::counter_named(kDeviceCoreCounters, "handed_in"), d);
    put(r, core::counter_named(kDeviceCoreCounters, "handed_out"), d);
    put(r, core::counter_named(kDeviceCoreCounters, "hand_off_dropped"), d);
    cores.push_back(std::move(r));
  }
  return cores;
}

Json clients_section(const StatsSources& s) {
  Json clients = Json::array();
  for (const auto& w : *s.workers) {
    for (const auto& [k, session] : w->sessions()) {
      Json r;
      r["id"] = session->id();
      r["pid"] = static_cast<uint64_t>(session->pid() < 0 ? 0 : session->pid());
      r["program"] = session->program();
      r["core"] = w->index();
      r["qps"] = session->qp_count();
      r["cqs"] = session->cq_count();
      r["mrs"] = session->mr_count();
      r["doorbells_queued"] = session->doorbells_queued();
      r["sq_entries_unread"] = session->sq_entries_unread();
      put_all(r, kSessionCounters, session->counters());
      clients.push_back(std::move(r));
    }
  }
  return clients;
}

Json qps_section(const StatsSources& s) {
  Json qps = Json::array();
  for (const auto& w : *s.workers) {
    rocev2::Engine& e = w->core().engine();
    for (const auto& [k, session] : w->sessions()) {
      for (uint32_t qpn : session->qpns()) {
        const rocev2::Qp* q = e.qp(qpn);
        if (q == nullptr) continue;
        Json r;
        r["qpn"] = qpn;
        r["client"] = session->id();
        r["core"] = w->index();
        r["type"] = rocev2::to_string(q->type);
        r["state"] = rocev2::to_string(q->state);
        r["dest_qpn"] = q->attr.dest_qp_num;
        r["dest"] = rocev2::format_ip(q->attr.ah_attr.dgid);
        put_all(r, rocev2::kQpCounters, q->counters);
        // Where the QP's transport stands (a stalled QP shows it here): WQEs posted and
        // completed, the requester's next and oldest unacknowledged PSN and how long until
        // its ACK timeout (-1: not armed), the responder's expected PSN and a pending ACK.
        r["sq_posted"] = q->sq_head;
        r["sq_completed"] = q->sq_tail;
        r["next_psn"] = q->req.next_psn;
        r["unacked_psn"] = q->req.unacked_psn;
        r["ack_timeout_in_us"] =
            q->req.retry_deadline == 0 ? -1 : (int64_t(q->req.retry_deadline) - int64_t(core::monotonic_ns())) / 1000;
        r["expected_psn"] = q->resp.epsn;
        r["ack_pending"] = q->resp.ack_pending;
        // DCQCN (rocev2/dcqcn.h): the reaction point's current and target rate in Mbit/s
        // while a CNP limits the QP; 0: not limited (the line rate).
        r["rate_mbps"] = q->rp.rc();
        r["target_rate_mbps"] = q->rp.rt();
        qps.push_back(std::move(r));
      }
    }
  }
  return qps;
}

// The groups QPs are attached to, per core's engine.
Json multicast_section(const StatsSources& s) {
  Json groups = Json::array();
  for (const auto& w : *s.workers) {
    for (const auto& [gid, qpns] : w->core().engine().mcast_table()) {
      std::string list;
      for (uint32_t q : qpns) list += (list.empty() ? "" : ",") + std::to_string(q);
      Json r;
      r["group"] = rocev2::format_ip(gid);
      r["core"] = w->index();
      r["qpns"] = list;
      groups.push_back(std::move(r));
    }
  }
  return groups;
}

// The memberships droced reports on the wire (IGMP/MLD) for rdma_cm's joins, and a last row
// with the reporter's counters.
Json membership_section(const StatsSources& s) {
  Json rows = Json::array();
  if (s.workers->empty()) return rows;
  CoreGroup& g = (*s.workers)[0]->core().group();
  std::lock_guard l(g.neighbor_mutex());
  for (const auto& [group, src] : g.membership().groups()) {
    Json r;
    r["group"] = rocev2::format_ip(group);
    r["source"] = rocev2::format_ip(src);
    rows.push_back(std::move(r));
  }
  Json c;
  c["group"] = "counters";
  put_all(c, net::kMembershipCounters, g.membership().counters());
  rows.push_back(std::move(c));
  return rows;
}

// rdma_cm ids (worker 0's CM): what librdmacm programs bound, listen on and are connected to.
Json cm_section(const StatsSources& s) {
  Json ids = Json::array();
  const CmHost* cm = s.workers->empty() ? nullptr : (*s.workers)[0]->cm();
  if (cm == nullptr) return ids;
  const auto endpoint = [](const net::IpAddr& ip, uint16_t port) {
    return (net::is_ipv4_mapped(ip) ? rocev2::format_ip(ip) : "[" + rocev2::format_ip(ip) + "]") + ":" +
           std::to_string(port);
  };
  for (const cm::UcmaIdInfo& i : cm->ucma().ids()) {
    const auto agent = i.conn != 0 ? cm->agent_state(i.conn) : std::nullopt;
    Json r;
    r["id"] = i.handle;
    r["channel"] = i.channel;
    r["port_space"] = i.ps == 0x0106 ? "tcp" : i.ps == 0x0111 ? "udp" : i.ps == 0x013F ? "ib" : "ipoib";
    r["state"] = i.state;
    r["local"] = endpoint(i.src, i.sport);
    r["remote"] = i.dport != 0 ? endpoint(i.dst, i.dport) : "-";
    r["comm_id"] = i.conn;
    r["cm_state"] = agent ? cm::to_string(*agent) : "-";
    r["qpn"] = i.qp_num;
    r["remote_qpn"] = i.remote_qpn;
    r["events_reported"] = i.events_reported;
    r["groups"] = groups_text(i.groups);
    ids.push_back(std::move(r));
  }
  return ids;
}

// The fault rules (`droce fault`) and what each did, its counters added up over the cores.
Json faults_section(const StatsSources& s) {
  Json rows = Json::array();
  if (s.faults == nullptr) return rows;
  for (const FaultRule& r : s.faults->rules()) {
    FaultCounters sum;
    for (const auto& w : *s.workers)
      for (const auto& [id, c] : w->core().faults().rule_counters())
        if (id == r.id) sum += c;
    Json j;
    j["id"] = r.id;
    j["qpn"] = r.qpn == kAllQps ? Json("all") : Json(r.qpn);
    j["direction"] = to_string(r.direction);
    j["spec"] = r.spec.to_string();
    j["seed"] = r.seed;
    put_all(j["counters"], kFaultCounters, sum);
    rows.push_back(std::move(j));
  }
  return rows;
}

// The device's DCQCN parameters in force (`droce cc`), by mlx5's names, in kCcParams' order.
Json cc_section(const StatsSources& s) {
  Json j = Json::object();
  if (s.cc == nullptr) return j;
  const rocev2::CcParams p = s.cc->get();
  for (const rocev2::CcParamInfo& i : rocev2::kCcParams) j[i.name] = p.*(i.member);
  return j;
}

// The device's defaults for them (its link's), as `droce cc` shows them beside the values.
Json cc_defaults_section(const StatsSources& s) {
  Json j = Json::object();
  if (s.cc == nullptr) return j;
  const rocev2::CcParams& p = s.cc->defaults();
  for (const rocev2::CcParamInfo& i : rocev2::kCcParams) j[i.name] = p.*(i.member);
  return j;
}

}  // namespace

void walk_counters(const CounterTotals& t, CounterSink& sink) {
  walk(sink, rocev2::kEngineCounters, t.engine);
  walk(sink, kDeviceCoreCounters, t.device);
  walk(sink, kWorkerCounters, t.worker);
  walk(sink, kDaemonCounters, t.daemon);
  // Control work off the workers (droced/control_jobs.h): registrations populated, mappings
  // unmapped.
  if (t.jobs) walk(sink, kControlJobCounters, *t.jobs, "control_jobs_");
  if (t.cm) {
    // The connection manager on QP1 (worker 0): MADs in and out, and what it refused.
    walk(sink, kCmHostCounters, t.cm->host, "cm_");
    sink.counter("cm_mads_malformed", t.cm->agent.malformed(), "MADs the agent could not decode (cm::MadError)");
    walk(sink, cm::kAgentCounters, t.cm->agent, "cm_");
    walk(sink, cm::kUcmaCounters, t.cm->ucma, "cm_");
  }
  // The transport: every QP's counters added up since droced started, destroyed QPs' too.
  sink.group("transport");
  walk(sink, rocev2::kQpCounters, t.transport);
  sink.group("parse");
  for (size_t i = 0; i < rocev2::kParseStatusCount; ++i) {
    const auto status = static_cast<rocev2::ParseStatus>(i);
    if (t.engine.parse[status] != 0)
      sink.counter(rocev2::to_string(status), t.engine.parse[status], rocev2::describe(status));
  }
  sink.group("neighbor");
  walk(sink, net::kNeighborProtoCounters, t.neighbor.arp, "arp_");
  walk(sink, net::kNeighborProtoCounters, t.neighbor.nd, "nd_");
  walk(sink, net::kNeighborCounters, t.neighbor);
  sink.counter("frames_malformed", t.neighbor.total_dropped(), "malformed ARP/ND frames (net::NeighborDrop)");
  if (t.kernel) {
    // The kernel's view (--netdev): what droced asked it and what it answered.
    sink.group("kernel");
    walk(sink, net::kKernelNetCounters, *t.kernel);
  }
  if (t.xdp) {
    // droce's filter (XDP on af_xdp, TC ingress on af_packet): RoCE taken (af_packet: dropped
    // after the tap), RoCE for addresses not droce's (left to the kernel), passed.
    sink.group("xdp");
    walk(sink, net::kXdpFilterCounters, *t.xdp);
  }
  // What the fault rules did (`droce fault`, --drop-rate), every rule's added up.
  sink.group("faults");
  walk(sink, kFaultCounters, t.faults);
}

std::string counters_json(const CounterTotals& t) { return dump(counters_object(t)); }

std::string stats_json(const StatsSources& s) {
  Json j;
  j["device"] = device_section(s);
  j["ports"] = ports_section(s);
  j["gids"] = gids_section(s);
  j["counters"] = counters_object(counter_totals(s));
  j["cores"] = cores_section(s);
  j["clients"] = clients_section(s);
  j["qps"] = qps_section(s);
  j["multicast"] = multicast_section(s);
  j["membership"] = membership_section(s);
  j["cm"] = cm_section(s);
  j["faults"] = faults_section(s);
  j["cc"] = cc_section(s);
  j["cc_defaults"] = cc_defaults_section(s);
  return dump(j);
}

}  // namespace droce::droced
