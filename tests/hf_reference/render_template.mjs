// Renders a chat template with the reference implementation (@huggingface/jinja) over a list
// of cases, for src/engine/chat_template_test.cc to compare TeDiServe's renderer against.
//
//   node render_template.mjs TEMPLATE CASES.json
//
// TEMPLATE: a tokenizer_config.json (its "chat_template", a string or the "default" entry of
// a list of {name, template}; its bos/eos/unk/pad tokens, strings or {"content": ...}, are
// passed to every case as variables unless the case sets them), or a file holding the
// template text (any name not ending in .json).
// CASES.json: [{"name": "...", "vars": {"messages": [...], "add_generation_prompt": true, ...}}]
// Prints one JSON object per case and line, in order:
//   {"name": ..., "ok": true, "text": "..."}  or  {"name": ..., "ok": false, "error": "..."}
// A template the reference cannot parse gives {"name": ..., "ok": false, "error": ...} for
// every case. Exit status 2 on bad usage or unreadable files.
import fs from "node:fs";
import { Template } from "@huggingface/jinja";

function fail(message) {
  process.stderr.write(`render_template.mjs: ${message}\n`);
  process.exit(2);
}

const [templatePath, casesPath] = process.argv.slice(2);
if (!templatePath || !casesPath) fail("usage: node render_template.mjs TEMPLATE CASES.json");

let source;
const defaults = {};
try {
  const text = fs.readFileSync(templatePath, "utf8");
  if (templatePath.endsWith(".json")) {
    const config = JSON.parse(text);
    let ct = config.chat_template;
    if (Array.isArray(ct)) ct = ct.find((t) => t && t.name === "default")?.template;
    if (typeof ct !== "string") fail(`${templatePath}: no usable "chat_template"`);
    source = ct;
    for (const key of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
      const v = config[key];
      if (typeof v === "string") defaults[key] = v;
      else if (v && typeof v === "object" && typeof v.content === "string") defaults[key] = v.content;
    }
  } else {
    source = text;
  }
} catch (e) {
  fail(`${templatePath}: ${e.message}`);
}

let cases;
try {
  cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
} catch (e) {
  fail(`${casesPath}: ${e.message}`);
}
if (!Array.isArray(cases)) fail(`${casesPath}: expected a JSON array of cases`);

let template = null;
let parseError = null;
try {
  template = new Template(source);
} catch (e) {
  parseError = String(e && e.message ? e.message : e);
}

const lines = [];
for (const c of cases) {
  const name = c.name ?? "";
  if (parseError !== null) {
    lines.push(JSON.stringify({ name, ok: false, error: parseError }));
    continue;
  }
  try {
    const text = template.render({ ...defaults, ...(c.vars ?? {}) });
    lines.push(JSON.stringify({ name, ok: true, text }));
  } catch (e) {
    lines.push(JSON.stringify({ name, ok: false, error: String(e && e.message ? e.message : e) }));
  }
}
process.stdout.write(lines.join("\n") + (lines.length ? "\n" : ""));
