// The routing parameters of moe_route.glsl (a push-constant member: moe_route.comp's, and
// matmul_gemv.comp ROUTE's after its own); the host's mirror is ops/moe.cpp RoutePush.
struct RouteParams {
  uint E, top_k, n_group, topk_group, sigmoid, method, norm, has_bias;
  float scaling;
  uint e0, n_local;
};
