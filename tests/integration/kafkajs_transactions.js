// KafkaJS's transactional producer, then its read_committed consumer, driven by a plan.
// usage: node kafkajs_transactions.js BROKERS PLAN_JSON  (NODE_PATH: where kafkajs is)
// plan: {transactionalId, transactions: [{action: "commit"|"abort", messages: [{topic,
//        partition, key, value}], offsets?: {group, topics: [{topic, partitions:
//        [{partition, offset}]}]}}], read: {topics, group, expect}}
// prints {read: [{topic, partition, offset, key, value}]}: what the consumer got, in order.
const { Kafka, logLevel } = require("kafkajs");

const [brokers, planText] = process.argv.slice(2);
const plan = JSON.parse(planText);
const DEADLINE_MS = 150000;

async function main() {
  const kafka = new Kafka({ clientId: "kafkajs-txn", brokers: brokers.split(","), logLevel: logLevel.ERROR });
  const producer = kafka.producer({
    transactionalId: plan.transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  for (const step of plan.transactions) {
    const transaction = await producer.transaction();
    const byTopic = new Map();
    for (const m of step.messages) {
      if (!byTopic.has(m.topic)) byTopic.set(m.topic, []);
      byTopic.get(m.topic).push({ partition: m.partition, key: m.key, value: m.value });
    }
    await transaction.sendBatch({
      topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
    });
    if (step.offsets) {
      await transaction.sendOffsets({ consumerGroupId: step.offsets.group, topics: step.offsets.topics });
    }
    if (step.action === "commit") await transaction.commit();
    else await transaction.abort();
  }
  await producer.disconnect();

  const read = [];
  const consumer = kafka.consumer({ groupId: plan.read.group, readUncommitted: false });
  await consumer.connect();
  for (const topic of plan.read.topics) await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise((resolve, reject) => {
    consumer
      .run({
        eachMessage: async ({ topic, partition, message }) => {
          read.push({
            topic,
            partition,
            offset: Number(message.offset),
            key: message.key.toString(),
            value: message.value.toString(),
          });
          if (read.length >= plan.read.expect) resolve();
        },
      })
      .catch(reject);
  });
  await consumer.disconnect();
  process.stdout.write(JSON.stringify({ read }));
}

const timer = setTimeout(() => {
  console.error(`KafkaJS did not finish within ${DEADLINE_MS} ms`);
  process.exit(2);
}, DEADLINE_MS);
main().then(
  () => clearTimeout(timer),
  (e) => {
    console.error(e && e.stack ? e.stack : String(e));
    process.exit(1);
  },
);
