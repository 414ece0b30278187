// The official JavaScript A2A client (@a2a-js/sdk, from conformance/node_modules) driving one
// task of a waitstate agent served over A2A: send, see input-required, approve, read the task
// until it completes. Prints one JSON line per step for the Python test to read. With PUSH_URL,
// the task is started with a push config to it (PUSH_TOKEN its token).
//
//   node sdk_client.mjs AGENT_URL   (A2A_KEY: the bearer key; A2A_MODULES: the node_modules)
import { randomUUID } from "node:crypto";
import path from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.A2A_MODULES;
const load = (file) => import(pathToFileURL(path.join(modules, "@a2a-js/sdk/dist", file)).href);
const { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } = await load("client/index.js");
const { Role, TaskState } = await load("index.js");

const [url] = process.argv.slice(2);
const authorization = `Bearer ${process.env.A2A_KEY}`;
const fetchImpl = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", authorization);
  return fetch(input, { ...init, headers });
};
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
    preferredTransports: ["JSONRPC"],
  }),
);
// The card's path is resolved against the base URL as a URL is: the agent's, with its slash.
const client = await factory.createFromUrl(url.endsWith("/") ? url : `${url}/`);
const say = (step, task) =>
  console.log(
    JSON.stringify({
      step,
      id: task.id,
      state: TaskState[task.status?.state],
      message: task.status?.message?.parts?.[0]?.content?.value ?? "",
      artifact: task.artifacts?.[0]?.parts?.[0]?.content?.value ?? "",
    }),
  );
const message = (text, taskId = "") => ({
  message: {
    messageId: randomUUID(),
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text } }],
    taskId,
    contextId: "",
  },
});

const first = message("Delete the q3 drafts");
if (process.env.PUSH_URL) {
  first.configuration = {
    acceptedOutputModes: [],
    taskPushNotificationConfig: {
      tenant: "",
      id: "hook",
      taskId: "",
      url: process.env.PUSH_URL,
      token: process.env.PUSH_TOKEN ?? "",
      authentication: undefined,
    },
    returnImmediately: false,
  };
}
const sent = await client.sendMessage(first);
say("sent", sent);
const replied = await client.sendMessage(message("approve", sent.id));
say("replied", replied);
let task = replied;
for (let look = 0; look < 120 && TaskState[task.status?.state] !== "TASK_STATE_COMPLETED"; look++) {
  await new Promise((resolve) => setTimeout(resolve, 500));
  task = await client.getTask({ id: sent.id });
}
say("read", task);
