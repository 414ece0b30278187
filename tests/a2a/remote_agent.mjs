// A remote A2A agent for tests and the bench: ours, written on the official JavaScript SDK's
// server (@a2a-js/sdk 1.3: its request handler, Express handlers, task store and push sender),
// because neither PyPI nor npm ships an A2A sample server to install.
//
//   node tests/a2a/remote_agent.mjs [--port 0] [--delay-ms 200] [--no-push]
//
// Prints one line of JSON once it listens: {"url": "http://127.0.0.1:<port>"}. A message's
// text says what its task does, after the delay: "ask" (input-required, then completed with
// the answer once a message answers it), "fail" (failed), "hang" (runs until cancelled),
// anything else (completed, with an artifact); "delay=<ms>" sets that task's delay. The last
// state of a completed task is published as the task itself, so its push carries the
// artifacts; the others as status updates. With "apart" in the text, a completed task's
// artifact and its end are two events, as an executor using the SDKs' task updater publishes
// them (an artifact update, then a final status update): two pushes, and the one saying
// `completed` carries no artifacts.
// The packages are conformance/'s (`make install`), resolved from there: an ES module's bare
// imports would look beside this file.
const modules = new URL('../../conformance/node_modules/', import.meta.url);
const load = (path) => import(new URL(path, modules).href);
const { default: express } = await load('express/index.js');
const { Role, TaskState } = await load('@a2a-js/sdk/dist/index.js');
const {
  AgentEvent,
  DefaultPushNotificationSender,
  DefaultRequestHandler,
  InMemoryPushNotificationStore,
  InMemoryTaskStore,
} = await load('@a2a-js/sdk/dist/server/index.js');
const { agentCardHandler, jsonRpcHandler, UserBuilder } = await load('@a2a-js/sdk/dist/server/express/index.js');

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const port = Number(option('--port', '0'));
const delayMs = Number(option('--delay-ms', '200'));
const push = !args.includes('--no-push');

const now = () => new Date().toISOString();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const textPart = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
const dataPart = (value) => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: 'application/json' });
const agentMessage = (taskId, contextId, text) => ({
  role: Role.ROLE_AGENT, messageId: crypto.randomUUID(), parts: [textPart(text)], taskId, contextId,
  extensions: [], metadata: {}, referenceTaskIds: [],
});
const textOf = (message) =>
  (message?.parts ?? [])
    .map((part) => (part.content?.$case === 'text' ? part.content.value : JSON.stringify(part.content?.value ?? null)))
    .join(' ');

class RemoteExecutor {
  running = new Set();
  cancelled = new Set();
  contexts = new Map();

  cancelTask = async (taskId, eventBus) => {
    if (this.running.has(taskId)) {
      this.cancelled.add(taskId); // execute() publishes the state when it next looks
      return;
    }
    this.status(eventBus, taskId, this.contexts.get(taskId) ?? '', TaskState.TASK_STATE_CANCELED, 'cancelled');
  };

  status(eventBus, taskId, contextId, state, text) {
    const message = text ? agentMessage(taskId, contextId, text) : undefined;
    eventBus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state, timestamp: now(), message }, metadata: {} }));
  }

  async execute(requestContext, eventBus) {
    const { taskId, contextId, userMessage } = requestContext;
    const text = textOf(userMessage);
    const task = requestContext.task ?? {
      id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, timestamp: now(), message: undefined },
      artifacts: [], history: [userMessage], metadata: {},
    };
    this.contexts.set(taskId, contextId);
    this.running.add(taskId);
    try {
      if (requestContext.task) {
        this.status(eventBus, taskId, contextId, TaskState.TASK_STATE_WORKING, undefined);
      } else {
        eventBus.publish(AgentEvent.task(task));
      }
      const asked = requestContext.task !== undefined;
      const hang = !asked && text.includes('hang');
      const delay = Number(/delay=(\d+)/.exec(text)?.[1] ?? delayMs);
      for (let waited = 0; hang || waited < delay; waited += 20) {
        if (this.cancelled.has(taskId)) {
          this.status(eventBus, taskId, contextId, TaskState.TASK_STATE_CANCELED, 'cancelled');
          return;
        }
        await sleep(Math.min(20, Math.max(delay - waited, 1)));
      }
      if (!asked && text.includes('ask')) {
        this.status(eventBus, taskId, contextId, TaskState.TASK_STATE_INPUT_REQUIRED, 'Which region should the report cover?');
      } else if (!asked && text.includes('fail')) {
        this.status(eventBus, taskId, contextId, TaskState.TASK_STATE_FAILED, 'the report could not be built');
      } else {
        const artifact = {
          artifactId: crypto.randomUUID(), name: 'report', description: '',
          parts: [textPart(asked ? `report for ${text}` : `done: ${text}`), dataPart({ answered: asked, text })],
          metadata: undefined, extensions: [],
        };
        const history = [...(task.history ?? [])];
        if (text.includes('apart')) {
          eventBus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact, append: false, lastChunk: true, metadata: undefined }));
          this.status(eventBus, taskId, contextId, TaskState.TASK_STATE_COMPLETED, undefined);
          return;
        }
        eventBus.publish(AgentEvent.task({
          ...task, history, artifacts: [artifact],
          status: { state: TaskState.TASK_STATE_COMPLETED, timestamp: now(), message: undefined },
        }));
      }
    } finally {
      this.running.delete(taskId);
      this.cancelled.delete(taskId);
    }
  }
}

const app = express();
const server = app.listen(port, '127.0.0.1', () => {
  const url = `http://127.0.0.1:${server.address().port}`;
  const card = {
    name: 'reports', description: 'Builds a report (a test agent of waitstate).',
    supportedInterfaces: [{ url: `${url}/`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' }],
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications: push, extensions: [], extendedAgentCard: false },
    securitySchemes: {}, securityRequirements: [], defaultInputModes: ['text'], defaultOutputModes: ['text'],
    skills: [{ id: 'report', name: 'report', description: 'Builds a report.', tags: [], examples: [], inputModes: ['text'], outputModes: ['text'], securityRequirements: [] }],
    documentationUrl: '', signatures: [],
  };
  const store = new InMemoryPushNotificationStore();
  const handler = new DefaultRequestHandler(
    card, new InMemoryTaskStore(), new RemoteExecutor(), undefined, store,
    new DefaultPushNotificationSender(store, { timeout: 5000 }),
  );
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
  app.use(jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(JSON.stringify({ url }));
});
