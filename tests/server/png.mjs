// A minimal PNG reader for the screenshot checks of web_test.mjs: 8-bit RGB or RGBA,
// non-interlaced (what Chromium writes), decoded with node's zlib; and pixel statistics of a
// rectangle, so a test checks that a region has content instead of comparing a golden image.
import zlib from 'node:zlib';

export function decodePng(buf) {
  const sig = [137, 80, 78, 71, 13, 10, 26, 10];
  if (!sig.every((b, i) => buf[i] === b)) throw new Error('not a PNG');
  let off = 8, width = 0, height = 0, channels = 0;
  const idat = [];
  while (off < buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const depth = data[8], color = data[9], interlace = data[12];
      if (depth !== 8 || (color !== 2 && color !== 6) || interlace !== 0)
        throw new Error(`PNG kind not handled: depth ${depth} color ${color} interlace ${interlace}`);
      channels = color === 6 ? 4 : 3;
    } else if (type === 'IDAT') {
      idat.push(data);
    } else if (type === 'IEND') {
      break;
    }
    off += 12 + len;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = Buffer.alloc(width * height * 4);
  const prev = Buffer.alloc(stride), line = Buffer.alloc(stride);
  for (let y = 0; y < height; ++y) {
    const f = raw[y * (stride + 1)];
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let i = 0; i < stride; ++i) {
      const a = i >= channels ? line[i - channels] : 0, b = prev[i], c = i >= channels ? prev[i - channels] : 0;
      let p = 0;
      if (f === 1) p = a;
      else if (f === 2) p = b;
      else if (f === 3) p = (a + b) >> 1;
      else if (f === 4) {
        const pa = Math.abs(b - c), pb = Math.abs(a - c), pc = Math.abs(a + b - 2 * c);
        p = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      } else if (f !== 0) throw new Error('bad PNG filter ' + f);
      line[i] = (src[i] + p) & 255;
    }
    for (let x = 0; x < width; ++x) {
      const o = (y * width + x) * 4;
      out[o] = line[x * channels];
      out[o + 1] = line[x * channels + 1];
      out[o + 2] = line[x * channels + 2];
      out[o + 3] = channels === 4 ? line[x * channels + 3] : 255;
    }
    line.copy(prev);
  }
  return { width, height, rgba: out };
}

// Statistics of the pixels in {x, y, width, height} (clipped to the image): mean and standard
// deviation of luminance, distinct colours (up to 4096 counted), the share of pixels that differ
// from the most common colour, and the share of "coloured" ones (saturated, as plot lines are).
export function regionStats(img, r) {
  const x0 = Math.max(0, Math.floor(r.x)), y0 = Math.max(0, Math.floor(r.y));
  const x1 = Math.min(img.width, Math.ceil(r.x + r.width)), y1 = Math.min(img.height, Math.ceil(r.y + r.height));
  let n = 0, sum = 0, sum2 = 0, colored = 0;
  const counts = new Map();
  for (let y = y0; y < y1; ++y)
    for (let x = x0; x < x1; ++x) {
      const o = (y * img.width + x) * 4;
      const R = img.rgba[o], G = img.rgba[o + 1], B = img.rgba[o + 2];
      const l = 0.299 * R + 0.587 * G + 0.114 * B;
      sum += l;
      sum2 += l * l;
      ++n;
      if (Math.max(R, G, B) - Math.min(R, G, B) > 60) ++colored;
      const key = (R << 16) | (G << 8) | B;
      if (counts.size < 4096 || counts.has(key)) counts.set(key, (counts.get(key) || 0) + 1);
    }
  const mean = n ? sum / n : 0;
  let top = 0;
  for (const c of counts.values()) top = Math.max(top, c);
  return {
    pixels: n,
    mean,
    std: n ? Math.sqrt(Math.max(0, sum2 / n - mean * mean)) : 0,
    colors: counts.size,
    nonBackground: n ? 1 - top / n : 0,
    colored: n ? colored / n : 0,
  };
}
