#pragma once
// Network namespaces for control calls on kernel-netdev devices.
//
// Kernel-netdev PMDs (af_packet, af_xdp, tap) name and find their interface
// in the network namespace of the calling thread, and some of them open
// sockets there on every call (af_packet's MTU ioctl, af_xdp's XDP program
// detach on close). A link on such a device therefore remembers the
// namespace it was opened in (open_thread_netns) and re-enters it with a
// NetnsGuard around every control call, so droced's threads may live in any
// namespace. Open the device from inside the namespace the interface lives in.
//
// Entering another namespace needs CAP_SYS_ADMIN (setns). Control path only;
// never on the data path.

namespace droce::net {

/// The calling thread's network namespace, opened read-only and close-on-exec
/// (/proc/thread-self/ns/net), or -1 when it cannot be opened.
int open_thread_netns();

/// Enters the namespace `target` (a descriptor from open_thread_netns; -1:
/// nothing to do) for its lifetime when the calling thread is elsewhere, and
/// goes back on destruction. A namespace it cannot enter is logged (WARNING)
/// and the call then runs where the thread is.
class NetnsGuard {
 public:
  explicit NetnsGuard(int target);
  ~NetnsGuard();
  NetnsGuard(const NetnsGuard&) = delete;
  NetnsGuard& operator=(const NetnsGuard&) = delete;

 private:
  int saved_ = -1;  ///< the thread's own namespace while in the target's
};

}  // namespace droce::net
