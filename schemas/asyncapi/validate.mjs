// Validates an AsyncAPI document with the AsyncAPI parser (@asyncapi/parser), resolving relative $refs
// (the JSON Schema files in ../json/). Prints the diagnostics; exits 1 when one is an error.
import { Parser, fromFile } from '@asyncapi/parser';

const path = process.argv[2] ?? 'ratings.asyncapi.yaml';
const parser = new Parser();
const { document, diagnostics } = await fromFile(parser, path).parse();
const errors = diagnostics.filter((d) => d.severity === 0);
for (const d of diagnostics) {
  console.log(`${['error', 'warning', 'info', 'hint'][d.severity]} ${d.code} at ${d.path.join('.')}: ${d.message}`);
}
if (!document || errors.length) {
  console.log(`invalid: ${errors.length} error(s)`);
  process.exit(1);
}
const channels = document.channels().all().map((c) => `${c.id()}=${c.address()}`);
const messages = document.allMessages().all().map((m) => m.name());
console.log(`valid AsyncAPI ${document.version()}: channels ${channels.join(', ')}; messages ${messages.join(', ')}`);
for (const m of document.allMessages().all()) {
  const props = Object.keys(m.payload()?.properties() ?? {});
  if (!props.length) {
    console.log(`invalid: message ${m.name()} has no resolved payload properties`);
    process.exit(1);
  }
  console.log(`${m.name()}: ${props.length} properties (${props.slice(0, 4).join(', ')}, ...)`);
}
