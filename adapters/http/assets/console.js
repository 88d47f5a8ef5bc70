// airlock console: live refresh from the event stream, countdowns and keyboard shortcuts.
// Everything the page shows is rendered (and escaped) by the server; this script only fetches
// server-rendered fragments and swaps them in. It never builds HTML from event data.
"use strict";

(function () {
  const body = document.body;
  if (!body || !body.dataset.live) return;

  // ----- countdowns ----------------------------------------------------------------------
  const serverNow = Date.parse(body.dataset.serverNow || "");
  const skew = Number.isNaN(serverNow) ? 0 : serverNow - Date.now();

  function timeLeft(ms) {
    const s = Math.floor(ms / 1000);
    if (s <= 0) return ["expired", "urgent"];
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600),
      m = Math.floor((s % 3600) / 60), sec = s % 60;
    const pad = (n) => String(n).padStart(2, "0");
    const text = d > 0 ? `${d}d ${h}h left` : h > 0 ? `${h}h ${pad(m)}m left`
      : m > 0 ? `${m}m ${pad(sec)}s left` : `${sec}s left`;
    const urgency = s < 900 ? "urgent" : s < 3600 ? "soon" : "calm";
    return [text, urgency];
  }

  function tick() {
    const now = Date.now() + skew;
    for (const el of document.querySelectorAll("[data-expires]")) {
      const at = Date.parse(el.dataset.expires);
      if (Number.isNaN(at)) continue;
      const [text, urgency] = timeLeft(at - now);
      el.textContent = text;
      el.classList.remove("calm", "soon", "urgent");
      el.classList.add(urgency);
    }
  }
  setInterval(tick, 1000);

  // ----- live refresh --------------------------------------------------------------------
  const live = document.getElementById("live");
  function setLive(state, text) {
    if (!live) return;
    live.classList.remove("on", "off");
    if (state) live.classList.add(state);
    live.textContent = text;
  }

  // What the operator is typing survives a refresh: values and focus are carried over by
  // card id and field name.
  function saveForms(root) {
    const saved = {};
    for (const card of root.querySelectorAll(".card[id]")) {
      const fields = {};
      for (const field of card.querySelectorAll("input[name], textarea[name]")) {
        if (field.type === "hidden") continue;
        if (field.type === "radio") { if (field.checked) fields["radio:" + field.name] = field.value; }
        else if (field.value) fields[field.name] = field.value;
      }
      saved[card.id] = fields;
    }
    const active = document.activeElement;
    const card = active && active.closest ? active.closest(".card[id]") : null;
    return { saved, focusCard: card ? card.id : null,
      focusName: active && active.name ? active.name : null,
      focusTag: active ? active.tagName : null,
      focusClass: active && active.className ? String(active.className) : null };
  }

  function restoreForms(state) {
    for (const [id, fields] of Object.entries(state.saved)) {
      const card = document.getElementById(id);
      if (!card) continue;
      for (const [name, value] of Object.entries(fields)) {
        if (name.startsWith("radio:")) {
          for (const r of card.querySelectorAll(`input[type=radio][name="${name.slice(6)}"]`)) r.checked = r.value === value;
        } else {
          const field = card.querySelector(`[name="${name}"]`);
          if (field) field.value = value;
        }
      }
    }
    if (state.focusCard) {
      const card = document.getElementById(state.focusCard);
      if (!card) return;
      let target = card;
      if (state.focusName) target = card.querySelector(`[name="${state.focusName}"]`) || card;
      else if (state.focusTag === "BUTTON" && state.focusClass) target = card.querySelector("button." + state.focusClass.split(" ")[0]) || card;
      target.focus({ preventScroll: true });
      select(card, false);
    }
  }

  async function refresh() {
    try {
      const counts = await fetch("/fragments/counts", { credentials: "same-origin" });
      if (counts.status === 401) { location.assign("/login"); return; }
      if (counts.ok) {
        const c = await counts.json();
        for (const [id, n] of [["count-approvals", c.approvals], ["count-review", c.review]]) {
          const el = document.getElementById(id);
          if (el) { el.textContent = String(n); el.dataset.zero = String(n === 0); }
        }
      }
      for (const section of document.querySelectorAll("[data-fragment]")) {
        const response = await fetch(section.dataset.fragment, { credentials: "same-origin" });
        if (response.status === 401) { location.assign("/login"); return; }
        if (!response.ok) continue;
        const text = await response.text();
        const state = saveForms(section);
        const template = document.createElement("template");
        template.innerHTML = text;
        const fresh = template.content.firstElementChild;
        if (fresh) section.replaceWith(fresh);
        restoreForms(state);
      }
      tick();
    } catch (e) {
      setLive("off", "offline");
    }
  }

  let pending = null;
  function scheduleRefresh() {
    if (pending) return;
    pending = setTimeout(() => { pending = null; refresh(); }, 200);
  }

  const TYPES = ["run.queued", "run.checkpointed", "run.started", "run.cancel_requested",
    "run.waiting_for_approval", "run.requeued", "run.completed", "run.failed", "run.cancelled",
    "tool.call.proposed", "tool.call.authorized", "tool.call.started", "tool.call.completed",
    "tool.call.failed", "tool.call.uncertain", "tool.call.denied", "tool.call.settled",
    "approval.requested", "approval.resolved", "approval.expired", "approval.cancelled",
    "approval.invalidated", "conversation.tainted", "conversation.taint_cleared"];

  if (window.EventSource) {
    const source = new EventSource("/events?after=" + encodeURIComponent(body.dataset.after || "0"));
    source.onopen = () => setLive("on", "live");
    source.onerror = () => setLive("off", "reconnecting");
    for (const type of TYPES) source.addEventListener(type, scheduleRefresh);
  } else {
    setLive("off", "no live updates");
  }

  // ----- keyboard ------------------------------------------------------------------------
  function cards() { return Array.from(document.querySelectorAll("main .card")); }
  function current() {
    return document.querySelector("main .card.selected") ||
      (document.activeElement && document.activeElement.closest ? document.activeElement.closest("main .card") : null);
  }
  function select(card, focus) {
    for (const c of document.querySelectorAll("main .card.selected")) c.classList.remove("selected");
    if (!card) return;
    card.classList.add("selected");
    if (focus) { card.focus({ preventScroll: true }); card.scrollIntoView({ block: "nearest" }); }
  }
  document.addEventListener("focusin", (e) => {
    const card = e.target.closest ? e.target.closest("main .card") : null;
    if (card) select(card, false);
  });

  let g = false;
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const tag = e.target && e.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") {
      if (e.key === "Escape") { const card = e.target.closest(".card"); if (card) select(card, true); }
      return;
    }
    if (g) {
      g = false;
      if (e.key === "a") { location.assign("/"); e.preventDefault(); }
      if (e.key === "r") { location.assign("/review"); e.preventDefault(); }
      return;
    }
    const list = cards();
    const at = list.indexOf(current());
    const focusIn = (selector) => {
      const card = current() || list[0];
      const target = card ? card.querySelector(selector) : null;
      if (target) { select(card, false); target.focus(); e.preventDefault(); }
    };
    switch (e.key) {
      case "j": select(list[Math.min(at + 1, list.length - 1)] || list[0], true); e.preventDefault(); break;
      case "k": select(list[Math.max(at - 1, 0)] || list[0], true); e.preventDefault(); break;
      case "a": focusIn("button.approve"); break;
      case "d": focusIn("button.deny"); break;
      case "r": focusIn("input[name=reason], textarea[name=note]"); break;
      case "s": focusIn("input[name=outcome]"); break;
      case "g": g = true; setTimeout(() => { g = false; }, 1000); break;
      default: break;
    }
  });
})();
