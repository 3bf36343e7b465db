// Writes a variant of a byte-level BPE tokenizer.json (the real Qwen one) exercising the
// options the Qwen file does not use, for tests/e2e/tokenizer_reference_test.cc:
//
//   node make_tokenizer_variant.mjs IN.json OUT.json gpt2|llama3
//
// gpt2:   merges as "a b" strings, no normalizer, ByteLevel pre-tokenizer with its own regex
//         and add_prefix_space, TemplateProcessing post-processor adding <|endoftext|> first.
// llama3: normalizer Sequence [NFC], the Llama 3 Split regex (\p{N}{1,3}), ignore_merges,
//         added tokens with "normalized": true (one whose content NFC changes) and a
//         multi-byte one.
import fs from "node:fs";

const [inPath, outPath, name] = process.argv.slice(2);
const t = JSON.parse(fs.readFileSync(inPath, "utf8"));
const bos = t.added_tokens.find((x) => x.content === "<|endoftext|>");
if (name === "gpt2") {
  t.model.merges = t.model.merges.map((m) => (Array.isArray(m) ? m.join(" ") : m));
  t.normalizer = null;
  t.pre_tokenizer = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
  t.post_processor = {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { [bos.content]: { id: bos.content, ids: [bos.id], tokens: [bos.content] } },
  };
} else if (name === "llama3") {
  t.normalizer = { type: "Sequence", normalizers: [{ type: "NFC" }] };
  t.pre_tokenizer.pretokenizers[0].pattern.Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  t.model.ignore_merges = true;
  const next = Math.max(...t.added_tokens.map((x) => x.id)) + 1;
  for (const x of t.added_tokens) if (x.content === "<think>") x.normalized = true;
  t.added_tokens.push({ id: next, content: "e\u0301t\u00e9", single_word: false, lstrip: false, rstrip: false, normalized: true, special: false });
  t.added_tokens.push({ id: next + 1, content: "\u{1f642}\u{1f642}", single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
  t.added_tokens.push({ id: next + 2, content: "fox jumps", single_word: false, lstrip: false, rstrip: false, normalized: true, special: false });
} else {
  process.stderr.write(`make_tokenizer_variant.mjs: unknown variant '${name}'\n`);
  process.exit(2);
}
fs.writeFileSync(outPath, JSON.stringify(t));
