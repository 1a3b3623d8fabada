// Reference ids for tokenizer test texts from Hugging Face's JS port of
// tokenizers (npm @huggingface/tokenizers 0.2.0), which agrees with the Rust
// core on all code points of Unicode <= 16 (docs/tokenizer.md).
//
//   npm install @huggingface/tokenizers@0.2.0
//   node encode_js.mjs MODEL_DIR texts.jsonl > ref.jsonl
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";
import readline from "readline";
const dir = process.argv[2];
const tj = JSON.parse(fs.readFileSync(dir + "/tokenizer.json", "utf8"));
const tc = JSON.parse(fs.readFileSync(dir + "/tokenizer_config.json", "utf8"));
const tok = new Tokenizer(tj, tc);
const rl = readline.createInterface({ input: fs.createReadStream(process.argv[3]) });
for await (const line of rl) {
  if (!line.trim()) continue;
  const d = JSON.parse(line);
  const ids = tok.encode(d.text, { add_special_tokens: false }).ids;
  const dec = tok.decode(ids, { skip_special_tokens: false });
  console.log(JSON.stringify({ id: d.id, text: d.text, ids: ids, decoded: dec }));
}
