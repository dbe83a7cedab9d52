// CpuFusionCaps (fusion_caps.h): the CPU backend's answers to the fusion passes.
#include "cpu/fusion_caps.h"

#include "cpu/kernels/matmul.h"

namespace es::cpu {

namespace {
// A matmul whose weight the CPU kernels take, as a [N, K] matrix.
bool KernelMatMul(const Graph& g, const Node& n) {
  if (n.op != Op::kMatMul || n.src.size() < 2 || n.src[1] < 0) return false;
  const Tensor* w = g.node(n.src[1]).weight;
  return w && w->shape.size() == 2 && MatMulSupports(w->dtype);
}
}  // namespace

bool CpuFusionCaps::Epilogue(const Graph& g, const Node& n) const {
  return n.op == Op::kMoE || (KernelMatMul(g, n) && n.shape[0] >= kEpilogueMinRows);
}

}  // namespace es::cpu
