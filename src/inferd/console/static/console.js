// inferd web console: Alpine.js components over the admin API; the
// usage page is in usage.js.
// Alpine is its CSP build (no 'unsafe-eval'): index.html's attributes only read properties and
// call methods, so whatever they show is computed here, in getters and methods.
// The teams page is in teams.js; the keys dialogs' models, per-model limits and expiry in key_limits.js.
// The admin key lives in sessionStorage only and is sent as `Authorization: Bearer` to this
// server's /v1 routes; nothing else is contacted.
"use strict";

const KEY_ITEM = "inferd.console.key";
const TABS = [
  { id: "usage", label: "Usage" },
  { id: "keys", label: "Keys" },
  { id: "teams", label: "Teams" },
  { id: "batches", label: "Batches" },
  { id: "deployments", label: "Deployments" },
].map((tab) => ({ ...tab, href: `#/${tab.id}`, navId: `nav-${tab.id}` }));
const REFRESH_MS = 5000;
const BATCH_RUNNING = new Set(["validating", "in_progress", "finalizing", "cancelling"]);
// A budget's period: calendar UTC, the week from Monday; `total` never resets.
const PERIODS = ["day", "week", "month", "total"];
const PER_PERIOD = { day: "per day", week: "per week", month: "per month", total: "in total" };

