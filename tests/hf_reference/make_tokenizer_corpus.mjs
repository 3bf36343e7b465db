// Writes a deterministic corpus of varied strings for the tokenizer test, one JSON string per
// line (tests/e2e/tokenizer_reference_test.cc compares `tediserve tokenize` with
// tokenize_reference.mjs on it).
//
//   node make_tokenizer_corpus.mjs OUT.jsonl [COUNT=12000] [SEED=16]
//
// Lines mix fragments of: code in several languages, text in many scripts (Latin with
// accents, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Bengali, Tamil, Thai, CJK, kana,
// Hangul, Georgian, Armenian, Ethiopic), emoji (ZWJ sequences, skin tones, flags, keycaps),
// whitespace runs (tabs, newlines, CRLF, NBSP, ideographic space, U+0085, U+2028, U+FEFF),
// digits (ASCII, Arabic-Indic, Devanagari, full-width, superscripts, fractions), English
// contractions in any case, special tokens inside text (and near misses), decomposed text
// and NFC singletons (combining marks, conjoining jamo, Angstrom sign, CJK compatibility
// ideographs), control characters, long runs, and ill-formed UTF-8 written as raw bytes
// inside the JSON string (a reader decoding the file as UTF-8 sees U+FFFD). Characters are
// drawn from Unicode 14 or older, so that engines with older Unicode tables agree.
import fs from "node:fs";

const [outPath, countArg, seedArg] = process.argv.slice(2);
if (!outPath) {
  process.stderr.write("usage: node make_tokenizer_corpus.mjs OUT.jsonl [COUNT] [SEED]\n");
  process.exit(2);
}
const count = Number(countArg ?? 12000);
let state = Number(seedArg ?? 16) >>> 0;

// mulberry32
function rand() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];
const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
const repeat = (f, n) => Array.from({ length: n }, f).join("");

