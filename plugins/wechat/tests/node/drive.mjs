// Drive Tencent's own iLink client (@tencent-weixin/openclaw-weixin) against a fake
// iLink gateway, making the calls the client makes in real use, and print a JSON report.
//
//   node drive.mjs <api base> <cdn base> <user id> <work dir>
//
// The package is loaded from ./node_modules, or from $CHATKERNEL_NODE_MODULES/node_modules
// when that is set (the test installs it into a cache folder outside the repository).
import { register } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [apiBase, cdnBase, user, workDir] = process.argv.slice(2);
if (!apiBase || !cdnBase || !user || !workDir) {
  console.error("usage: node drive.mjs <api base> <cdn base> <user id> <work dir>");
  process.exit(2);
}
// The client keeps state and logs under its state folder: keep them in the work folder.
process.env.OPENCLAW_STATE_DIR = path.join(workDir, "openclaw-state");
register("./openclaw-host.mjs", import.meta.url);

// Tencent's QR login always talks to its fixed production host: send that host to the
// fake instead (the only request rewritten; nothing else about a request changes).
const PRODUCTION = "https://ilinkai.weixin.qq.com/";
const realFetch = globalThis.fetch;
globalThis.fetch = (url, init) => {
  const target = String(url);
  return realFetch(target.startsWith(PRODUCTION)
    ? apiBase.replace(/\/?$/, "/") + target.slice(PRODUCTION.length) : target, init);
};

const root = process.env.CHATKERNEL_NODE_MODULES
  ? path.join(process.env.CHATKERNEL_NODE_MODULES, "node_modules")
  : path.join(path.dirname(new URL(import.meta.url).pathname), "node_modules");
const dist = path.join(root, "@tencent-weixin", "openclaw-weixin", "dist", "src");
const load = (module) => import(pathToFileURL(path.join(dist, module)).href);

const api = await load("api/api.js");
const login = await load("auth/login-qr.js");
const send = await load("messaging/send.js");
const sendMedia = await load("messaging/send-media.js");
const pkg = JSON.parse(fs.readFileSync(path.join(dist, "..", "..", "package.json"), "utf-8"));

const report = { client: `${pkg.name}@${pkg.version}`, steps: [] };
async function step(name, fn) {
  try {
    const result = await fn();
    report.steps.push({ name, ok: true, result: result ?? null });
    return result;
  } catch (err) {
    report.steps.push({ name, ok: false, error: String(err) });
    throw err;
  }
}

try {
  // QR login: get_bot_qrcode, then get_qrcode_status until confirmed (the caller moves
  // the fake's QR states; a verification code, when asked, comes on stdin).
  const started = await step("get_bot_qrcode", async () => {
    const r = await login.startWeixinLoginWithQr({ force: true });
    if (!r.qrcodeUrl) throw new Error(r.message);
    return { qrcodeUrl: r.qrcodeUrl, sessionKey: r.sessionKey };
  });
  let token;  // the bot token stays out of the report
  const confirmed = await step("get_qrcode_status", async () => {
    const r = await login.waitForWeixinLogin({ sessionKey: started.sessionKey,
                                              timeoutMs: 30_000 });
    if (!r.connected) throw new Error(r.message);
    token = r.botToken;
    return { accountId: r.accountId, baseUrl: r.baseUrl, userId: r.userId,
             hasToken: Boolean(r.botToken) };
  });
  const opts = { baseUrl: confirmed.baseUrl || apiBase, token };

  await step("notifystart", () => api.notifyStart(opts));
  const updates = await step("getupdates", () =>
    api.getUpdates({ ...opts, get_updates_buf: "", timeoutMs: 10_000 }));
  // The next poll presents the cursor it got; the fake answers empty when it times out.
  await step("getupdates with the cursor", () =>
    api.getUpdates({ ...opts, get_updates_buf: updates.get_updates_buf, timeoutMs: 10_000 }));
  const inbound = (updates.msgs ?? []).find((m) => m.from_user_id === user);
  if (!inbound) throw new Error(`getupdates brought no message from ${user}`);
  const contextToken = inbound.context_token;
  const config = await step("getconfig", () =>
    api.getConfig({ ...opts, ilinkUserId: user, contextToken }));
  await step("sendtyping", () => api.sendTyping({ ...opts, body: {
    ilink_user_id: user, typing_ticket: config.typing_ticket, status: 1 } }));
  const text = `echo: ${inbound.item_list?.[0]?.text_item?.text ?? ""}`;
  await step("sendmessage text", () =>
    send.sendMessageWeixin({ to: user, text, opts: { ...opts, contextToken } }));
  await step("sendtyping cancel", () => api.sendTyping({ ...opts, body: {
    ilink_user_id: user, typing_ticket: config.typing_ticket, status: 2 } }));
  // Media: getuploadurl, the encrypted CDN upload, then the media sendmessage (an image
  // with a caption is two sends; a file attachment is one).
  const image = path.join(workDir, "picture.png");
  const attachment = path.join(workDir, "notes.txt");
  await step("send image", () => sendMedia.sendWeixinMediaFile({
    filePath: image, to: user, text: "a picture", cdnBaseUrl: cdnBase,
    opts: { ...opts, contextToken } }));
  await step("send file", () => sendMedia.sendWeixinMediaFile({
    filePath: attachment, to: user, text: "", cdnBaseUrl: cdnBase,
    opts: { ...opts, contextToken } }));
  await step("notifystop", () => api.notifyStop(opts));
  report.inbound = { message_id: inbound.message_id, text: inbound.item_list?.[0]?.text_item?.text,
                     context_token: contextToken };
  report.sent_text = text;
  report.ok = true;
} catch (err) {
  report.ok = false;
  report.error = String(err);
}
// The client writes its own prompts to stdout: the report is the last line.
process.stdout.write("\n" + JSON.stringify(report) + "\n");
process.exit(report.ok ? 0 : 1);
