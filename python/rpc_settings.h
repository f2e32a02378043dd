// The gRPC settings of this Python process's sessions: what
// pstrain.set_security() chose (plaintext until then). The extension hands
// them to every Worker and Evaluator session it makes, as the daemons'
// mains hand theirs down from their flags.
#ifndef PST_PYTHON_RPC_SETTINGS_H_
#define PST_PYTHON_RPC_SETTINGS_H_

#include "rpc/grpc_channel.h"

namespace pst::python {

// Read and written under the GIL only.
inline rpc::RpcSettings& SessionRpcSettings() {
  static rpc::RpcSettings* const settings = new rpc::RpcSettings();
  return *settings;
}

}  // namespace pst::python

#endif  // PST_PYTHON_RPC_SETTINGS_H_
