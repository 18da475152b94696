// scripts/esm.cjs: writes dist/esm/index.mjs, the ESM entry, which re-exports
// the CommonJS build's names (one build, both module systems).
const fs = require('fs');
const path = require('path');
const names = Object.keys(require('../dist/cjs/index.js')).filter((n) => n !== '__esModule' && n !== 'default');
fs.mkdirSync(path.join(__dirname, '../dist/esm'), { recursive: true });
fs.writeFileSync(path.join(__dirname, '../dist/esm/index.mjs'),
  "import cjs from '../cjs/index.js';\n" +
  `export const { ${names.join(', ')} } = cjs;\nexport default cjs;\n`);
