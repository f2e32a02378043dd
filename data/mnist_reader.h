// Reads Fashion-MNIST (or MNIST) from IDX files, plain or gzip-compressed,
// as Debian's dataset-fashion-mnist package installs them:
//   <dir>/train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
//   <dir>/t10k-images-idx3-ubyte.gz,  t10k-labels-idx1-ubyte.gz
// An uncompressed file of the same name without ".gz" is used if present.
//
// IDX format: big-endian int32 magic (0x00000803 for images, 0x00000801 for
// labels), big-endian int32 dimensions, then unsigned bytes.
#ifndef PST_DATA_MNIST_READER_H_
#define PST_DATA_MNIST_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pst::data {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

enum class Split { kTrain, kTest };

struct Dataset {
  int num_examples = 0;
  int dim = 0;                  // 784 for 28x28 images
  std::vector<float> features;  // [num_examples, dim], pixel / 255
  std::vector<int32_t> labels;  // [num_examples]
};

// Errors: NotFound naming the missing file (and the package that provides
// it); DataLoss naming the file if it is truncated, has a bad magic number,
// or image and label counts differ; InvalidArgument if a label is > 9.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split);

// How many examples `split` holds, from the labels file's header alone (a
// few bytes read, where LoadFashionMnist reads everything): what the chief
// needs to know how long the job is. Errors: NotFound as LoadFashionMnist;
// DataLoss for a truncated header or a bad magic number.
absl::StatusOr<int> CountFashionMnist(const std::string& dir, Split split);

// Examples i with i % count == index, in order: worker `index` of `count`
// gets a disjoint shard, and the shards together cover the dataset.
// REQUIRES: 0 <= index < count.
Dataset ShardDataset(const Dataset& data, int index, int count);

}  // namespace pst::data

#endif  // PST_DATA_MNIST_READER_H_
