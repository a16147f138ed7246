// Publishes N match-finished messages to the ratings queue with celery-node, a Celery client for
// Node.js: node publish.js <redis URL> <queue> <count> <match id prefix>
// Each match is a MatchFinished v1 document (schemas/json/match_finished.v1.json); players are
// drawn from a pool of 40, every match a 1v1 on the "elo" ladder, a minute apart.
"use strict";
const celery = require("celery-node");

async function main() {
  const [broker, queue, countText, prefix] = process.argv.slice(2);
  const count = Number(countText);
  const client = celery.createClient(broker, broker, queue);
  const task = client.createTask("ratings.apply_match");
  const start = Date.UTC(2026, 0, 1, 12, 0, 0);
  const outcomes = ["side_a_won", "side_b_won", "draw"];
  for (let i = 0; i < count; i++) {
    const a = i % 40;
    const b = (a + 1 + (i % 39)) % 40;
    task.applyAsync([{
      schema_version: 1,
      match_id: `${prefix}-${i}`,
      ladder: "elo",
      finished_at: new Date(start + i * 60000).toISOString(),
      side_a: { players: [{ player_id: `node-player-${a}` }] },
      side_b: { players: [{ player_id: `node-player-${b}` }] },
      outcome: outcomes[i % 3],
    }]);
  }
  await client.isReady();
  await new Promise((resolve) => setImmediate(resolve));
  await client.broker.redis.ping(); // replies after every LPUSH sent before it on this connection
  await client.disconnect();
  console.log(`published ${count}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
