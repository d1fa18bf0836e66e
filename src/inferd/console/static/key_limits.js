// The keys page's access settings, in the key dialog (it creates and edits) of
// console.js's `keys` component, which spreads keyLimits() into itself: the models a key may call
// (ticked from the catalogue, GET /v1/models; none ticked off: all its team and org allow), its own
// windows per model (`model_limits`: rows of model, rpm, tpm) and its expiry (a UTC date and time,
// or never). The server checks them (models within the team's and org's: 400 `model_not_allowed`)
// and writes nothing of a refused change; its message shows in the dialog.
// Uses console.js's api() and blankOrNumber().
"use strict";

/** A stored expiry (RFC 3339) as a datetime-local input holds it, in UTC ("2031-02-03T04:05:00"); "" for never. */
function localUtc(value) {
  if (!value) return "";
  const moment = new Date(value);
  return Number.isNaN(moment.getTime()) ? "" : moment.toISOString().slice(0, 19);
}

/** A datetime-local input's value, read as UTC, as RFC 3339; null for blank (never). */
function utcFromLocal(value) {
  if (!value) return null;
  const moment = new Date(`${value}Z`);
  if (Number.isNaN(moment.getTime())) throw new Error(`Expires: ${value} is not a date and time`);
  return moment.toISOString();
}

/** The keys component's part for models, per-model limits and expiry (a fresh object per component). */
function keyLimits() {
  return {
    catalogue: [], // the model ids the org may use, for the models' boxes and the limits' suggestions
    limitsBefore: null, // the edited key's settings as the dialog first showed them
    modelsBefore: [], // the edited key's models, so that one the catalogue does not list stays tickable
    lastLimitRow: 0,

    /** The org's models (GET /v1/models), before a dialog opens. */
    async loadCatalogue() {
      try {
        this.catalogue = (await api("/v1/models")).data.map((model) => model.id);
      } catch (failure) {
        this.error = `Could not load the models: ${failure.message}`;
      }
    },
    /** The dialogs' fields for `key`'s models, per-model limits and expiry (blank for a new key). */
    limitsDraft(key) {
      const windows = key && key.model_limits ? Object.entries(key.model_limits) : [];
      this.modelsBefore = key && key.models ? [...key.models] : [];
      return {
        restrict_models: Boolean(key && key.models !== null),
        models: key && key.models ? [...key.models] : [],
        limits: windows.map(([model, window]) => this.limitRow(model, window)),
        expires: key ? localUtc(key.expires_at) : "",
      };
    },
    limitRow(model = "", window = {}) {
      this.lastLimitRow += 1;
      const text = (value) => (value === null || value === undefined ? "" : String(value));
      return { id: this.lastLimitRow, model, rpm: text(window.rpm), tpm: text(window.tpm) };
    },
    /** The models to tick: the catalogue's, and any the key names that it does not list (an alias). */
    modelChoices() {
      return [...new Set([...this.catalogue, ...this.modelsBefore, ...(this.draft.models || [])])];
    },
    addLimit() {
      this.draft.limits.push(this.limitRow());
    },
    removeLimit(row) {
      this.draft.limits = this.draft.limits.filter((item) => item.id !== row.id);
    },
    neverExpires() {
      this.draft.expires = "";
    },
    /** `models`, `model_limits` and `expires_at` as the dialog sets them; an Error for what cannot be sent. */
    limitSettings() {
      const limits = {};
      for (const row of this.draft.limits || []) {
        const model = String(row.model || "").trim();
        const rpm = blankOrNumber(row.rpm, true);
        const tpm = blankOrNumber(row.tpm, true);
        if (!model) {
          if (rpm === null && tpm === null) continue; // an empty row added and left
          throw new Error("Per-model limits: a row with a limit names no model");
        }
        if (model in limits) throw new Error(`Per-model limits: ${model} has two rows`);
        limits[model] = {};
        if (rpm !== null) limits[model].rpm = rpm;
        if (tpm !== null) limits[model].tpm = tpm;
      }
      return {
        models: this.draft.restrict_models ? [...new Set(this.draft.models || [])] : null, // in the order ticked
        model_limits: Object.keys(limits).length ? limits : null,
        expires_at: utcFromLocal(this.draft.expires),
      };
    },
    /** Those of limitSettings() that differ from what the edit dialog first showed. */
    changedLimitSettings() {
      const changed = {};
      for (const [name, value] of Object.entries(this.limitSettings())) {
        if (JSON.stringify(value) !== JSON.stringify(this.limitsBefore[name])) changed[name] = value;
      }
      return changed;
    },
    /** Those of limitSettings() that a new key sets. */
    newLimitSettings() {
      return Object.fromEntries(Object.entries(this.limitSettings()).filter(([, value]) => value !== null));
    },
    /** The key's models, for its row: "mock-chat, fast", or what it inherits. */
    modelsText(key) {
      if (key.models === null) return key.team ? "all its team's" : "all the organisation's";
      return key.models.join(", ") || "none";
    },
    /** The key's per-model windows, for its row: "mock-chat: 10 rpm, 1000 tpm". */
    limitsText(key) {
      return Object.entries(key.model_limits || {}).map(([model, window]) => {
        const parts = [];
        if (typeof window.rpm === "number") parts.push(`${window.rpm} rpm`);
        if (typeof window.tpm === "number") parts.push(`${window.tpm} tpm`);
        return `${model}: ${parts.join(", ")}`;
      }).join("; ");
    },
  };
}
