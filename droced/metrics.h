#pragma once
// droced's counters in the OpenMetrics text format (openmetrics.io, which Prometheus scrapes);
// `droced --metrics ADDR:PORT` serves it (droced/metrics_server.h). The rendering is I/O-free, a
// function from a snapshot of the counters to the text, so a test can check every line.
//
// Every family is a counter: `# TYPE`, `# HELP` (the counter table's help line), then its
// samples `<family>_total{labels} value`; `# EOF` ends the text. The families, in this order:
//
//   droce_<group>_<counter>  every total walk_counters() walks, which is what `droce counters
//                            --json` prints (the same tables, the same values): the group, if
//                            any, prefixes the name: droce_rx_frames, droce_transport_retransmits,
//                            droce_neighbor_arp_requests_sent. Label: device.
//   droce_qp_<counter>       every live QP's counters (rocev2::kQpCounters; the `qps` rows).
//                            Labels: device, qpn. A QP destroyed is gone from these (its counts
//                            stay in droce_transport_*).
//   rdma_<hw_counter>        the totals kHwCounterNames maps, under the name the kernel's RDMA
//                            drivers give the same count in sysfs (`ports/1/hw_counters/`), as
//                            exporters of those counters publish them (rdma_<name>_total with
//                            device and port), so their dashboards show droce too. Labels:
//                            device, port ("1").
//   rdma_qp_<hw_counter>     the same per live QP. Labels: device, port, qpn. A family apart
//                            from rdma_<hw_counter>, so that a sum over one never counts twice.
//
// Names keep only [a-zA-Z0-9_]; label values and help text are escaped as OpenMetrics asks
// (backslash, double quote, newline).
//
// Threading: none; everything here only reads its arguments. Errors: none.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "droced/stats.h"

namespace droce::droced {

/// What a scrape shows, read at one moment (Daemon::metrics_snapshot).
struct MetricsSnapshot {
  std::string device;  ///< the device name (droce0): the `device` label
  CounterTotals totals;
  std::vector<QpCounterRow> qps;
};

/// A droce counter that counts what a kernel RDMA driver's hw_counters file of another name
/// counts. Found by reading where the driver increments it (rxe: rxe_hw_counters.c names them,
/// rxe_comp.c, rxe_resp.c and rxe_net.c count them; mlx5: its counters.c, NVIDIA's
/// "Understanding mlx5 Linux counters"), not by the names' likeness.
struct HwCounterName {
  std::string_view group;    ///< walk_counters()'s group ("" for none)
  std::string_view counter;  ///< droce's name in it; in "transport", also a kQpCounters name
  std::string_view hw;       ///< the hw_counters file
  std::string_view driver;   ///< whose name: "rxe" or "mlx5"
};

/// The one place droce's counters meet the kernel's names. Each line says how the counts
/// differ, where they do. Names of rxe's with no droce counter counting the same, left out:
/// ack_deferred (a response queued behind another for rxe's completer task), completer_retry_err
/// (a go-back-N sequence started; droce counts its causes, timeouts and sequence NAKs), send_err
/// (a frame the IP layer refused, lost; droce's port refusals are sent again, tx_port_full),
/// rdma_sends and rdma_recvs (SEND WRs and receive WQEs completed; droce's rdma_sends and
/// rdma_recvs count RDMA WRITE and READ requests).
inline constexpr HwCounterName kHwCounterNames[] = {
    {"transport", "tx_packets", "sent_pkts", "rxe"},  // every packet of a QP: requests, ACKs, responses
    {"transport", "rx_packets", "rcvd_pkts", "rxe"},
    {"transport", "duplicate_requests", "duplicate_request", "rxe"},  // the same name in mlx5
    {"transport", "seq_naks_sent", "out_of_seq_request", "rxe"},      // rxe counts one per gap: its NAK
    {"transport", "out_of_sequence", "out_of_sequence", "mlx5"},      // every request out of order
    {"transport", "rnr_naks_sent", "send_rnr_err", "rxe"},
    {"transport", "rnr_naks_received", "rcvd_rnr_err", "rxe"},
    {"transport", "rnr_naks_received", "rnr_nak_retry_err", "mlx5"},  // mlx5 leaves out the one past the limit
    {"transport", "seq_naks_received", "rcvd_seq_err", "rxe"},
    {"transport", "seq_naks_received", "packet_seq_err", "mlx5"},
    {"transport", "timeouts", "local_ack_timeout_err", "mlx5"},     // mlx5 leaves out the one past the limit
    {"transport", "implied_naks", "implied_nak_seq_err", "mlx5"},
    {"transport", "retry_exceeded", "retry_exceeded_err", "rxe"},
    {"transport", "rnr_retry_exceeded", "retry_rnr_exceeded_err", "rxe"},
    {"", "link_downs", "link_downed", "rxe"},
    // DCQCN (rocev2/dcqcn.h): mlx5's congestion counters, counted where mlx5 counts them.
    {"", "np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets", "mlx5"},
    {"", "np_cnp_sent", "np_cnp_sent", "mlx5"},
    {"", "rp_cnp_handled", "rp_cnp_handled", "mlx5"},
    {"", "rp_cnp_ignored", "rp_cnp_ignored", "mlx5"},
};

/// The snapshot as OpenMetrics text, ending with "# EOF\n".
std::string render_openmetrics(const MetricsSnapshot& m);

/// `name` as a metric name: characters other than [a-zA-Z0-9_] become '_', and a leading
/// digit gets a '_' before it.
std::string metric_name(std::string_view name);

/// `text` escaped for a label value or a HELP line: \ as \\, " as \", newline as \n.
std::string escape_text(std::string_view text);

}  // namespace droce::droced
