// ONNX reader of a build configured with -DES_ONNX=OFF (no libonnx-dev: the aarch64 cross build,
// where Debian 12's libonnx-dev:arm64 does not co-install with the amd64 one). Every .onnx file
// is one es::Error that names the file and says how to get the importer; the rest of the library
// (Hugging Face folders, GGUF) is unaffected.
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/onnx.h"

namespace es {

OpGraph ReadOnnx(const std::string& path, OnnxModelInfo* info) {
  Fail("'", path,
       "': this edgeseek was built without ONNX import (-DES_ONNX=OFF); rebuild with "
       "libonnx-dev and libprotobuf-dev installed and -DES_ONNX=ON");
}

}  // namespace es
