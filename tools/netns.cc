#include "tools/netns.h"

#include <net/if.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/subprocess.h"

namespace pst::tools {
namespace {

// RunShell(command), its error told why it may have failed where that is
// plain: not root, or no ip(8).
absl::Status RunIp(const std::string& command) {
  absl::Status status = RunShell(command).status();
  if (status.ok()) return status;
  std::string hint;
  if (IpPath().empty()) {
    hint = " (iproute2's ip is not installed)";
  } else if (geteuid() != 0) {
    hint = " (not root: network namespaces need root)";
  }
  return absl::InternalError(absl::StrCat(status.message(), hint));
}

}  // namespace

std::string IpPath() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

int NextNetSequence() {
  static std::atomic<int> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::string InterfaceName(absl::string_view prefix, char role, int sequence) {
  return absl::StrCat(prefix, getpid(), std::string(1, role), sequence);
}

absl::StatusOr<std::unique_ptr<VethNamespace>> VethNamespace::Create(absl::string_view prefix) {
  std::unique_ptr<VethNamespace> link(new VethNamespace());
  link->ip_ = IpPath();
  if (link->ip_.empty()) link->ip_ = "ip";
  link->sequence_ = NextNetSequence();
  link->name_ = absl::StrCat("pst", prefix, getpid(), "_", link->sequence_);
  link->host_veth_ = InterfaceName(prefix, 'h', link->sequence_);
  link->inner_veth_ = InterfaceName(prefix, 'n', link->sequence_);
  if (link->host_veth_.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError(absl::StrCat("interface name ", link->host_veth_, " is over ",
                                                   IFNAMSIZ - 1, " characters"));
  }
  const std::string& ip = link->ip_;
  // From here on, on an error, `link`'s destructor removes what was made.
  PST_RETURN_IF_ERROR(RunIp(absl::StrCat(ip, " netns add ", link->name_)));
  link->namespace_made_ = true;
  // One command makes both ends, the inner one already in the namespace: no
  // veth is ever left outside it.
  PST_RETURN_IF_ERROR(
      RunIp(absl::StrCat(ip, " link add ", link->host_veth_, " type veth peer name ",
                         link->inner_veth_, " netns ", link->name_)));
  link->veth_made_ = true;
  PST_RETURN_IF_ERROR(RunIp(absl::StrCat(ip, " link set ", link->host_veth_, " up")));
  PST_RETURN_IF_ERROR(
      RunIp(absl::StrCat(ip, " -n ", link->name_, " link set ", link->inner_veth_, " up")));
  PST_RETURN_IF_ERROR(RunIp(absl::StrCat(ip, " -n ", link->name_, " link set lo up")));
  return link;
}

VethNamespace::~VethNamespace() {
  const absl::Status status = Remove();
  if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
}

absl::Status VethNamespace::Remove() {
  absl::Status status;
  if (veth_made_) {
    veth_made_ = false;
    // Synchronous, and takes the inner end with it.
    status.Update(RunIp(absl::StrCat(ip_, " link del ", host_veth_)));
  }
  if (namespace_made_) {
    namespace_made_ = false;
    status.Update(RunIp(absl::StrCat(ip_, " netns del ", name_)));
  }
  return status;
}

absl::StatusOr<std::string> VethNamespace::Run(const std::string& command) const {
  return RunShell(absl::StrCat(ip_, " netns exec ", name_, " ", command));
}

std::vector<std::string> VethNamespace::Wrap(std::vector<std::string> argv) const {
  argv.insert(argv.begin(), {ip_, "netns", "exec", name_});
  return argv;
}

}  // namespace pst::tools
