// A real headless Chromium against a running `airlock serve` (SPEC §20): sign in with a token,
// see a parked run's approval appear without a reload, refuse a cross-site form POST, approve
// with the keyboard, watch the run complete, settle an UNCERTAIN call. Screenshots go to
// $SCREENS. Uses the distribution's /usr/bin/chromium through playwright-core, which never
// downloads a browser.
//
// Environment: AIRLOCK_URL (http://127.0.0.1:PORT/), REVIEWER_TOKEN (tenant acme, principal
// bob), AGENT_TOKEN (acme/alice, submits the run), PLAYWRIGHT_CORE (path of the package),
// SCREENS (directory), DOCS_SCREENSHOT (optional: also write the approval queue there).
"use strict";

const fs = require("fs");
const http = require("http");
const os = require("os");
const path = require("path");
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const BASE = process.env.AIRLOCK_URL.replace(/\/$/, "");
const REVIEWER = process.env.REVIEWER_TOKEN;
const AGENT = process.env.AGENT_TOKEN;
const SCREENS = process.env.SCREENS;
const HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">';

const results = [];

async function step(name, body) {
  const started = Date.now();
  try {
    await body();
    results.push([name, true]);
    console.log(`ok   ${name} (${Date.now() - started} ms)`);
  } catch (error) {
    results.push([name, false]);
    console.log(`FAIL ${name}: ${error && error.stack ? error.stack : error}`);
    throw error;
  }
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function api(method, route, token, body) {
  const response = await fetch(BASE + route, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* not JSON */ }
  return { status: response.status, json, text };
}

/// A page on another origin whose form posts to the console as soon as it loads.
function attackerSite(action, csrf) {
  const page = `<!doctype html><html><body>
<form id="f" method="post" action="${action}">
<input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="reason" value="cross-site">
</form><script>document.getElementById("f").submit();</script></body></html>`;
  const server = http.createServer((_, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(page);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

async function main() {
  fs.mkdirSync(SCREENS, { recursive: true });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    chromiumSandbox: false,
    viewport: { width: 1280, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = context.pages()[0] || (await context.newPage());
  page.on("pageerror", (error) => console.log(`page error: ${error}`));
  let runId = null;
  let approvalId = null;
  try {
    await step("sign in with a token", async () => {
      await page.goto(BASE + "/");
      check(page.url().endsWith("/login"), `not sent to the sign-in page: ${page.url()}`);
      await page.fill("input[name=token]", REVIEWER);
      await page.click("button[type=submit]");
      await page.waitForURL(BASE + "/");
      const cookies = await context.cookies(BASE);
      const session = cookies.find((c) => c.name === "airlock_session");
      check(session && session.httpOnly && session.sameSite === "Strict", "HttpOnly SameSite=Strict cookie");
      check(!JSON.stringify(cookies).includes(REVIEWER), "the token is not kept in a cookie");
      await page.waitForSelector("#live.on", { timeout: 15000 });
    });

    await step("a parked run's approval appears without a reload", async () => {
      await page.evaluate(() => { window.__sameDocument = "yes"; });
      const script = {
        schema_version: 1, tenant_id: "acme", principal_id: "alice",
        principal_scopes: ["demo.write"], origin_trust: "user",
        steps: [{ calls: [{ call_id: "send", tool: "demo.external_write",
          arguments: { destination: "billing", content: HOSTILE },
          argument_trust: { destination: "user", content: "user" } }] }],
        final_message: "sent",
      };
      const submitted = await api("POST", "/v1/runs", AGENT, script);
      check(submitted.status === 201, `submit: ${submitted.status} ${submitted.text}`);
      runId = submitted.json.run_id;
      const card = await page.waitForSelector("article.approval", { timeout: 30000 });
      approvalId = await card.getAttribute("data-id");
      check(await page.evaluate(() => window.__sameDocument) === "yes", "the page was reloaded");
      const text = await card.innerText();
      check(text.includes("demo.external_write"), "tool shown");
      check(text.includes(JSON.stringify(HOSTILE)), "hostile arguments shown as text (as a JSON string)");
      check((await card.$eval(".risk", (e) => e.textContent)).trim() === "high", "risk shown");
      check(/left$/.test((await card.$eval(".timeleft", (e) => e.textContent)).trim()), "time left shown");
      check(text.includes("policy.matrix.external_write"), "reason code shown");
      check(await page.evaluate(() => window.__pwned) === undefined, "a script in the arguments ran");
      check(await page.evaluate(() => document.querySelectorAll("main script, main img").length) === 0,
        "markup from the arguments reached the DOM");
      await page.screenshot({ path: path.join(SCREENS, "approvals.png"), fullPage: false });
      if (process.env.DOCS_SCREENSHOT) {
        await page.screenshot({ path: process.env.DOCS_SCREENSHOT, fullPage: false });
      }
    });

    await step("a cross-site form POST is refused", async () => {
      const csrf = await page.$eval("input[name=csrf]", (e) => e.value);
      const action = `${BASE}/approvals/${approvalId}/approve`;
      const attacker = await attackerSite(action, csrf);
      const { port } = attacker.address();
      const evil = await context.newPage();
      const refused = evil.waitForResponse((r) => r.url() === action);
      await evil.goto(`http://127.0.0.1:${port}/`);
      const response = await refused;
      check(response.status() === 403, `cross-site POST answered ${response.status()}`);
      await evil.waitForLoadState();
      check((await evil.innerText("body")).includes("Refused"), "refusal page");
      await evil.close();
      attacker.close();
      const approval = await api("GET", `/v1/approvals/${approvalId}`, REVIEWER);
      check(approval.json.status === "pending", `approval is ${approval.json.status}`);
    });

    await step("approve with the keyboard", async () => {
      await page.bringToFront();
      await page.keyboard.press("j");
      await page.keyboard.press("r");
      await page.keyboard.type("destination checked");
      await page.keyboard.press("Escape");
      await page.keyboard.press("a");
      const focused = await page.evaluate(() => document.activeElement && document.activeElement.className);
      check(focused === "approve", `'a' focused ${focused}`);
      await Promise.all([page.waitForURL(/notice=approved/), page.keyboard.press("Enter")]);
      check((await page.innerText(".notice")).includes("Approved"), "notice shown");
      const approval = await api("GET", `/v1/approvals/${approvalId}`, REVIEWER);
      check(approval.json.status === "approved", `approval is ${approval.json.status}`);
      check(approval.json.resolved_by === "bob", "resolved as the token's principal");
      check(approval.json.resolution_reason === "destination checked", "reason recorded");
    });

    await step("watch the run complete", async () => {
      await page.goto(`${BASE}/runs/${runId}`);
      await page.waitForFunction(() => {
        const s = document.querySelector(".status");
        return s && s.textContent.trim() === "COMPLETED";
      }, null, { timeout: 30000 });
      check((await page.innerText(".timeline")).includes("tool.call.completed"), "timeline has the call");
      await page.screenshot({ path: path.join(SCREENS, "run.png"), fullPage: true });
    });

    await step("settle an UNCERTAIN call", async () => {
      const queue = await api("GET", "/v1/invocations/uncertain", REVIEWER);
      check(queue.status === 200 && queue.json.items.length > 0, `review queue: ${queue.text}`);
      const invocation = queue.json.items[0];
      await page.goto(`${BASE}/review`);
      const card = await page.waitForSelector(`#invocation-${invocation.id}`);
      check((await card.innerText()).includes(invocation.idempotency_key), "idempotency key shown");
      await page.screenshot({ path: path.join(SCREENS, "review.png"), fullPage: false });
      await card.$eval("input[value=succeeded]", (e) => e.click());
      await card.$eval("textarea[name=note]", (e) => { e.value = "outbox.jsonl has one line with this key"; });
      await Promise.all([page.waitForURL(/notice=settled/), card.$eval("button.settle", (e) => e.click())]);
      const after = await api("GET", "/v1/invocations/uncertain?all=true", REVIEWER);
      const settled = after.json.items.find((i) => i.id === invocation.id);
      check(settled && settled.settlement && settled.settlement.outcome === "succeeded", "settlement stored");
      check(settled.status === "UNCERTAIN", "the call stays UNCERTAIN");
    });
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main()
  .catch(() => {})
  .finally(() => {
    const passed = results.filter(([, ok]) => ok).length;
    const failed = results.length - passed;
    console.log(`browser: ${passed} passed, ${failed} failed`);
    process.exit(failed === 0 && passed === 6 ? 0 : 1);
  });
