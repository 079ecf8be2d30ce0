// Where this directory's Node scripts find their packages: the example's
// node/node_modules (examples/mcp/node/package-lock.json, installed by
// ../install.sh). Scripts here sit beside node/, not in it, so a bare
// `import "oidc-provider"` would not find them; these helpers resolve each
// package from node/ instead, exactly as node/client.mjs imports them.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const nodeDir = new URL("../node/", import.meta.url);
const fromNode = createRequire(new URL("package.json", nodeDir));

/** panva's oidc-provider, the version node/package.json pins. */
export async function oidcProvider() {
  return import(pathToFileURL(fromNode.resolve("oidc-provider")).href);
}

/** jose, the copy oidc-provider itself depends on (signing and keys). */
export async function jose() {
  const fromProvider = createRequire(fromNode.resolve("oidc-provider"));
  // require.resolve picks jose's CommonJS build; its exports are the
  // module's default when imported from ESM.
  const m = await import(pathToFileURL(fromProvider.resolve("jose")).href);
  return m.SignJWT ? m : m.default;
}

/** A module of the TypeScript MCP SDK's ESM build, e.g. "client/auth.js". */
export async function sdk(path) {
  return import(new URL(`node_modules/@modelcontextprotocol/sdk/dist/esm/${path}`, nodeDir).href);
}
