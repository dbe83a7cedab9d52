// Shared helpers for every edgeseek compute shader: workgroup reductions built from subgroup
// operations (any subgroup size 4..128: lavapipe 8, NVIDIA 32, AMD 64) and 2-D grid flattening.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

// At most 1024 invocations / subgroup size 4 = 256 partial sums; our workgroups are <= 256.
shared float es_red[64];

// Sum of v over the workgroup, returned to every invocation (two barriers).
float WgSum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) es_red[gl_SubgroupID] = v;
  barrier();
  float s = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) s += es_red[i];
  barrier();
  return s;
}

float WgMax(float v) {
  v = subgroupMax(v);
  if (subgroupElect()) es_red[gl_SubgroupID] = v;
  barrier();
  float s = es_red[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) s = max(s, es_red[i]);
  barrier();
  return s;
}

// Linear workgroup index over a 2-D grid (x up to 65535 groups, then y).
uint FlatGroup() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