const words = {
  en: ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "WORLD", "tokenizer", "serving", "diffusion", "model", "latency", "a", "I", "internationalization"],
  fr: ["déjà", "vu", "garçon", "à", "être", "Noël", "où", "français", "cœur", "été", "e\u0301te\u0301"],
  de: ["Straße", "Grüße", "Äpfel", "über", "Fußgängerübergänge", "schön"],
  es: ["año", "niño", "¿Qué?", "¡Hola!", "mañana", "pingüino"],
  vi: ["Tiếng", "Việt", "người", "được", "những", "nước"],
  tr: ["İstanbul", "ışık", "çağ", "Iğdır"],
  ru: ["Привет", "мир", "съешь", "ещё", "этих", "мягких", "французских", "булок"],
  uk: ["Ґанок", "їжак", "єдність"],
  el: ["Καλημέρα", "κόσμε", "ΑΒΓΔ", "ψυχή", "ς"],
  ar: ["مرحبا", "بالعالم", "اللغة", "العربية", "كتاب", "۱۲۳", "٤٥٦"],
  fa: ["سلام", "دنیا", "می‌خواهم"],
  he: ["שלום", "עולם", "עִבְרִית"],
  hi: ["नमस्ते", "दुनिया", "हिन्दी", "क्षत्रिय", "०१२३"],
  bn: ["বাংলা", "ভাষা", "আমার"],
  ta: ["தமிழ்", "வணக்கம்"],
  th: ["สวัสดี", "ภาษาไทย", "ครับ", "กรุงเทพมหานคร"],
  zh: ["你好", "世界", "中文", "分词器", "扩散语言模型", "服务系统", "龘"],
  ja: ["こんにちは", "カタカナ", "日本語", "ｶﾀｶﾅ", "ひらがな", "東京"],
  ko: ["안녕하세요", "세계", "한국어", "토크나이저"],
  ka: ["გამარჯობა", "მსოფლიო"],
  hy: ["Բարեւ", "աշխարհ"],
  am: ["ሰላም", "ዓለም"],
};
const emoji = ["🙂", "😀", "👍", "👍🏽", "👩‍👩‍👧", "👨‍💻", "🏳️‍🌈", "🇯🇵", "🇺🇸", "🇪🇺", "1️⃣", "#️⃣", "❤️", "❤", "✨", "🧑🏿‍🚀", "🐈‍⬛", "👁️‍🗨️", "🫠", "🥲", "⌚", "☕"];
const spaces = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n ", "\u00a0", "\u3000", "\u0085", "\u2028", "\u2029", "\ufeff", "\u200b", "\u2003", "\u000b", "\f", "\r"];
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|vision_pad|>", "<|im_start|", "<|im_end", "<<|im_end|>>", "<|endoftext|><|endoftext|>", "<|im_start|>system\n", "<|IM_START|>", "< think>"];
const contractions = ["I'm", "you're", "We'VE", "it'S", "don't", "they'll", "He'd", "O'Neil", "'s", "'T", "isn’t", "rock'n'roll", "''", "'''"];
const code = [
  () => `def ${pick(["foo", "bar", "f_1", "parse_json"])}(x, y=${int(100)}):\n    return x ** 2 + y  # comment\n`,
  () => `for (int i = 0; i < ${int(1000)}; ++i) {\n\tsum += a[i] * b[i];\n}`,
  () => `const ${pick(["x", "ÿ", "δ", "变量"])} = await fetch("https://example.com/api?q=${int(99)}&lang=en");`,
  () => `fn main() -> Result<(), Box<dyn Error>> { println!("{:?}", vec![1, 2, 3]); Ok(()) }`,
  () => `#include <vector>\nstd::vector<std::pair<int,int>> v{{1,2}};\n`,
  () => `SELECT id, name FROM users WHERE age >= ${int(90)} ORDER BY name DESC;`,
  () => `<div class="x">&nbsp;&lt;p&gt;</div>`,
  () => `{"key": [1, 2.5e-3, null, true], "nested": {"a": "b"}}`,
  () => `$ ls -la | grep -E '^d' > /tmp/out.txt 2>&1 && echo $?`,
  () => `    if x:\n        pass\n\n\n    else:\n\t\tyield`,
  () => "```python\nprint('hi')\n```",
  () => `x+=1;y-=2;z*=3;w/=4;a%=5;b<<=6;c>>=7;d&&=e||f;`,
];
const digits = () => pick([
  () => String(int(1e9)),
  () => repeat(() => String(int(10)), 1 + int(40)),
  () => `${int(1000)}.${int(1000)}`,
  () => `3,141,592`,
  () => "٠١٢٣٤٥٦٧٨٩",
  () => "१२३४",
  () => "１２３４５",
  () => "x²+y³=z¹",
  () => "½ ¼ ¾",
  () => "Ⅻ ⅳ",
  () => "①②③",
  () => `${int(100)}%`,
])();
// Decomposed and compatibility forms: NFC changes the first groups, not the last.
const nfc = () => pick([
  () => pick(["e", "a", "o", "u", "n", "A", "i"]) + pick(["\u0301", "\u0300", "\u0302", "\u0303", "\u0308", "\u0327", "\u030a"]),
  () => "a\u0323\u0302", // reordering of combining marks
  () => "a\u0302\u0323",
  () => "\u1100\u1161\u11a8",  // conjoining jamo -> 각
  () => "\u1112\u1161\u11ab\u1100\u1173\u11af",
  () => "\u212b", // ANGSTROM SIGN -> Å
  () => "\u2126", // OHM SIGN -> Ω
  () => "\uf900\ufa10\u2f800".slice(0, 2),  // CJK compatibility ideographs
  () => "\u0340\u0341",
  () => "\u0915\u093c", // Devanagari nukta
  () => "\u0301start", // a leading combining mark
  () => "ﬁ ﬀ ㈱ ™ ℌ", // compatibility characters NFC keeps
  () => "Å Ω é",
  () => "Z\u0335\u0336\u0337a\u0361l\u035cgo",
])();
const scriptRun = () => pick([
  () => repeat(() => range(0x4e00, 0x9fa5), 1 + int(12)),
  () => repeat(() => range(0xac00, 0xd7a3), 1 + int(8)),
  () => repeat(() => range(0x3041, 0x3096), 1 + int(8)),
  () => repeat(() => range(0x30a1, 0x30fa), 1 + int(8)),
  () => repeat(() => range(0x0410, 0x044f), 1 + int(10)),
  () => repeat(() => range(0x0391, 0x03a9), 1 + int(6)),
  () => repeat(() => range(0x0621, 0x064a), 1 + int(8)),
  () => repeat(() => range(0x05d0, 0x05ea), 1 + int(6)),
  () => repeat(() => range(0x0905, 0x0939), 1 + int(6)),
  () => repeat(() => range(0x0e01, 0x0e2e), 1 + int(8)),
  () => repeat(() => range(0x10d0, 0x10fa), 1 + int(6)),
  () => repeat(() => range(0x21, 0x7e), 1 + int(10)),
  () => repeat(() => range(0xa1, 0x17f), 1 + int(10)),
  () => repeat(() => range(0x2000, 0x2bff), 1 + int(5)),  // punctuation, symbols, arrows
  () => repeat(() => range(0x1f300, 0x1f5ff), 1 + int(4)),
])();
const sentence = (lang) => Array.from({ length: 1 + int(8) }, () => pick(words[lang])).join(pick([" ", " ", " ", "", ", ", ". ", "\n"]));
const control = () => repeat(() => String.fromCharCode(pick([0, 1, 7, 8, 0x1b, 0x1f, 0x7f, 0x9f])), 1 + int(3));
const long = () => pick([
  () => "a".repeat(100 + int(3000)),
  () => " ".repeat(50 + int(2000)) + "x",
  () => "\n".repeat(10 + int(500)),
  () => "9".repeat(100 + int(2000)),
  () => "中".repeat(100 + int(1000)),
  () => "ab".repeat(200 + int(1000)),
  () => "-=".repeat(100 + int(500)),
  () => "🙂".repeat(50 + int(300)),
])();
// Ill-formed UTF-8, written raw (U+E000 marks the place in the string).
const INVALID = [[0xff], [0xfe, 0xff], [0x80], [0xbf, 0x80], [0xc0, 0xaf], [0xc3], [0xe2, 0x82], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf],
  [0xf0, 0x9f, 0x98], [0xf4, 0x90, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xc2, 0x41], [0xe2, 0x28, 0xa1], [0xf0, 0x28, 0x8c, 0x28], [0xc1, 0xbf], [0xf5]];
