// Clipping a step's whole gradient by its global L2 norm on the worker,
// before any of it is pushed: torch.nn.utils.clip_grad_norm_ (PyTorch 1.13)
// and TF's clip_by_global_norm. The norm is over every dense gradient and
// every row gradient of the step together. A push names each id of a table
// once (the batch's unique ids, their gradients summed), so a table's row
// gradients are the nonzero rows of the dense gradient the table would
// have, and their squares sum to its. When the norm is above max_norm,
// every element is scaled by max_norm / (norm + 1e-6), torch's coefficient.
//
// Thread-safety: a pure function of its arguments.
#ifndef PST_MODELS_GRADIENT_CLIP_H_
#define PST_MODELS_GRADIENT_CLIP_H_

#include <initializer_list>

#include "client/ps_client.h"

namespace pst::models {

// Scales the gradients of `parts` (each a list of flat gradients: the dense
// ones, a table's rows) in place when their global norm exceeds max_norm.
// max_norm 0: nothing is done. Returns the norm before clipping (0 when
// max_norm is 0). A non-finite norm leaves the gradients as they are: the
// ps refuses or skips them (OptimizerConfig.skip_nonfinite), as without
// clipping.
double ClipByGlobalNorm(double max_norm, std::initializer_list<client::Values*> parts);

}  // namespace pst::models

#endif  // PST_MODELS_GRADIENT_CLIP_H_
