# GLSL compute shaders -> SPIR-V -> words embedded in the library.
#
#   es_detect_glslc_features()            sets ES_GLSLC_HAS_NV_COOPMAT / ES_GLSLC_HAS_KHR_COOPMAT /
#                                           ES_GLSLC_HAS_NV2_COOPMAT (GL_NV_cooperative_matrix2)
#                                           by compiling a tiny shader with each extension.
#   es_add_shader_variant(NAME SOURCE DEFINES...)  queues one variant (a .comp + its defines).
#   es_embed_shaders(TARGET)              compiles every queued variant with glslc, validates it
#                                           with spirv-val, and generates shaders_embedded.cpp
#                                           (a table {name, words, count}) added to TARGET.
#
# ES_SHADERS_PREBUILT=<dir> (a build of the same tree's src/backends/vulkan/shaders) copies each
# variant's <name>.inc from there instead of compiling it: SPIR-V is the same for every CPU, so the
# aarch64 cross build of scripts/test.sh takes the x86 build's (glslc's ~660 s of CPU, about a
# third of that build). Nothing checks that dir is current; a variant missing there fails the
# build (ninja: "missing and no known rule to make it").
#
# Variants are named by the caller (e.g. "matmul_gemv_f16_vec"); the runtime looks them up by
# name (src/backends/vulkan/shader_registry.h).
include_guard(GLOBAL)

find_program(SPIRV_VAL spirv-val)
set(ES_SHADER_TARGET_ENV vulkan1.1)
# The validated .spv's words as the C initializer embedded (one glslc run a variant, not two).
set(ES_SPV_TO_INC ${CMAKE_CURRENT_LIST_DIR}/spv_to_inc.cmake)

