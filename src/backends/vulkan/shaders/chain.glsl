// Barrier levels as in-shader counters (ES_VK_CHAIN, an experiment; command.h has the host side).
// Every shader that can run in a decode program includes this file right after its extensions,
// writes `void ES_MAIN()` for its entry point, and ends its push-constant block with
// ES_CHAIN_PC. Built plain (the default pipelines), the three macros are `main`, nothing and
// nothing: the SPIR-V is exactly the shader's own. Built with ES_CHAIN (a second SPIR-V per
// variant, "<variant>_chain", cmake/vulkan_shaders.cmake), the real main() is
//   EsChainWait(wait, target); es_main(); EsChainSignal(signal);
// so that an early `return` of the shader still signals, and:
// - the counters are a buffer at set 1 (one descriptor set per recorded program, command.cpp):
//   word 0 the error word, word 1 + s the workgroups of level s done;
// - the per-dispatch values are the last 12 bytes of the 128 of push constants (116..127, past the
//   shader's own: command.h Dispatch::Push keeps those below; 128 is lavapipe's and Mali's
//   maxPushConstantsSize): the counter to wait on or ~0, its target, the counter to signal or ~0;
// - every storage buffer is `coherent` (ES_COHERENT): a workgroup may read what a workgroup of an
//   earlier dispatch wrote while both are resident, with no pipeline barrier between them; in
//   the GLSL450 memory model only coherent accesses are made visible across invocations by the
//   writer's memoryBarrierBuffer() + the reader's memoryBarrierBuffer() around an atomic hand-off
//   (the pattern matmul_gemv.comp's ROUTE and mla_attention.comp's merge already use), and on
//   NVIDIA a coherent load skips the SM's L1, which is not coherent across SMs and may hold lines
//   of a reused activation-arena range from an earlier level. A second SPIR-V (rather than a
//   specialization constant over one) keeps the default pipelines' code and caching exactly as
//   they were (a buffer-reference capability or coherent buffers would have reached them too).
// Wait: one invocation spins on atomic reads of the counter (an add of 0), bounded by kEsChainSpin
// iterations (tens of ms on a GPU); short of its target then, it sets the error word and goes on
// (the host reads the word after the step and reruns it with barriers); a waiter that sees the
// error word set stops waiting. Then memoryBarrierBuffer() (acquire side) and barrier() for the workgroup.
// Signal: memoryBarrierBuffer() (release: this invocation's writes before the count), barrier()
// (every invocation's), then one invocation's atomicAdd.
// Assumption (why this is off by default): the workgroups of a later dispatch in a queue are only
// launched after every workgroup of the earlier dispatches has been (NVIDIA's in-order grid
// launch; lavapipe runs dispatches one after another), so a waiting workgroup never holds the
// place of one it waits for. The timeout is the safety net where that is false.
#if defined(ES_CHAIN)
#define ES_COHERENT coherent
#define ES_CHAIN_PC                       \
  layout(offset = 116) uint es_chain_wait; \
  uint es_chain_target;            \
  uint es_chain_signal;
layout(set = 1, binding = 0) volatile coherent buffer EsChain { uint es_chain[]; };
const uint kEsChainNone = 0xffffffffu;
const uint kEsChainSpin = 1u << 16;  // tens of ms of L2 loads on a GPU

void EsChainWait(uint idx, uint target) {
  if (idx != kEsChainNone && gl_LocalInvocationIndex == 0) {
    // Atomic reads (an add of 0): served where the atomics are (NVIDIA: L2). A plain volatile
    // load of the word spun on the H100 without seeing the other workgroups' adds (every wait
    // timed out, ~35 ns an iteration: an L1 hit, not an L2 round trip).
    for (uint n = 0; n < kEsChainSpin && atomicAdd(es_chain[idx], 0u) < target; ++n)
      if ((n & 255u) == 255u && atomicAdd(es_chain[0], 0u) != 0) break;  // another one timed out
    // Also where the loop was cut short (lavapipe's loop limiter stops a loop at 65,535
    // iterations): a wait that ends short of its target is an error.
    if (atomicAdd(es_chain[idx], 0u) < target) atomicOr(es_chain[0], 1u);
  }
  memoryBarrierBuffer();
  barrier();
}

void EsChainSignal(uint idx) {
  memoryBarrierBuffer();
  barrier();
  if (idx != kEsChainNone && gl_LocalInvocationIndex == 0) atomicAdd(es_chain[idx], 1u);
}

// A shader may #define ES_CHAIN_PREFETCH (before including this file) as the name of a function
// `uint F()` that issues loads of data no program writes (matmul_gemv.comp: its first weights):
// main() calls it before the wait and keeps its value alive past es_main() behind a condition
// that never holds (the wait index is never 0xfffffffe) but that the compiler cannot drop.
#if defined(ES_CHAIN_PREFETCH)
#define ES_CHAIN_PRE const uint es_pre = ES_CHAIN_PREFETCH();
#define ES_CHAIN_KEEP \
  if (p.es_chain_wait == 0xfffffffeu && es_pre == 0x7fc00001u) atomicOr(es_chain[0], 0u);
#else
#define ES_CHAIN_PRE
#define ES_CHAIN_KEEP
#endif
#define ES_MAIN                                       \
  es_main();                                          \
  void main() {                                       \
    ES_CHAIN_PRE                                      \
    EsChainWait(p.es_chain_wait, p.es_chain_target); \
    es_main();                                        \
    ES_CHAIN_KEEP                                     \
    EsChainSignal(p.es_chain_signal);                 \
  }                                                   \
  void es_main
#else
#define ES_COHERENT
#define ES_CHAIN_PC
#define ES_MAIN main
#endif
