# cmake -DSPV=<file.spv> -DINC=<file.inc> -P spv_to_inc.cmake
# The SPIR-V words of SPV as a C initializer list (glslc -mfmt=num's form: 0x%08x, 4 a line), so
# a variant is compiled once (cmake/vulkan_shaders.cmake) rather than once for spirv-val and again
# for the words. SPIR-V is little-endian words here (the magic 0x07230203 first).
file(READ "${SPV}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR rem "${n} % 8")
if(n EQUAL 0 OR NOT rem EQUAL 0)
  message(FATAL_ERROR "spv_to_inc: ${SPV} is not whole 32-bit words (${n} hex digits)")
endif()
string(REGEX REPLACE "(..)(..)(..)(..)" "0x\\4\\3\\2\\1," words "${hex}")
string(REGEX REPLACE "((0x[0-9a-f]+,){4})" "\\1\n" words "${words}")
file(WRITE "${INC}" "${words}\n")
