// Latency of a command in a process session against executeCommand (the
// baseline, measured in the same run on the same sandbox), through the
// official Daytona SDK against a fresh daemon on the local Docker engine.
//
//   node bench.mjs            (BENCH_N samples of each, default 50)
//
// The two alternate, so drift in the machine's load affects both alike.
import { Daytona } from '@daytonaio/sdk';
import { startDaemon } from './daemon.mjs';

const n = Number(process.env.BENCH_N || 50);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.ceil(0.9 * xs.length) - 1];

const d = await startDaemon();
const daytona = new Daytona({ apiUrl: d.apiUrl, apiKey: d.token });
try {
  const sb = await daytona.create({ labels: { bench: 'session' } });
  await sb.process.createSession('bench');
  const exec = [];
  const session = [];
  for (let i = 0; i < n + 3; i++) {
    let t = performance.now();
    await sb.process.executeCommand('echo x');
    const e = performance.now() - t;
    t = performance.now();
    await sb.process.executeSessionCommand('bench', { command: 'echo x' });
    const s = performance.now() - t;
    if (i >= 3) {
      // The first few warm up connections and caches.
      exec.push(e);
      session.push(s);
    }
  }
  const f = (ms) => `${ms.toFixed(1)} ms`;
  console.log(`executeCommand        median ${f(median(exec))}  p90 ${f(p90(exec))}  (n=${n})`);
  console.log(`executeSessionCommand median ${f(median(session))}  p90 ${f(p90(session))}  (n=${n})`);
  console.log(`ratio session/exec    median ${(median(session) / median(exec)).toFixed(2)}`);
  await sb.delete();
} finally {
  if (Symbol.asyncDispose) await daytona[Symbol.asyncDispose]();
  await d.stop();
}
