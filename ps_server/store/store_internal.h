// Small helpers the store's files share (Variable, HashRowTable, the
// snapshot and restore). Not for use outside ps_server/store/.
#ifndef PST_PS_SERVER_STORE_STORE_INTERNAL_H_
#define PST_PS_SERVER_STORE_STORE_INTERNAL_H_

#include <cstdint>
#include <string>

#include "proto/pstrain.pb.h"

namespace pst::ps {
namespace store_internal {

// Rows a hash variable's initializer is drawn as, when full_shape gives no
// row count: ids are taken modulo this.
constexpr uint64_t kHashRowSpace = uint64_t{1} << 62;

// The logical variable a spec is part of, for messages.
inline const std::string& LogicalName(const proto::VariableSpec& spec) {
  return spec.variable().empty() ? spec.name() : spec.variable();
}

inline int HashPartitionOf(int64_t id, int partitions) {
  return static_cast<int>(static_cast<uint64_t>(id) % static_cast<uint64_t>(partitions));
}

inline uint64_t MixId(int64_t id) {
  uint64_t x = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace store_internal

}  // namespace pst::ps

#endif  // PST_PS_SERVER_STORE_STORE_INTERNAL_H_
