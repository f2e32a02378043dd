// Optimizers run on the ps: each push applies its gradient to the variable
// in place. An Optimizer is stateless apart from its hyperparameters; slot
// variables (momentum, accumulators) belong to the variable they serve.
//
// Thread-safety: Apply* may be called concurrently for different variables;
// the caller holds the variable's lock.
#ifndef PST_PS_SERVER_OPTIMIZER_H_
#define PST_PS_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "proto/pstrain.pb.h"

namespace pst::ps {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  virtual std::string name() const = 0;
  // Slot vectors, each the size of the variable, that ApplyDense receives.
  virtual int num_slots() const = 0;

  // param -= update(grad). `t` is the 1-based count of updates applied to
  // this variable, this one included (Adam's bias correction uses it).
  // REQUIRES: grad.size() == param.size(), every slot the same size too;
  // t >= 1.
  virtual void ApplyDense(std::span<float> param, std::span<const float> grad,
                          std::span<const std::span<float>> slots, int64_t t) = 0;
};

// Errors: InvalidArgument for an unknown name or a bad hyperparameter.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const proto::OptimizerConfig& config);

}  // namespace pst::ps

#endif  // PST_PS_SERVER_OPTIMIZER_H_