class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A call to this server's API with the signed-in key; the parsed JSON, or the Response when raw. */
async function api(path, { method = "GET", body, raw = false, key } = {}) {
  const headers = { Authorization: `Bearer ${key || sessionStorage.getItem(KEY_ITEM) || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store",
  });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    let code;
    try {
      const envelope = await response.json();
      message = envelope.error?.message || message;
      code = envelope.error?.code;
    } catch { /* not JSON */ }
    if (response.status === 401 && !key) {
      Alpine.store("session").signOut("The admin key is no longer accepted (revoked or expired): sign in again.");
    }
    throw new ApiError(response.status, message, code);
  }
  return raw ? response : response.json();
}

function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, value);
  }
  return search.toString();
}

// --- formatting, shared by the components -------------------------------------------------

const format = {
  money(value) {
    const amount = Number(value || 0);
    const size = Math.abs(amount);
    const digits = size === 0 || size >= 1 ? 2 : size >= 0.01 ? 4 : 6;
    return "$" + amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: digits });
  },
  count(value) {
    return Number(value || 0).toLocaleString("en-US");
  },
  /** The value, or a dash when there is none. */
  dash(value) {
    return value === null || value === undefined || value === "" ? "—" : value;
  },
  /** Unix seconds or an ISO 8601 string, as `YYYY-MM-DD HH:MM UTC`. */
  when(value) {
    if (value === null || value === undefined || value === "") return "—";
    const moment = typeof value === "number" ? new Date(value * 1000) : new Date(value);
    if (Number.isNaN(moment.getTime())) return String(value);
    return moment.toISOString().slice(0, 16).replace("T", " ") + " UTC";
  },
  /** A budget's period as words: "per day", ..., "in total". */
  per(period) {
    return PER_PERIOD[period] || `per ${period}`;
  },
  /** When a key's or team's period under way ends (`resets_at`, a UTC day), or that it never does. */
  resetText(item) {
    return item.resets_at ? `resets ${item.resets_at}` : "never resets";
  },
  /** The budget with its period: "$5.00 per day", or "no budget". */
  budgetText(item) {
    return item.budget_usd === null ? "no budget" : `${format.money(item.budget_usd)} ${format.per(item.budget_period)}`;
  },
};

// --- what the pages share -------------------------------------------------------------------

/** The dialogs of a page (spread into its component): each has an x-ref, `formDialog` (create and
 * edit) or `confirmDialog` (index.html's confirm-dialog, asking what the component's `confirmation`
 * says); `submit(work)` runs a dialog's request, its failure shown in the dialog. */
const dialogs = {
  busy: false,
  dialogError: "",
  confirming: null, // what the confirmation dialog asks about: the key to revoke, the team to delete

  /** The create-and-edit dialog's submit button; the component's `creating` says which. */
  submitLabel() {
    return this.creating ? "Create" : "Save";
  },
  closeDialog(ref) {
    this.$refs[ref].close();
  },
  askConfirm(item) {
    this.confirming = item;
    this.dialogError = "";
    this.$refs.confirmDialog.showModal();
  },
  /** The name of what the confirmation dialog asks about (its `confirmation.subject` field). */
  confirmName() {
    return this.confirming ? this.confirming[this.confirmation.subject] : "";
  },
  /** An element of the confirmation dialog: revoke-confirm, team-delete-cancel, ... */
  confirmId(name) {
    return `${this.confirmation.ids}-${name}`;
  },
  async submit(work) {
    this.busy = true;
    this.dialogError = "";
    try {
      await work();
    } catch (failure) {
      this.dialogError = failure.message;
    } finally {
      this.busy = false;
    }
  },
};

/** A page that lists what GET `path` returns in `data` (spread into its component). */
const listing = {
  async loadList(path, what) {
    this.loading = true;
    try {
      this.items = (await api(path)).data;
      this.error = "";
    } catch (failure) {
      this.error = `Could not load the ${what}: ${failure.message}`;
    } finally {
      this.loading = false;
    }
  },
};

function isoDay(date) {
  return date.toISOString().slice(0, 10);
}

function addDays(day, days) {
  const date = new Date(day + "T00:00:00Z");
  date.setUTCDate(date.getUTCDate() + days);
  return isoDay(date);
}

function blankOrNumber(value, integer) {
  if (value === "" || value === null || value === undefined) return null;
  return integer ? parseInt(value, 10) : Number(value);
}

/** "a, b" (commas or spaces) as a list of names; blank: null. */
function nameList(text) {
  const names = String(text || "").split(/[\s,]+/).filter(Boolean);
  return names.length ? names : null;
}

function download(blob, filename) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** Calls `work` every REFRESH_MS while the component lives (and the tab is visible). */
function poller(work) {
  const timer = setInterval(() => { if (!document.hidden) work(); }, REFRESH_MS);
  return () => clearInterval(timer);
}

document.addEventListener("alpine:init", () => {
  // `<template x-include="ID">...</template>` stands for index.html's <template id="ID">, its own
  // content in place of that one's <slot>, evaluated in the component around it: the dialogs that
  // the keys and teams pages share.
  Alpine.directive("include", (el, { expression }) => {
    const nodes = [...document.getElementById(expression).content.cloneNode(true).children];
    const slot = nodes.map((node) => node.querySelector("slot")).find(Boolean);
    Alpine.mutateDom(() => {
      if (slot) slot.replaceWith(el.content);
      el.replaceWith(...nodes);
    });
    nodes.forEach((node) => Alpine.initTree(node));
  });

  Alpine.store("session", {
    tabs: TABS,
    signedIn: false,
    org: { slug: "" },
    page: "usage",
    notice: "",

    get signedOut() {
      return !this.signedIn;
    },
    isPage(id) {
      return this.page === id;
    },
    tabClass(tab) {
      return { active: this.page === tab.id };
    },

    init() {
      window.addEventListener("hashchange", () => this.route());
      this.route();
      const key = sessionStorage.getItem(KEY_ITEM);
      if (key) this.signIn(key).catch(() => this.signOut());
    },
    route() {
      const page = location.hash.replace(/^#\/?/, "");
      this.page = TABS.some((tab) => tab.id === page) ? page : "usage";
    },
    /** Checks the key on GET /v1/admin/org (403 for a key that is not an admin key). */
    async signIn(key) {
      this.org = await api("/v1/admin/org", { key });
      sessionStorage.setItem(KEY_ITEM, key);
      this.signedIn = true;
    },
    signOut(notice = "") {
      sessionStorage.removeItem(KEY_ITEM);
      this.signedIn = false;
      this.org = { slug: "" };
      this.notice = notice;
    },
  });

  Alpine.data("signIn", () => ({
    key: "",
    error: Alpine.store("session").notice,
    busy: false,
    async submit() {
      this.busy = true;
      this.error = "";
      try {
        await Alpine.store("session").signIn(this.key.trim());
        this.key = "";
      } catch (failure) {
        this.error = failure.status === 403 ? "That key is not an admin key: sign in with an admin key."
          : failure.status === 401 ? "That key was not accepted (unknown, revoked or expired)."
            : `Could not sign in: ${failure.message}`;
      } finally {
        this.busy = false;
      }
    },
  }));

  Alpine.data("keys", () => ({
    ...format,
    ...dialogs,
    ...listing,
    ...keyLimits(),
    periods: PERIODS,
    items: [],
    teams: [], // the org's teams, for the team select of the dialogs
    hideRevoked: false,
    loading: false,
    error: "",
    created: null,
    copied: false,
    editing: null, // the key being edited; null while creating
    draft: { models: [], limits: [] },

    init() {
      this.load();
    },
    get visible() {
      return this.items.filter((key) => !this.hideRevoked || !key.revoked_at);
    },
    get empty() {
      return !this.loading && this.visible.length === 0;
    },
    get createdId() {
      return this.created ? this.created.access_key_id : "";
    },
    get createdKey() {
      return this.created ? this.created.full_key : "";
    },
    get copyLabel() {
      return this.copied ? "Copied" : "Copy";
    },
    get editingId() {
      return this.editing ? this.editing.access_key_id : "";
    },
    get creating() {
      return this.editing === null;
    },
    get dialogId() {
      return this.creating ? "key-create-dialog" : "key-edit-dialog";
    },
    get dialogTitle() {
      return this.creating ? "Create a key" : "Edit key ";
    },
    get dialogSubject() {
      return this.editingId;
    },
    confirmation: {
      dialog: "key-revoke-dialog", ids: "revoke", subject: "access_key_id", title: "Revoke key", label: "Revoke",
      text: "Every call made with it will be refused (401) from now on. This cannot be undone.",
    },
    /** A field of the key dialog: create-name while creating, edit-name while editing. */
    fieldId(name) {
      return `${this.creating ? "create" : "edit"}-${name}`;
    },
    confirmed() {
      return this.revoke();
    },
    isActive(key) {
      return !key.revoked_at;
    },
    rowClass(key) {
      return { revoked: Boolean(key.revoked_at) };
    },
    hasBudget(key) {
      return key.budget_usd !== null;
    },
    spendText(key) {
      return `${this.money(key.spend_usd)} / ${key.budget_usd === null ? "no budget" : this.money(key.budget_usd)}`;
    },
    meterMax(key) {
      return Math.max(key.budget_usd, 1e-9);
    },
    meterHigh(key) {
      return key.budget_usd * 0.8;
    },
    statusText(key) {
      if (key.revoked_at) return `revoked ${this.when(key.revoked_at)}`;
      return key.expires_at ? `active, expires ${this.when(key.expires_at)}` : "active";
    },
    dismissCreated() {
      this.created = null;
      this.copied = false;
    },
    async load() {
      await this.loadList("/v1/admin/keys", "keys");
      await this.loadTeams();
    },
    /** The org's teams (before a dialog opens, so that its select lists the current ones). */
    async loadTeams() {
      try {
        this.teams = (await api("/v1/admin/teams")).data;
      } catch (failure) {
        this.error = `Could not load the teams: ${failure.message}`;
      }
    },
    replace(key) {
      this.items = this.items.map((item) => (item.access_key_id === key.access_key_id ? key : item));
    },
    async openCreate() {
      await Promise.all([this.loadTeams(), this.loadCatalogue()]);
      this.editing = null;
      this.draft = {
        type: "application", name: "", user_email: "", team: "", budget_usd: "", budget_period: "month",
        rpm: "", tpm: "", ...this.limitsDraft(null),
      };
      this.dialogError = "";
      this.$refs.formDialog.showModal();
    },
    async create() {
      const body = { type: this.draft.type, budget_period: this.draft.budget_period };
      if (this.draft.name) body.name = this.draft.name;
      if (this.draft.user_email) body.user_email = this.draft.user_email;
      if (this.draft.team) body.team = this.draft.team;
      const budget = blankOrNumber(this.draft.budget_usd, false);
      const rpm = blankOrNumber(this.draft.rpm, true);
      const tpm = blankOrNumber(this.draft.tpm, true);
      if (budget !== null) body.budget_usd = budget;
      if (rpm !== null) body.rpm = rpm;
      if (tpm !== null) body.tpm = tpm;
      await this.submit(async () => {
        Object.assign(body, this.newLimitSettings());
        const key = await api("/v1/admin/keys", { method: "POST", body });
        const { secret, full_key: fullKey, ...shown } = key;
        this.items = [shown, ...this.items];
        this.created = { access_key_id: key.access_key_id, full_key: fullKey || `${key.access_key_id}:${secret}` };
        this.copied = false;
        this.$refs.formDialog.close();
      });
    },
    async copy() {
      const text = this.created.full_key;
      try {
        await navigator.clipboard.writeText(text);
      } catch {
        // No clipboard permission: select the text so that Ctrl+C copies it.
        const range = document.createRange();
        range.selectNodeContents(this.$root.querySelector("#key-secret-value"));
        getSelection().removeAllRanges();
        getSelection().addRange(range);
        if (!document.execCommand("copy")) return;
      }
      this.copied = true;
    },
    async openEdit(key) {
      await Promise.all([this.loadTeams(), this.loadCatalogue()]);
      this.editing = key;
      this.draft = {
        name: key.name || "",
        team: key.team || "",
        budget_usd: key.budget_usd === null ? "" : String(key.budget_usd),
        budget_period: key.budget_period,
        rpm: key.rpm === null ? "" : String(key.rpm),
        tpm: key.tpm === null ? "" : String(key.tpm),
        ...this.limitsDraft(key),
      };
      this.limitsBefore = this.limitSettings();
      this.dialogError = "";
      this.$refs.formDialog.showModal();
    },
    /** The dialog's submit: create a key, or save the edited one's changes. */
    save() {
      return this.creating ? this.create() : this.update();
    },
    async update() {
      const key = this.editing;
      const body = {};
      const budget = blankOrNumber(this.draft.budget_usd, false);
      const rpm = blankOrNumber(this.draft.rpm, true);
      const tpm = blankOrNumber(this.draft.tpm, true);
      if ((this.draft.name || null) !== (key.name || null)) body.name = this.draft.name || null;
      if ((this.draft.team || null) !== (key.team || null)) body.team = this.draft.team || null;
      if (budget !== key.budget_usd) body.budget_usd = budget;
      if (this.draft.budget_period !== key.budget_period) body.budget_period = this.draft.budget_period;
      if (rpm !== key.rpm) body.rpm = rpm;
      if (tpm !== key.tpm) body.tpm = tpm;
      await this.submit(async () => {
        Object.assign(body, this.changedLimitSettings());
        if (Object.keys(body).length) {
          this.replace(await api(`/v1/admin/keys/${encodeURIComponent(key.access_key_id)}`, { method: "PATCH", body }));
        }
        this.$refs.formDialog.close();
      });
    },
    async revoke() {
      const key = this.confirming;
      await this.submit(async () => {
        this.replace(await api(`/v1/admin/keys/${encodeURIComponent(key.access_key_id)}`, { method: "DELETE" }));
        this.$refs.confirmDialog.close();
      });
    },
  }));

  Alpine.data("batches", () => {
    let stop = null;
    return {
      ...format,
      items: [],
      hasMore: false,
      loading: false,
      error: "",

      init() {
        this.load();
        stop = poller(() => { if (this.items.some((batch) => BATCH_RUNNING.has(batch.status))) this.load(); });
      },
      get empty() {
        return !this.loading && this.items.length === 0;
      },
      statusClass(batch) {
        return `status-${batch.status}`;
      },
      progressMax(batch) {
        return Math.max(batch.request_counts.total, 1);
      },
      progressDone(batch) {
        return batch.request_counts.completed + batch.request_counts.failed;
      },
      destroy() {
        if (stop) stop();
      },
      async load() {
        this.loading = true;
        try {
          // Reload as many as are shown (newest first), so "Load more" pages stay in place.
          const reply = await api("/v1/batches?" + query({ limit: Math.min(Math.max(this.items.length, 20), 100) }));
          this.items = reply.data;
          this.hasMore = reply.has_more;
          this.error = "";
        } catch (failure) {
          this.error = `Could not load the batches: ${failure.message}`;
        } finally {
          this.loading = false;
        }
      },
      progress(batch) {
        const counts = batch.request_counts;
        if (counts.total === 0 && BATCH_RUNNING.has(batch.status)) return "waiting for the worker";
        return `${counts.completed + counts.failed} / ${counts.total} done, ${counts.failed} failed`;
      },
      async more() {
        const last = this.items[this.items.length - 1];
        try {
          const reply = await api("/v1/batches?" + query({ limit: 20, after: last && last.id }));
          this.items = [...this.items, ...reply.data];
          this.hasMore = reply.has_more;
        } catch (failure) {
          this.error = `Could not load more batches: ${failure.message}`;
        }
      },
      async download(fileId, kind) {
        try {
          const response = await api(`/v1/files/${encodeURIComponent(fileId)}/content`, { raw: true });
          download(await response.blob(), `${fileId}-${kind}.jsonl`);
        } catch (failure) {
          this.error = `Could not download ${fileId}: ${failure.message}`;
        }
      },
    };
  });

  Alpine.data("deployments", () => {
    let stop = null;
    return {
      ...format,
      ...listing,
      items: [],
      loading: false,
      error: "",

      init() {
        this.load();
        stop = poller(() => this.load());
      },
      get empty() {
        return !this.loading && this.items.length === 0;
      },
      rowKey(row) {
        return `${row.model}/${row.deployment}`;
      },
      health(row) {
        return row.up ? "up" : "down";
      },
      destroy() {
        if (stop) stop();
      },
      load() {
        return this.loadList("/v1/admin/deployments", "deployments");
      },
    };
  });
});
