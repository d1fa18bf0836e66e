// The console's teams page: the org's teams with their budget and its
// period, the spend in the period under way and when it resets, rpm, tpm and models; create, edit
// and delete (after a confirmation; refused 409 `team_in_use` while a live key belongs to the team).
// Uses console.js's api(), format, dialogs, listing, PERIODS, blankOrNumber() and nameList().
"use strict";

document.addEventListener("alpine:init", () => {
  Alpine.data("teams", () => ({
    ...format,
    ...dialogs,
    ...listing,
    periods: PERIODS,
    items: [],
    loading: false,
    error: "",
    editing: null, // the team being edited; null while creating
    creating: false,
    draft: {},

    init() {
      this.load();
    },
    get empty() {
      return !this.loading && this.items.length === 0;
    },
    get dialogId() {
      return "team-dialog";
    },
    get dialogTitle() {
      return this.creating ? "Create a team" : "Edit team ";
    },
    get dialogSubject() {
      return this.editing ? this.editing.name : "";
    },
    confirmation: {
      dialog: "team-delete-dialog", ids: "team-delete", subject: "name", title: "Delete team", label: "Delete",
      text: "Its limits and budget go with it. A team is deleted only once no live key belongs to it.",
    },
    /** A field of the team dialog (team-name, team-budget, ...). */
    fieldId(name) {
      return `team-${name}`;
    },
    confirmed() {
      return this.remove();
    },
    hasBudget(team) {
      return team.budget_usd !== null;
    },
    /** "$1.20 / $5.00 (24%)", or the spend alone without a budget. */
    spendText(team) {
      const spent = this.money(team.spend_usd);
      if (team.budget_usd === null) return `${spent} (no budget)`;
      return `${spent} / ${this.money(team.budget_usd)} (${this.percent(team)})`;
    },
    percent(team) {
      if (team.budget_usd > 0) return `${Math.round((100 * team.spend_usd) / team.budget_usd)}%`;
      return team.spend_usd > 0 ? "over budget" : "0%";
    },
    meterMax(team) {
      return Math.max(team.budget_usd, 1e-9);
    },
    meterHigh(team) {
      return team.budget_usd * 0.8;
    },
    /** The period under way, before resetText(): "day from 2025-06-02," or "total,". */
    periodText(team) {
      return `${team.budget_period}${team.period_start ? ` from ${team.period_start}` : ""},`;
    },
    modelsText(team) {
      return team.models === null ? "all the organisation's" : team.models.join(", ") || "none";
    },
    load() {
      return this.loadList("/v1/admin/teams", "teams");
    },
    openCreate() {
      this.creating = true;
      this.editing = null;
      this.draft = { name: "", budget_usd: "", budget_period: "month", rpm: "", tpm: "", models: "" };
      this.dialogError = "";
      this.$refs.formDialog.showModal();
    },
    openEdit(team) {
      this.creating = false;
      this.editing = team;
      this.draft = {
        name: team.name,
        budget_usd: team.budget_usd === null ? "" : String(team.budget_usd),
        budget_period: team.budget_period,
        rpm: team.rpm === null ? "" : String(team.rpm),
        tpm: team.tpm === null ? "" : String(team.tpm),
        models: team.models === null ? "" : team.models.join(", "),
      };
      this.dialogError = "";
      this.$refs.formDialog.showModal();
    },
    /** The settings in the dialog; when editing, only those that changed (null removes a limit). */
    settings() {
      const wanted = {
        budget_usd: blankOrNumber(this.draft.budget_usd, false),
        budget_period: this.draft.budget_period,
        rpm: blankOrNumber(this.draft.rpm, true),
        tpm: blankOrNumber(this.draft.tpm, true),
        models: nameList(this.draft.models),
      };
      const team = this.editing;
      const body = {};
      for (const [name, value] of Object.entries(wanted)) {
        if (team === null ? value !== null : JSON.stringify(value) !== JSON.stringify(team[name])) body[name] = value;
      }
      return body;
    },
    async save() {
      const body = this.settings();
      await this.submit(async () => {
        if (this.creating) {
          const team = await api("/v1/admin/teams", { method: "POST", body: { name: this.draft.name.trim(), ...body } });
          this.items = [...this.items, team].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
        } else if (Object.keys(body).length) {
          const team = await api(`/v1/admin/teams/${encodeURIComponent(this.editing.name)}`, { method: "PATCH", body });
          this.items = this.items.map((item) => (item.name === team.name ? team : item));
        }
        this.$refs.formDialog.close();
      });
    },
    async remove() {
      const name = this.confirming.name;
      await this.submit(async () => {
        await api(`/v1/admin/teams/${encodeURIComponent(name)}`, { method: "DELETE" });
        this.items = this.items.filter((item) => item.name !== name);
        this.$refs.confirmDialog.close();
      });
    },
  }));
});
