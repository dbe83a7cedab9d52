// Loads GGUF files in llama.cpp (node-llama-cpp's prebuilt CPU binary), evaluates a short prompt
// and prints the next-token distribution of the first file; for every further file, the
// largest probability difference and KL(first || file). The exit code checks the second file
// only (KL below KL_LIMIT); further files are printed for scale. Usage: node check_llama_cpp.mjs A B...
import {getLlama} from "node-llama-cpp";

const llama = await getLlama({gpu: false, build: "never"});

async function NextTokenProbs(path) {
  const model = await llama.loadModel({modelPath: path});
  const ctx = await model.createContext({contextSize: 64, threads: 2});
  const seq = ctx.getSequence();
  const prompt = [72, 101, 108, 108, 111, 32, 119];  // byte tokens of "Hello w"
  const it = seq.evaluateWithMetadata(prompt, {probabilities: true}, {temperature: 1, topK: 0, topP: 1});
  const out = (await it.next()).value;
  const p = new Float64Array(320);
  for (const [token, prob] of out.probabilities) p[token] = prob;
  await ctx.dispose();
  await model.dispose();
  return p;
}

const files = process.argv.slice(2);
const ref = await NextTokenProbs(files[0]);
console.log(`${files[0]}: loaded, top token ${ref.indexOf(Math.max(...ref))}`);
let checked = Infinity;
for (const f of files.slice(1)) {
  const p = await NextTokenProbs(f);
  let maxd = 0, kl = 0;
  for (let i = 0; i < p.length; ++i) {
    maxd = Math.max(maxd, Math.abs(p[i] - ref[i]));
    if (ref[i] > 0 && p[i] > 0) kl += ref[i] * Math.log(ref[i] / p[i]);
  }
  if (f === files[1]) checked = kl;
  console.log(`${f}: top token ${p.indexOf(Math.max(...p))}, max|dp| ${maxd.toExponential(2)}, KL ${kl.toExponential(2)}`);
}
process.exitCode = checked < Number(process.env.KL_LIMIT ?? "0.01") ? 0 : 1;
