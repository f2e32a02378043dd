// A network namespace holding one daemon (a ps), joined to this one by a
// veth pair shaped to a rate each way (tc tbf): the daemon sees a NIC of
// that rate, as on a machine of its own. ps_bench puts its ps behind such
// links (--link_rate); `pstrain local --ps_link_rate` its job's ps. Needs
// root and iproute2.
//
// Thread-compatible.
#ifndef PST_TOOLS_SHAPED_LINK_H_
#define PST_TOOLS_SHAPED_LINK_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/netns.h"

namespace pst::tools {

// Whether `rate` reads as a tc rate ("2gbit", "500mbit", "1.5Gbps"):
// digits, a dot and unit letters only, with at least one digit.
bool IsTcRate(absl::string_view rate);

class ShapedLink {
 public:
  // A link of its own: names and subnet never used before by this process.
  // `rate`: a tc rate ("1gbit", "500mbit"). `routed`: the namespace's
  // default route leads back through this one, which forwards between
  // links (an iptables FORWARD rule per link, taken out on destruction), so
  // daemons behind two links reach each other.
  // Errors: Internal naming the command that failed and what it printed.
  static absl::StatusOr<std::unique_ptr<ShapedLink>> Create(const std::string& rate,
                                                            bool routed = false);
  // Removes the forwarding rule, then the namespace and its veth pair.
  ~ShapedLink();
  ShapedLink(const ShapedLink&) = delete;
  ShapedLink& operator=(const ShapedLink&) = delete;

  // The daemon's address inside the namespace.
  const std::string& address() const { return address_; }
  // argv that runs `argv` inside the namespace.
  std::vector<std::string> Wrap(std::vector<std::string> argv) const {
    return ns_->Wrap(std::move(argv));
  }

 private:
  ShapedLink() = default;
  std::unique_ptr<VethNamespace> ns_;
  std::string address_;
  std::string forward_rule_;  // inserted by Create (routed), deleted on destruction
};

}  // namespace pst::tools

#endif  // PST_TOOLS_SHAPED_LINK_H_
