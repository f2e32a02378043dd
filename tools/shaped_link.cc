#include "tools/shaped_link.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/subprocess.h"

namespace pst::tools {

bool IsTcRate(absl::string_view rate) {
  return rate.find_first_not_of("0123456789.kmgKMGbitps") == absl::string_view::npos &&
         rate.find_first_of("0123456789") != absl::string_view::npos;
}

absl::StatusOr<std::unique_ptr<ShapedLink>> ShapedLink::Create(const std::string& rate,
                                                               bool routed) {
  std::unique_ptr<ShapedLink> link(new ShapedLink());
  PST_ASSIGN_OR_RETURN(link->ns_, VethNamespace::Create("pb"));
  const VethNamespace& ns = *link->ns_;
  // 10.200-249.x.0/24: the pid spreads processes, the sequence number
  // makes each link of this one a subnet of its own (256 before one comes
  // again, long after the first link is gone).
  const int pid = static_cast<int>(getpid());
  const std::string net =
      absl::StrCat("10.", 200 + pid % 50, ".", (pid / 50 + ns.sequence()) % 256);
  link->address_ = net + ".2";
  const std::string shape = absl::StrCat(" root tbf rate ", rate, " burst 4mb latency 100ms");
  const std::string ip = IpPath();
  for (const std::string& command :
       {absl::StrCat(ip, " addr add ", net, ".1/24 dev ", ns.host_veth()),
        absl::StrCat("tc qdisc add dev ", ns.host_veth(), shape)}) {
    PST_RETURN_IF_ERROR(RunShell(command).status());
  }
  for (const std::string& command :
       {absl::StrCat(ip, " addr add ", net, ".2/24 dev ", ns.inner_veth()),
        absl::StrCat("tc qdisc add dev ", ns.inner_veth(), shape)}) {
    PST_RETURN_IF_ERROR(ns.Run(command).status());
  }
  if (routed) {
    PST_RETURN_IF_ERROR(ns.Run(absl::StrCat(ip, " route add default via ", net, ".1")).status());
    const std::string rule = absl::StrCat("FORWARD -i ", ns.host_veth(), " -j ACCEPT");
    PST_RETURN_IF_ERROR(RunShell(absl::StrCat("iptables -I ", rule)).status());
    link->forward_rule_ = rule;
    PST_RETURN_IF_ERROR(RunShell("grep -q 1 /proc/sys/net/ipv4/ip_forward || "
                                 "echo 1 > /proc/sys/net/ipv4/ip_forward")
                            .status());
  }
  return link;
}

ShapedLink::~ShapedLink() {
  if (!forward_rule_.empty()) {
    RunShell(absl::StrCat("iptables -D ", forward_rule_)).status().IgnoreError();
  }
}

}  // namespace pst::tools
