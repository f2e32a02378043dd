#include "data/shuffle_buffer.h"

#include <cassert>
#include <random>
#include <utility>

namespace pst::data {

ShuffleBuffer::ShuffleBuffer(int64_t capacity) : capacity_(capacity) { assert(capacity >= 1); }

void ShuffleBuffer::Clear() {
  size_ = 0;
  taken_ = 0;
}

Record* ShuffleBuffer::Add() {
  assert(size_ < capacity_);
  assert(taken_ == 0);
  if (static_cast<int64_t>(slots_.size()) == size_) slots_.emplace_back();
  return &slots_[static_cast<size_t>(size_++)];
}

void ShuffleBuffer::Shuffle(uint64_t seed) {
  assert(taken_ == 0);
  std::mt19937_64 rng(seed);
  for (int64_t i = size_ - 1; i > 0; --i) {
    // A 64-bit draw modulo at most capacity: the bias is below 2^-40 for
    // any buffer that fits in memory.
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(slots_[static_cast<size_t>(i)], slots_[static_cast<size_t>(j)]);
  }
}

bool ShuffleBuffer::Take(Record* out) {
  if (taken_ == size_) return false;
  Record& slot = slots_[static_cast<size_t>(taken_++)];
  out->text.swap(slot.text);
  out->piece = slot.piece;
  out->offset = slot.offset;
  out->line = slot.line;
  return true;
}

}  // namespace pst::data
