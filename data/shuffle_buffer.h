// ShuffleBuffer: a block of at most `capacity` records (text lines with
// where they came from), filled, put in a seeded random order, then handed
// out one by one. RecordStream (data/record_stream.h) fills it from the
// input and refills it when it is empty, so its memory is capacity records
// whatever the input's size, and a block is rebuilt exactly from where its
// fill began and its seed.
//
// The order is a Fisher-Yates shuffle driven by std::mt19937_64 (whose
// output the standard fixes) with index draws written out here, so one seed
// gives one order with every standard library.
//
// Owned by one reader; not thread-safe.
#ifndef PST_DATA_SHUFFLE_BUFFER_H_
#define PST_DATA_SHUFFLE_BUFFER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pst::data {

// One line of input and where it starts.
struct Record {
  std::string text;    // without its '\n'
  int64_t piece = 0;   // index into InputShare::pieces
  int64_t offset = 0;  // byte offset of the line in its file (decompressed for gzip)
  int64_t line = 0;    // index of the line in its piece's range
};

class ShuffleBuffer {
 public:
  // REQUIRES: capacity >= 1.
  explicit ShuffleBuffer(int64_t capacity);

  int64_t capacity() const { return capacity_; }
  // Records held, handed out or not.
  int64_t size() const { return size_; }
  bool full() const { return size_ == capacity_; }
  // Records handed out since the last Clear.
  int64_t taken() const { return taken_; }
  // No record left to hand out.
  bool drained() const { return taken_ == size_; }

  // Empties the buffer (keeping its strings' memory for reuse).
  void Clear();
  // A slot for one more record. REQUIRES: !full() and nothing taken yet.
  Record* Add();
  // Puts the records in the order of `seed`. REQUIRES: nothing taken yet.
  void Shuffle(uint64_t seed);
  // Hands out the next record into *out (swapping its text): false when
  // drained.
  bool Take(Record* out);

 private:
  const int64_t capacity_;
  std::vector<Record> slots_;  // grows to capacity_ at most
  int64_t size_ = 0;
  int64_t taken_ = 0;
};

}  // namespace pst::data

#endif  // PST_DATA_SHUFFLE_BUFFER_H_
