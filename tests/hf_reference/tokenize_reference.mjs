// Tokenizes text with the reference implementation (@huggingface/tokenizers), for the
// tokenizer test (tests/e2e/tokenizer_reference_test.cc) to compare `tediserve tokenize` and
// `tediserve detokenize` against.
//
//   node tokenize_reference.mjs TOKENIZER_JSON TEXTS.jsonl [--add-special-tokens]
//
// TEXTS.jsonl holds one JSON string per line; the file is read as UTF-8 (ill-formed
// sequences become U+FFFD, as TextDecoder does). Prints one JSON object per line:
//   {"ids": [...], "text": decode(ids) with special tokens kept and no clean-up,
//    "nfc_stable": whether the line's string equals its own NFC}
// Exit status 2 on bad usage, unreadable files or a line that is not a JSON string.
import fs from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

function fail(message) {
  process.stderr.write(`tokenize_reference.mjs: ${message}\n`);
  process.exit(2);
}

const args = process.argv.slice(2);
const addSpecial = args.includes("--add-special-tokens");
const [tokenizerPath, textsPath] = args.filter((a) => !a.startsWith("--"));
if (!tokenizerPath || !textsPath) fail("usage: node tokenize_reference.mjs TOKENIZER_JSON TEXTS.jsonl [--add-special-tokens]");

let tokenizer;
try {
  tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(tokenizerPath, "utf8")), { clean_up_tokenization_spaces: false });
} catch (e) {
  fail(`${tokenizerPath}: ${e.message}`);
}
let lines;
try {
  lines = fs.readFileSync(textsPath, "utf8").split("\n");
} catch (e) {
  fail(`${textsPath}: ${e.message}`);
}
if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();

const out = [];
lines.forEach((line, i) => {
  let text;
  try {
    text = JSON.parse(line);
  } catch (e) {
    fail(`${textsPath}:${i + 1}: ${e.message}`);
  }
  if (typeof text !== "string") fail(`${textsPath}:${i + 1}: not a JSON string`);
  const ids = tokenizer.encode(text, { add_special_tokens: addSpecial }).ids;
  const decoded = ids.length > 0 ? tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
  out.push(JSON.stringify({ ids, text: decoded, nfc_stable: text.normalize("NFC") === text }));
});
process.stdout.write(out.join("\n") + (out.length > 0 ? "\n" : ""));
