// A plain evaluator of OpGraphs for the pass tests: every pass is checked by evaluating the graph
// before (the decomposition) and after (the fused op) on the same inputs. f32 only, numpy
// broadcasting, the ops the decompositions and the fused "es" ops use; slow and obvious.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "edgeseek/internal/graph/op_graph.h"

namespace es::test {

struct Val {
  std::vector<int64_t> shape;
  std::vector<float> v;
};

// Values of every graph output, given values of the graph inputs.
std::map<std::string, Val> Evaluate(const OpGraph& g, const std::map<std::string, Val>& inputs);

// Building test graphs: nodes with fresh output names, constants of given values.
class GraphMaker {
 public:
  OpGraph g;
  std::string Input(const std::string& name);
  std::string Const(const std::string& name, const std::vector<int64_t>& shape,
                    const std::vector<float>& v);
  std::string Ints(const std::string& name, const std::vector<int64_t>& v);
  std::string Op(const std::string& op, const std::vector<std::string>& in,
                 std::map<std::string, OpAttr> attrs = {}, const std::string& domain = "");
  void Output(const std::string& v);
  int Count(const std::string& op) const;  // nodes of that op type in g
 private:
  int next_ = 0;
};

Val RandomVal(const std::vector<int64_t>& shape, uint64_t seed, float scale = 1.0f);
double MaxDiff(const Val& a, const Val& b);

}  // namespace es::test
