// Reads documents, one per line as hex of the UTF-8 bytes, and prints for
// each one line: hex of canonicalize(JSON.parse(doc)) (npm canonicalize
// 4.0.0, an independent RFC 8785 implementation), or "ERR <message>".
// Used by store/tests/cli/differential_canonicalize_npm.rs.
import { readFileSync } from 'node:fs';
import canonicalize from 'canonicalize';

const input = readFileSync(process.argv[2] ?? 0, 'utf8');
const out = [];
for (const line of input.split('\n')) {
  if (line === '') continue;
  try {
    const text = Buffer.from(line, 'hex').toString('utf8');
    out.push(Buffer.from(canonicalize(JSON.parse(text)), 'utf8').toString('hex'));
  } catch (e) {
    out.push('ERR ' + String(e.message).replace(/\n/g, ' '));
  }
}
process.stdout.write(out.join('\n') + '\n');
