// The optimizers' element-wise loops, each built more than once and run in
// the widest build the CPU can take, with the same bits whichever runs:
//   RunFused  an FMA build (AVX, std::fma one vectorized instruction) or a
//             plain x86-64 one (libm's exact fma): torch's forms;
//   RunWide   an AVX2 build without FMA (8 floats an instruction, sqrt and
//             division included) or a plain x86-64 one (SSE2, 4): the
//             forms that fuse nothing (TensorFlow's). Their files are built
//             with -ffp-contract=off, so neither build contracts a * b + c.
// A loop is a PST_LOOP function, inlined into each build. (Not GCC's
// target_clones: their ifunc resolvers run before a sanitizer's runtime and
// crash TSan builds.)
//
// Thread-safety: thread-safe. SetPlainLoopsForTesting is for tests, which
// call it before the loops they compare.
#ifndef PST_PS_SERVER_STORE_LOOP_DISPATCH_H_
#define PST_PS_SERVER_STORE_LOOP_DISPATCH_H_

#include <atomic>

// A loop of a rule: inlined into every build Run* makes of it.
#define PST_LOOP __attribute__((always_inline)) static inline

namespace pst::ps::internal {

// Whether to run the plain build of every loop, whatever the CPU has.
inline std::atomic<bool>& PlainLoopsForced() {
  static std::atomic<bool> forced{false};
  return forced;
}
// Tests: runs the plain builds (true) or the widest the CPU has (false), so
// that each can be checked against the other bit for bit.
inline void SetPlainLoopsForTesting(bool plain) {
  PlainLoopsForced().store(plain, std::memory_order_relaxed);
}

#if defined(__x86_64__)
inline bool CpuSupports(bool fma) {
  if (PlainLoopsForced().load(std::memory_order_relaxed)) return false;
  static const bool has_fma = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  static const bool has_avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return fma ? has_fma : has_avx2;
}

template <auto kLoop, typename... Args>
__attribute__((target("fma"))) void RunWithFma(Args... args) {
  kLoop(args...);
}

template <auto kLoop, typename... Args>
__attribute__((target("avx2"))) void RunWithAvx2(Args... args) {
  kLoop(args...);
}
#endif

template <auto kLoop, typename... Args>
void RunPlain(Args... args) {
  kLoop(args...);
}

// The FMA build (kFma) or the AVX2 one where the CPU has it, else plain.
template <bool kFma, auto kLoop, typename... Args>
void RunWidest(Args... args) {
#if defined(__x86_64__)
  if (CpuSupports(kFma)) {
    if constexpr (kFma) {
      RunWithFma<kLoop>(args...);
    } else {
      RunWithAvx2<kLoop>(args...);
    }
    return;
  }
#endif
  RunPlain<kLoop>(args...);
}

template <auto kLoop, typename... Args>
void RunFused(Args... args) {
  RunWidest</*kFma=*/true, kLoop>(args...);
}

template <auto kLoop, typename... Args>
void RunWide(Args... args) {
  RunWidest</*kFma=*/false, kLoop>(args...);
}

}  // namespace pst::ps::internal

#endif  // PST_PS_SERVER_STORE_LOOP_DISPATCH_H_
