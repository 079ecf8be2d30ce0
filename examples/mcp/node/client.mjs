#!/usr/bin/env node
// An MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk
// 1.32, which speaks protocol 2025-11-25 at most: `initialize` and a
// session), for any MCP URL: toolgate's /mcp or an MCP server directly.
//
//   node client.mjs URL [--token T] list
//   node client.mjs URL [--token T] call TOOL '{"order_id": 1001}' [--meta '{"k": "v"}']
//   node client.mjs URL [--token T] resources | templates | read URI | prompts | prompt NAME [ARGS_JSON]
//
// --token defaults to $MCP_TOKEN and travels as `Authorization: Bearer`.
// Every answer is one JSON line on stdout: the negotiated protocol version,
// then the result as the SDK returned it. The SDK validates a result's
// structuredContent against the tool's outputSchema (even with isError), so
// a result it refuses shows up here as an error. A JSON-RPC error prints
// {"error": {"code", "message"}} and exits 1.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

function usage(message) {
  if (message) process.stderr.write(`client.mjs: ${message}\n`);
  process.stderr.write(
    "usage: node client.mjs URL [--token T] list | call TOOL ARGS_JSON [--meta META_JSON]\n" +
      "       | resources | templates | read URI | prompts | prompt NAME [ARGS_JSON]\n",
  );
  process.exit(2);
}

function parse(argv) {
  const positional = [];
  const options = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--token" || a === "--meta") {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      options[a.slice(2)] = argv[++i];
    } else if (a.startsWith("--")) {
      usage(`unknown option ${a}`);
    } else {
      positional.push(a);
    }
  }
  return { positional, options };
}

function out(doc) {
  process.stdout.write(JSON.stringify(doc) + "\n");
}

async function main() {
  const { positional, options } = parse(process.argv.slice(2));
  const [url, command, ...rest] = positional;
  if (!url || !command) usage();
  const token = options.token ?? process.env.MCP_TOKEN ?? "";
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers },
  });
  const client = new Client({ name: "toolgate-mcp-example-node", version: "1.0.0" });
  try {
    await client.connect(transport);
    out({ protocol_version: transport.protocolVersion ?? null });
    if (command === "list") {
      const listed = await client.listTools();
      out({ tools: listed.tools });
    } else if (command === "call") {
      const [tool, args] = rest;
      if (!tool || !args) usage("call needs TOOL and ARGS_JSON");
      const params = { name: tool, arguments: JSON.parse(args) };
      if (options.meta) params._meta = JSON.parse(options.meta);
      // listTools first: the SDK validates structuredContent only for
      // tools whose outputSchema it has seen.
      await client.listTools();
      const result = await client.callTool(params);
      out({ result });
    } else if (command === "resources") {
      out({ resources: (await client.listResources()).resources });
    } else if (command === "templates") {
      out({ resourceTemplates: (await client.listResourceTemplates()).resourceTemplates });
    } else if (command === "read") {
      if (!rest[0]) usage("read needs URI");
      out({ result: await client.readResource({ uri: rest[0] }) });
    } else if (command === "prompts") {
      out({ prompts: (await client.listPrompts()).prompts });
    } else if (command === "prompt") {
      if (!rest[0]) usage("prompt needs NAME");
      const params = { name: rest[0] };
      if (rest[1]) params.arguments = JSON.parse(rest[1]);
      out({ result: await client.getPrompt(params) });
    } else {
      usage(`unknown command ${command}`);
    }
  } catch (e) {
    out({ error: { code: e?.code ?? null, message: String(e?.message ?? e) } });
    process.exitCode = 1;
  } finally {
    await client.close().catch(() => {});
  }
}

await main();
