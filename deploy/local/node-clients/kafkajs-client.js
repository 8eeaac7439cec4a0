#!/usr/bin/env node
// One scenario workload with kafkajs (https://kafka.js.org), the same command line as the Java
// driver (deploy/local/java-driver) and the Go clients (deploy/local/go-clients):
//
//   node kafkajs-client.js --mode producer|idle-producer|consumer --app NAME --bootstrap B
//                          --topic T [--group G] [--interval-ms N] [--prop key=value]...
//
// producer / idle-producer: producer.send() of one message every interval (default 200 ms /
// 30 s). consumer: consumer.run() of a group member reading the topic from the beginning.
// kafkajs's own log (JSON lines, level info unless --prop log.level=debug, which also logs
// every connection and request) goes to stdout next to one status line per event. Runs until
// SIGTERM.
'use strict';

const EventEmitter = require('events');
const { Kafka, logLevel, Partitioners } = require('kafkajs');

const PROGRAM = 'kafkajs-client';
const MODES = ['producer', 'idle-producer', 'consumer'];
const SETTINGS = {
  connectionTimeout: 'ms to establish a connection (default 1000)',
  requestTimeout: 'ms to wait for a response (default 30000)',
  metadataMaxAge: 'ms before metadata is refreshed (default 300000)',
  sessionTimeout: 'consumer group session timeout, ms (default 30000)',
  heartbeatInterval: 'consumer heartbeat interval, ms (default 3000)',
  'retry.retries': 'retries of a failed request (default 5)',
  'log.level': 'kafkajs log: nothing|error|warn|info|debug (default info)',
};

function fail(message) {
  process.stderr.write(`${PROGRAM}: ${message}\n`);
  process.exit(2);
}

function status(app, what) {
  const now = new Date().toISOString().slice(11, 23);
  process.stdout.write(`${now} ${app}: ${what}\n`);
}

function parseArgs(argv) {
  const a = { group: null, intervalMs: null, props: {} };
  const names = { '--mode': 'mode', '--app': 'app', '--bootstrap': 'bootstrap', '--topic': 'topic', '--group': 'group' };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (value === undefined) fail(`${flag}: missing value`);
    i++;
    if (names[flag]) {
      a[names[flag]] = value;
    } else if (flag === '--interval-ms') {
      a.intervalMs = Number.parseInt(value, 10);
      if (!Number.isFinite(a.intervalMs) || a.intervalMs < 0) fail(`--interval-ms ${value}: expected ms`);
    } else if (flag === '--prop') {
      const eq = value.indexOf('=');
      if (eq <= 0) fail(`--prop ${value}: expected key=value`);
      const key = value.slice(0, eq);
      if (!(key in SETTINGS)) fail(`--prop ${key}: unknown setting; known: ${Object.keys(SETTINGS).join(', ')}`);
      a.props[key] = value.slice(eq + 1);
    } else {
      fail(`unknown argument ${flag}`);
    }
  }
  if (!a.mode || !a.app || !a.bootstrap || !a.topic) fail('--mode, --app, --bootstrap and --topic are required');
  if (!MODES.includes(a.mode)) fail(`--mode ${a.mode}: expected ${MODES.join(', ')}`);
  if (a.intervalMs === null) a.intervalMs = a.mode === 'idle-producer' ? 30000 : 200;
  a.group = a.group || a.app;
  return a;
}

function intProp(a, key) {
  if (!(key in a.props)) return undefined;
  const n = Number.parseInt(a.props[key], 10);
  if (!Number.isFinite(n)) fail(`--prop ${key}=${a.props[key]}: expected an integer`);
  return n;
}

function client(a) {
  const levels = { nothing: logLevel.NOTHING, error: logLevel.ERROR, warn: logLevel.WARN, info: logLevel.INFO, debug: logLevel.DEBUG };
  const level = levels[(a.props['log.level'] || 'info').toLowerCase()];
  if (level === undefined) fail(`--prop log.level=${a.props['log.level']}: expected ${Object.keys(levels).join('|')}`);
  const conf = {
    clientId: a.app,
    brokers: a.bootstrap.split(',').map((b) => b.trim()).filter(Boolean),
    logLevel: level,
  };
  for (const key of ['connectionTimeout', 'requestTimeout']) {
    const v = intProp(a, key);
    if (v !== undefined) conf[key] = v;
  }
  const retries = intProp(a, 'retry.retries');
  if (retries !== undefined) conf.retry = { retries };
  return new Kafka(conf);
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal.once('stop', () => { clearTimeout(t); resolve(); });
});

async function produce(a, kafka, stopping) {
  const opts = { createPartitioner: Partitioners.DefaultPartitioner };
  const maxAge = intProp(a, 'metadataMaxAge');
  if (maxAge !== undefined) opts.metadataMaxAge = maxAge;
  const producer = kafka.producer(opts);
  await producer.connect();
  status(a.app, 'producer started');
  let acked = 0;
  let failed = 0;
  // A fixed rate, not a sleep after each send: an idle timer then fires at the same idle time
  // every cycle.
  const start = Date.now();
  for (let n = 0; !stopping.stopped; n++) {
    const value = `m-${n}`;
    try {
      await producer.send({ topic: a.topic, messages: [{ key: value, value }] });
      acked++;
    } catch (err) {
      failed++;
      if (failed % 100 === 1) status(a.app, `send failed: ${err.message}`);
    }
    if (a.intervalMs >= 1000) status(a.app, `sent ${value} acked=${acked} failed=${failed}`);
    await sleep(Math.max(0, start + (n + 1) * a.intervalMs - Date.now()), stopping);
  }
  await producer.disconnect();
  status(a.app, `producer closed acked=${acked} failed=${failed}`);
}

async function consume(a, kafka, stopping) {
  const opts = { groupId: a.group };
  for (const key of ['metadataMaxAge', 'sessionTimeout', 'heartbeatInterval']) {
    const v = intProp(a, key);
    if (v !== undefined) opts[key] = v;
  }
  const consumer = kafka.consumer(opts);
  await consumer.connect();
  await consumer.subscribe({ topic: a.topic, fromBeginning: true });
  status(a.app, `consumer subscribed group=${a.group}`);
  let records = 0;
  await consumer.run({ eachMessage: async () => { records++; } });
  await new Promise((resolve) => stopping.once('stop', resolve));
  await consumer.disconnect();
  status(a.app, `consumer closed records=${records}`);
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const kafka = client(a);
  const stopping = new EventEmitter();
  stopping.stopped = false;
  const stop = () => {
    stopping.stopped = true;
    stopping.emit('stop');
    // A client that has not disconnected 10 s later (its brokers gone, say) exits anyway.
    setTimeout(() => {
      status(a.app, 'not closed within 10 s of the stop signal: exiting');
      process.exit(1);
    }, 10000).unref();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  if (a.mode === 'consumer') await consume(a, kafka, stopping);
  else await produce(a, kafka, stopping);
}

main().catch((err) => {
  process.stderr.write(`${PROGRAM}: ${err.stack || err}\n`);
  process.exit(1);
});
