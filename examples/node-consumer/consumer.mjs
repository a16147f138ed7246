// A rating-changed consumer in Node: one member of a Redis consumer group on the rating-changed stream.
//
// It takes over entries another member left pending for over 30 s (XAUTOCLAIM), re-reads its own pending
// entries, then reads new ones; drops duplicates by event_id; detects gaps per (ladder, player) with
// `sequence`; acknowledges every entry (XACK). An entry the stream no longer holds (trimmed) and a gap are
// reported: fill them from the database with `ratings events read --ladder L --player P --after-sequence N`
// (JSON Lines). The contract: schemas/asyncapi/ratings.asyncapi.yaml.
//
//   RATINGS_BROKER_URL=redis://localhost:6379/0 node consumer.mjs [group] [consumer] [--until-idle]
//
// Prints one JSON line per handled event ({"handled": event}) and per gap or trimmed entry.
import { createClient } from 'redis';

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const untilIdle = process.argv.includes('--until-idle');
const [group = 'leaderboard', consumer = 'node-1'] = args;
const stream = process.env.RATINGS_STREAM ?? 'ratings.rating-changed';
const client = createClient({ url: process.env.RATINGS_BROKER_URL ?? 'redis://localhost:6379/0' });
await client.connect();

try {
  await client.xGroupCreate(stream, group, '0', { MKSTREAM: true });
} catch (err) {
  if (!String(err.message).includes('BUSYGROUP')) throw err;
}

const seen = new Set(); // in production: your database, written with the effect
const lastSequence = new Map(); // `${ladder}\u001f${player_id}` -> last sequence handled
// What a leaderboard keeps per player: the rating and, on a ladder rated with uncertainty (Glicko-2,
// Weng-Lin), the deviation (and Glicko-2's volatility). Elo events have no such fields: null then.
const standings = new Map();
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

function handle(event) {
  if (seen.has(event.event_id)) return; // a duplicate: at-least-once delivery
  const key = `${event.ladder}\u001f${event.player_id}`;
  const last = lastSequence.get(key) ?? 0;
  if (event.sequence <= last) return; // a late copy
  if (event.sequence > last + 1) emit({ gap: { ladder: event.ladder, player_id: event.player_id, last, got: event.sequence } });
  emit({ handled: event });
  standings.set(key, { rating: event.rating_after, deviation: event.deviation_after ?? null,
                       volatility: event.volatility_after ?? null });
  seen.add(event.event_id);
  lastSequence.set(key, event.sequence);
}

async function handleEntries(entries) {
  for (const entry of entries) {
    if (!entry || !entry.message || !entry.message.payload) {
      emit({ trimmed: entry?.id ?? null }); // backfill with `ratings events read`
    } else {
      handle(JSON.parse(entry.message.payload));
    }
    if (entry?.id) await client.xAck(stream, group, entry.id);
  }
  return entries.length;
}

for (;;) {
  const claimed = await client.xAutoClaim(stream, group, consumer, 30000, '0-0', { COUNT: 100 });
  for (const id of claimed.deletedMessages ?? []) emit({ trimmed: id });
  let n = await handleEntries(claimed.messages.filter(Boolean));
  const own = await client.xReadGroup(group, consumer, { key: stream, id: '0' }, { COUNT: 100 });
  n += await handleEntries(own?.[0]?.messages ?? []);
  if (n === 0) {
    const fresh = await client.xReadGroup(group, consumer, { key: stream, id: '>' }, { COUNT: 100, BLOCK: 1000 });
    n += await handleEntries(fresh?.[0]?.messages ?? []);
  }
  if (n === 0 && untilIdle) break;
}
await client.quit();
