// Lookup of the embedded web page files (web_assets.h).
#include "web_assets.h"

namespace es::server {

const char* const kWebContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const WebAsset* FindWebAsset(const std::string& request_path) {
  std::string p;
  if (request_path == "/")
    p = "/index.html";
  else if (request_path.rfind("/web/", 0) == 0)
    p = request_path.substr(4);
  else
    return nullptr;
  for (const WebAsset& a : WebAssets())
    if (p == a.path) return &a;
  return nullptr;
}

}  // namespace es::server