const MARK = "\ue000";

const fragment = () => {
  const r = rand();
  if (r < 0.14) return pick(code)();
  if (r < 0.40) return sentence(pick(Object.keys(words)));
  if (r < 0.48) return repeat(() => pick(emoji), 1 + int(4));
  if (r < 0.56) return repeat(() => pick(spaces), 1 + int(5));
  if (r < 0.62) return digits();
  if (r < 0.68) return pick(contractions);
  if (r < 0.76) return pick(specials);
  if (r < 0.83) return nfc();
  if (r < 0.93) return scriptRun();
  if (r < 0.95) return control();
  if (r < 0.965) return long();
  return MARK;
};

const chunks = [];
for (let n = 0; n < count; ++n) {
  let text;
  if (n === 0) text = "";
  else if (n % 50 === 1) text = fragment();
  else text = Array.from({ length: 1 + int(6) }, fragment).join(pick(["", " ", "", "\n", " "]));
  // JSON.stringify leaves U+2028/2029 and non-ASCII as they are; the marker becomes raw bytes.
  const line = Buffer.from(JSON.stringify(text), "utf8");
  const mark = Buffer.from(MARK, "utf8");
  const parts = [];
  let from = 0;
  for (let at = line.indexOf(mark); at >= 0; at = line.indexOf(mark, from)) {
    parts.push(line.subarray(from, at), Buffer.from(pick(INVALID)));
    from = at + mark.length;
  }
  parts.push(line.subarray(from), Buffer.from("\n"));
  chunks.push(Buffer.concat(parts));
}
fs.writeFileSync(outPath, Buffer.concat(chunks));
