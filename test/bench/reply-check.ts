/**
 * What the reply check (kit `refusedReply`, run before every reply a service sends) costs, as a
 * ratio against what every request already does: taking the caller from the subject (`callerOf`).
 * CPU only, in one process, median of 7 rounds. `pnpm --filter @parley/test bench:reply`.
 */
import { callerOf } from '@parley/contracts';
import { refusedReply } from '@parley/kit';

const subject = 'parley.in.agt_01M8RCP1TECMXN1CFJDDK8T6B8.api.rooms.get';
const own = '_INBOX.agt_01M8RCP1TECMXN1CFJDDK8T6B8.Xy2kR9qLmN3pQ4sT5uV6wZ.17';
const foreign = '$KV.parley_policy.participant.agt_01M8RCP1TECMXN1CFJDDK8T6B9';
const CALLS = 2_000_000;
const ROUNDS = 7;

function nsPerCall(work: () => unknown): number {
  const samples: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const t = process.hrtime.bigint();
    let sink = 0;
    for (let i = 0; i < CALLS; i++) if (work()) sink++;
    samples.push(Number(process.hrtime.bigint() - t) / CALLS);
    if (sink < 0) console.log(sink);
  }
  return samples.sort((a, b) => a - b)[ROUNDS >> 1] as number;
}

const baseline = nsPerCall(() => callerOf(subject));
const allowed = nsPerCall(() => refusedReply(subject, own));
const refused = nsPerCall(() => refusedReply(subject, foreign));
console.log(`reply check, ${CALLS} calls × ${ROUNDS} rounds (median):`);
console.log(`  callerOf (baseline)     ${baseline.toFixed(1)} ns`);
console.log(
  `  own reply prefix        ${allowed.toFixed(1)} ns   ${(allowed / baseline).toFixed(2)}× callerOf`,
);
console.log(
  `  foreign reply subject   ${refused.toFixed(1)} ns   ${(refused / baseline).toFixed(2)}× callerOf`,
);
