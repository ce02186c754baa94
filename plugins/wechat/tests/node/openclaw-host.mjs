// Module hooks: answer the three `openclaw/plugin-sdk/*` imports of Tencent's client
// with a minimal host, so its iLink modules load without the OpenClaw framework (a peer
// dependency of several hundred MB that needs a newer Node). Only host plumbing is
// replaced (a log folder, a file lock, account id normalisation); every HTTP call, header,
// body and the AES code are Tencent's own.
const HOST = {
  "openclaw/plugin-sdk/infra-runtime": `
    import os from "node:os";
    import path from "node:path";
    export function resolvePreferredOpenClawTmpDir() {
      return process.env.OPENCLAW_STATE_DIR
        ? path.join(process.env.OPENCLAW_STATE_DIR, "logs")
        : path.join(os.tmpdir(), "openclaw");
    }
    export async function withFileLock(_file, _options, fn) { return await fn(); }
  `,
  "openclaw/plugin-sdk/account-id": `
    export function normalizeAccountId(raw) {
      return String(raw ?? "").trim().toLowerCase().replace(/[^a-z0-9_-]+/g, "-") || "default";
    }
  `,
};

export async function resolve(specifier, context, next) {
  if (specifier in HOST) return { url: `openclaw-host:${specifier}`, shortCircuit: true };
  if (specifier.startsWith("openclaw/")) {
    throw new Error(`the driver's minimal host does not provide ${specifier}`);
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (url.startsWith("openclaw-host:")) {
    return { format: "module", source: HOST[url.slice("openclaw-host:".length)],
             shortCircuit: true };
  }
  return next(url, context);
}