function(es_detect_glslc_features)
  set(dir ${CMAKE_BINARY_DIR}/glslc_probe)
  file(MAKE_DIRECTORY ${dir})
  file(WRITE ${dir}/nv.comp "#version 450\n#extension GL_NV_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\nlayout(local_size_x = 32) in;\nvoid main() { fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> m = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(0.0); }\n")
  file(WRITE ${dir}/khr.comp "#version 450\n#extension GL_KHR_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\nlayout(local_size_x = 32) in;\nvoid main() { coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> m = coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>(0.0); }\n")
  file(WRITE ${dir}/nv2.comp "#version 450\n#extension GL_KHR_cooperative_matrix : require\n#extension GL_NV_cooperative_matrix2 : require\n#extension GL_KHR_memory_scope_semantics : require\n#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\nlayout(local_size_x = 256) in;\nlayout(binding = 0) buffer B { float16_t b[]; };\nvoid main() { tensorLayoutNV<2> t = createTensorLayoutNV(2); t = setTensorLayoutDimensionNV(t, 64, 64); coopmat<float16_t, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseA> m; coopMatLoadTensorNV(m, b, 0, t); }\n")
  foreach(kind nv khr nv2)
    execute_process(COMMAND ${GLSLC} --target-env=vulkan1.3 -o ${dir}/${kind}.spv ${dir}/${kind}.comp
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    string(TOUPPER ${kind} up)
    if(rc EQUAL 0)
      set(ES_GLSLC_HAS_${up}_COOPMAT ON PARENT_SCOPE)
      message(STATUS "glslc supports GL_${up}_cooperative_matrix")
    else()
      set(ES_GLSLC_HAS_${up}_COOPMAT OFF PARENT_SCOPE)
      message(STATUS "glslc lacks GL_${up}_cooperative_matrix: those shader variants are not built")
    endif()
  endforeach()
endfunction()

set(ES_SHADERS_PREBUILT "" CACHE PATH
    "Copy each shader variant's .inc from this dir (a build of the same tree) instead of glslc")
set_property(GLOBAL PROPERTY ES_SHADER_VARIANTS "")

# es_add_shader_variant(<name> <source.comp> [DEFINE=VALUE ...] [ENV <target-env>])
function(es_add_shader_variant name source)
  cmake_parse_arguments(A "" "ENV" "" ${ARGN})
  if(NOT A_ENV)
    set(A_ENV ${ES_SHADER_TARGET_ENV})
  endif()
  string(REPLACE ";" "|" defs "${A_UNPARSED_ARGUMENTS}")
  set_property(GLOBAL APPEND PROPERTY ES_SHADER_VARIANTS "${name}#${source}#${A_ENV}#${defs}")
endfunction()

function(es_embed_shaders target)
  get_property(variants GLOBAL PROPERTY ES_SHADER_VARIANTS)
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/shaders)
  file(MAKE_DIRECTORY ${out_dir})
  set(incs "")
  set(decls "")
  set(table "")
  foreach(v ${variants})
    string(REPLACE "#" ";" parts "${v}")
    list(GET parts 0 name)
    list(GET parts 1 source)
    list(GET parts 2 env)
    list(LENGTH parts n)
    set(defs "")
    if(n GREATER 3)
      list(GET parts 3 d)
      string(REPLACE "|" ";" d "${d}")
      foreach(x ${d})
        list(APPEND defs "-D${x}")
      endforeach()
    endif()
    get_filename_component(src_abs ${source} ABSOLUTE)
    get_filename_component(src_dir ${src_abs} DIRECTORY)
    file(GLOB glsl_includes ${src_dir}/*.glsl)
    set(spv ${out_dir}/${name}.spv)
    set(inc ${out_dir}/${name}.inc)
    set(val_cmd)
    if(SPIRV_VAL)
      set(val_cmd COMMAND ${SPIRV_VAL} --target-env ${env} ${spv})
    endif()
    if(ES_SHADERS_PREBUILT)
      add_custom_command(
        OUTPUT ${inc}
        COMMAND ${CMAKE_COMMAND} -E copy ${ES_SHADERS_PREBUILT}/${name}.inc ${inc}
        DEPENDS ${ES_SHADERS_PREBUILT}/${name}.inc
        COMMENT "${name}.inc from ${ES_SHADERS_PREBUILT}"
        VERBATIM)
    else()
      add_custom_command(
        OUTPUT ${inc}
        COMMAND ${GLSLC} -O --target-env=${env} -fshader-stage=compute ${defs} -I ${src_dir} -o ${spv} ${src_abs}
        ${val_cmd}
        COMMAND ${CMAKE_COMMAND} -DSPV=${spv} -DINC=${inc} -P ${ES_SPV_TO_INC}
        DEPENDS ${src_abs} ${glsl_includes} ${ES_SPV_TO_INC}
        COMMENT "glslc + spirv-val ${name}"
        VERBATIM)
    endif()
    list(APPEND incs ${inc})
    string(APPEND decls "static const uint32_t k_${name}[] = {\n#include \"shaders/${name}.inc\"\n};\n")
    string(APPEND table "  {\"${name}\", k_${name}, sizeof(k_${name}) / 4},\n")
  endforeach()
  set(gen ${CMAKE_CURRENT_BINARY_DIR}/shaders_embedded.cpp)
  file(CONFIGURE OUTPUT ${gen} CONTENT
"// Generated by cmake/vulkan_shaders.cmake: SPIR-V words of every shader variant.
#include <cstddef>
#include <cstdint>
#include \"shader_registry.h\"
namespace es::vk {
namespace {
${decls}
const EmbeddedShader kShaders[] = {
${table}};
}  // namespace
const EmbeddedShader* EmbeddedShaders(size_t* count) {
  *count = sizeof(kShaders) / sizeof(kShaders[0]);
  return kShaders;
}
}  // namespace es::vk
")
  add_custom_target(${target}_shaders DEPENDS ${incs})
  add_dependencies(${target} ${target}_shaders)
  target_sources(${target} PRIVATE ${gen})
  set_source_files_properties(${gen} PROPERTIES OBJECT_DEPENDS "${incs}")
endfunction()
