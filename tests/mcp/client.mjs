// An MCP client built on the official TypeScript SDK, driven by tests/integration/mcp_sdk_test.cpp: it starts
// `gpumeter mcp` over stdio, does what one scenario asks and prints one JSON object of what it saw on stdout.
//
//   node client.mjs read  GPUMETER_BIN --runs-dir D --ledger L     list the tools, read every live run,
//                                                                   try stop_run (refused without control)
//   node client.mjs stop  GPUMETER_BIN --runs-dir D --ledger L     with --allow-control: set_budget, then
//     [--reason TEXT] [--budget USD]                                 stop_run on the first live run
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [mode, bin, ...rest] = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = rest.indexOf(name);
  return i >= 0 ? rest[i + 1] : fallback;
};
const serverArgs = ["mcp", "--runs-dir", flag("--runs-dir"), "--ledger", flag("--ledger")];
if (mode === "stop") serverArgs.push("--allow-control");

const transport = new StdioClientTransport({
  command: bin,
  args: serverArgs,
  env: { ...process.env },
  stderr: "inherit",
});
const client = new Client({ name: "gpumeter-test-agent", version: "1.0.0" });
const out = { mode };

// A call's outcome: the result, or the protocol error the SDK threw (its code and message).
async function call(name, args) {
  try {
    const r = await client.callTool({ name, arguments: args });
    return { ok: true, isError: r.isError === true, structured: r.structuredContent ?? null,
             text: r.content.map((c) => c.text).join("\n") };
  } catch (e) {
    return { ok: false, code: e.code ?? null, message: String(e.message ?? e) };
  }
}

try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  out.instructions = client.getInstructions() ?? null;
  out.ping = await client.ping();
  const listed = await client.listTools();
  out.tools = listed.tools.map((t) => ({ name: t.name, title: t.title ?? null, hasOutputSchema: !!t.outputSchema,
                                         readOnly: t.annotations?.readOnlyHint ?? null }));
  out.list_runs = await call("list_runs", { limit: 10 });
  const live = (out.list_runs.structured?.runs ?? []).filter((r) => r.live);
  out.live = live;
  if (live.length > 0) {
    out.run_status = await call("run_status", { pid: live[0].pid });
    out.run_status_by_id = await call("run_status", { run_id: live[0].run_id });
  }
  out.bad_args = await call("run_status", { run_id: "seven" });
  if (mode === "read") {
    out.stop_refused = await call("stop_run", { pid: live.length ? live[0].pid : 1, reason: "not allowed" });
  } else if (mode === "stop" && live.length > 0) {
    out.set_budget = await call("set_budget", { pid: live[0].pid, budget_usd: flag("--budget", "250.125") });
    out.stop_run = await call("stop_run", { run_id: live[0].run_id, reason: flag("--reason", "asked by the test agent") });
  }
} catch (e) {
  out.error = String(e.stack ?? e);
} finally {
  await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify(out) + "\n");
