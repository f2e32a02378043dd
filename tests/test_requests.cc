#include "tests/test_requests.h"

#include "common/tensor_util.h"

namespace pst::testing {

proto::VariableSpec FloatSpec(const std::string& name, const std::vector<int64_t>& shape,
                              int64_t seed) {
  proto::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(proto::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_kind(proto::Initializer::NORMAL);
  spec.mutable_initializer()->set_scale(0.1f);
  spec.mutable_initializer()->set_seed(seed);
  return spec;
}

proto::CreateVariablesRequest CreateW() {
  proto::CreateVariablesRequest create;
  proto::VariableSpec* w = create.add_variables();
  w->set_name("w");
  w->set_dtype(proto::DT_FLOAT32);
  w->add_shape(4);
  create.mutable_optimizer()->set_name("sgd");
  create.mutable_optimizer()->set_learning_rate(1.0f);
  return create;
}

proto::PushRequest OnesPush(int worker_index) {
  proto::PushRequest push;
  push.set_worker_index(worker_index);
  push.add_names("w");
  common::Shape shape;
  shape.Add(4);
  common::PackFloats(std::vector<float>{1, 1, 1, 1}, shape, push.add_gradients());
  return push;
}

}  // namespace pst::testing
