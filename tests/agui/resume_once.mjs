// An AG-UI client (`@ag-ui/client`'s HttpAgent) against the gateway: a run that ends with the
// approval it waits for, its resume, and 100 duplicate resumes of the same interrupt, each from
// a run of its own. Prints what each got, as JSON, for tests/agui/test_node_client.py.
//
// Environment: AGUI_URL (the agent's endpoint), AGUI_KEY (an operator key), AGUI_TASK (the
// message), AGUI_THREADS (two thread ids, comma-separated), AGUI_CLIENT (its module).
// The client is imported from where `make install` put it (AGUI_CLIENT: its ESM entry).
const { HttpAgent } = await import(process.env.AGUI_CLIENT);

const url = process.env.AGUI_URL;
const headers = { Authorization: `Bearer ${process.env.AGUI_KEY}` };
const task = process.env.AGUI_TASK;
const [first, second] = process.env.AGUI_THREADS.split(",");
const DUPLICATES = 100;

function agentOf(threadId, seen) {
  // Records each response's status and, for a refusal, its error code.
  const recording = async (target, init) => {
    const response = await fetch(target, init);
    if (seen !== undefined) {
      const code = response.status === 200 ? null : (await response.clone().json()).error?.code;
      seen.push({ status: response.status, code });
    }
    return response;
  };
  const agent = new HttpAgent({ url, headers, threadId, fetch: recording });
  agent.setMessages([{ id: "m1", role: "user", content: task }]);
  return agent;
}

async function runOf(agent, parameters) {
  const outcomes = [];
  const types = [];
  const subscriber = {
    onEvent: ({ event }) => { types.push(event.type); },
    onRunFinishedEvent: (params) => { outcomes.push({ outcome: params.outcome, interrupts: params.interrupts ?? [], result: params.result }); },
  };
  const { result } = await agent.runAgent(parameters, subscriber);
  return { result, types, finished: outcomes[0] };
}

function approve(interrupt) {
  return [{ interruptId: interrupt.id, status: "resolved", payload: { decision: "approve" } }];
}

async function duplicates(threadId, interrupt) {
  const seen = [];
  const runs = [];
  for (let i = 0; i < DUPLICATES; i++) {
    const agent = agentOf(threadId, seen);
    runs.push(runOf(agent, { runId: `dup-${i}`, resume: approve(interrupt) }).then(
      (run) => ({ ok: true, outcome: run.finished?.outcome, result: run.result }),
      (error) => ({ ok: false, error: String(error.message ?? error).slice(0, 200) }),
    ));
  }
  const settled = await Promise.all(runs);
  return { responses: seen, runs: settled };
}

// A thread's run pauses on its approval; the client resumes it; then 100 duplicates.
const agent = agentOf(first);
const paused = await runOf(agent, { runId: "run-1" });
const pending = agent.pendingInterrupts.map((i) => ({ id: i.id, reason: i.reason, toolCallId: i.toolCallId }));
const resumed = await runOf(agent, { runId: "run-2", resume: approve(agent.pendingInterrupts[0]) });
const after = await duplicates(first, pending[0]);

// Another thread's run pauses; 100 resumes of its interrupt race, each its own run.
const racer = agentOf(second);
await runOf(racer, { runId: "run-1" });
const raced = await duplicates(second, racer.pendingInterrupts[0]);

console.log(JSON.stringify({
  paused: { types: paused.types, outcome: paused.finished.outcome, pending },
  resumed: { types: resumed.types, outcome: resumed.finished.outcome, result: resumed.result, left: agent.pendingInterrupts.length, messages: agent.messages.length },
  after,
  raced,
}));
