// The web page's static files (src/server/web/), built into the binary by cmake/embed_web.cmake,
// and how the server answers for them: Content-Type, caching and a Content-Security-Policy that
// allows nothing but this server's own scripts, styles and API.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace es::server {

struct WebAsset {
  const char* path;          // "/index.html": the path below src/server/web/
  const char* content_type;  // from the extension
  const unsigned char* data;
  size_t size;
  const char* etag;  // quoted, from the file's SHA-256
};
const std::vector<WebAsset>& WebAssets();  // generated

// The asset a request path names: "/" is /index.html, "/web/<file>" the file; null otherwise.
const WebAsset* FindWebAsset(const std::string& request_path);

// The policy sent with every page file: scripts, styles, images and fetches from this origin
// only, no inline script or style, no plugins, frames, forms or <base>.
extern const char* const kWebContentSecurityPolicy;

}  // namespace es::server
