"""The schema, as SQLAlchemy Core tables. Migrations (store/migrations) create exactly this."""

from __future__ import annotations

from sqlalchemy import (BigInteger, Boolean, Column, DateTime, Float, ForeignKey, Index, Integer, LargeBinary,
                        MetaData, String, Table, Text, UniqueConstraint, false)

# Every timestamp is a naive UTC datetime, the same on SQLite and PostgreSQL.
metadata = MetaData()

# BIGINT on PostgreSQL, INTEGER (the rowid alias, so autoincrement works) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")

orgs = Table(
    "orgs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("slug", String(128), nullable=False, unique=True),
    Column("allowed_models", Text, nullable=False, default="*"),  # "*" or a JSON list of ids/aliases
    Column("file_attachments", Boolean, nullable=False, default=True),
    Column("web_search", Boolean, nullable=False, default=False),
    Column("created_at", DateTime(), nullable=False),
    # Since 0012: the operator's budget for the whole org, and what its admin narrowed
    # `allowed_models` (the operator's ceiling) to; NULL: not narrowed.
    Column("budget_usd", Float, nullable=True),
    Column("budget_period", String(8), nullable=True),  # day | week | month | total; NULL: month
    Column("admin_models", Text, nullable=True),
    Column("guardrails", Text, nullable=True),  # since 0014: the `[[guardrails]]` the org chose, a JSON list
)

# Teams of an org (issue 28): a key belongs to at most one; budgets and windows of their own.
teams = Table(
    "teams", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False),
    Column("name", String(128), nullable=False),
    Column("budget_usd", Float, nullable=True),
    Column("budget_period", String(8), nullable=True),
    Column("rpm", Integer, nullable=True),
    Column("tpm", Integer, nullable=True),
    Column("models", Text, nullable=True),  # JSON list of ids/aliases; NULL: what the org allows
    Column("model_limits", Text, nullable=True),  # JSON {model: {"rpm": n, "tpm": n}}
    Column("created_at", DateTime(), nullable=False),
    UniqueConstraint("org_id", "name", name="uq_teams_org_name"),
)

users = Table(
    "users", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False),
    Column("subject", String(256), nullable=True),  # the idp `sub`, when known
    Column("email", String(320), nullable=True),
    Column("given_name", String(256), nullable=True),
    Column("family_name", String(256), nullable=True),
    Column("created_at", DateTime(), nullable=False),
    UniqueConstraint("org_id", "subject", name="uq_users_org_subject"),
    UniqueConstraint("org_id", "email", name="uq_users_org_email"),
)

api_keys = Table(
    "api_keys", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("access_key_id", String(32), nullable=False, unique=True),
    Column("secret_hash", String(64), nullable=False),
    Column("type", String(16), nullable=False),  # application | admin | user
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=True),  # owning user
    Column("parent_key_id", Integer, ForeignKey("api_keys.id"), nullable=True),  # who minted a user key
    Column("name", String(256), nullable=True),
    Column("budget_usd", Float, nullable=True),
    Column("rpm", Integer, nullable=True),
    Column("revoked_at", DateTime(), nullable=True),
    Column("expires_at", DateTime(), nullable=True),
    Column("created_at", DateTime(), nullable=False),
    # Since 0012 (issue 28).
    Column("team_id", Integer, nullable=True),
    Column("tpm", Integer, nullable=True),
    Column("budget_period", String(8), nullable=True),  # NULL: month
    Column("models", Text, nullable=True),  # JSON list; NULL: what its team and org allow
    Column("model_limits", Text, nullable=True),
    Column("previous_secret_hash", String(64), nullable=True),  # valid until previous_secret_until (rotation)
    Column("previous_secret_until", DateTime(), nullable=True),
    Index("ix_api_keys_team", "team_id"),
)

usage_rows = Table(
    "usage_rows", metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("org", String(128), nullable=False),
    Column("deployment", String(256), nullable=False),
    Column("key_id", String(32), nullable=False),
    Column("user_id", String(64), nullable=True),
    Column("team_id", Integer, nullable=True),
    Column("model", String(256), nullable=False),
    Column("workspace", String(32), nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("cached_prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("latency_ms", Integer, nullable=False),
    Column("status_code", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Column("metadata", Text, nullable=True),  # JSON object, or NULL for untagged requests
    # Since 0015: a response-cache hit (cost 0; `saved_usd` the cost first billed).
    Column("cache_hit", Boolean, nullable=False, server_default=false()),
    Column("saved_usd", Float, nullable=False, server_default="0"),
    # Since 0016: the output guardrail that withheld the reply (its engine was reached); NULL otherwise.
    Column("guardrail", String(64), nullable=True),
    Index("ix_usage_rows_key_created", "key_id", "created_at", "id"),  # id since 0002: pages in index order
)

# Spend per owner and UTC day, maintained with every usage commit (0012): a budget of any period is
# the sum of its owner's days since the period began. scope: key | team | org; owner: the charged
# access key id, the team id, the org slug.
spend = Table(
    "spend", metadata,
    Column("scope", String(8), primary_key=True),
    Column("owner", String(128), primary_key=True),
    Column("day", String(10), primary_key=True),  # YYYY-MM-DD (UTC)
    Column("spend_usd", Float, nullable=False),
)

# How far each usage journal of a SQLite database is folded into the tables (metering/journal_file.py).
usage_journal = Table(
    "usage_journal", metadata,
    Column("name", String(64), primary_key=True),
    Column("folded", BigInteger, nullable=False),  # bytes of the journal already written
)

# End users' saved conversations (issue 6). One row per conversation, one row per message, never a
# JSON blob per conversation. A message's `active` flag means "on the visible branch": exactly the
# rows of the active root-to-leaf path are active, so a page of the thread is one indexed read.
conversations = Table(
    "conversations", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),  # the owner
    Column("title", String(512), nullable=True),
    Column("project_id", Integer, nullable=True),
    Column("cloud_agent_task_id", Integer, nullable=True),
    Column("type", String(64), nullable=True),
    Column("is_ephemeral", Boolean, nullable=False, default=False),
    Column("archived_at", DateTime(), nullable=True),
    Column("last_message_at", DateTime(), nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Index("ix_conversations_user_last", "user_id", "last_message_at"),
)

conversation_messages = Table(
    "conversation_messages", metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("conversation_id", Integer, ForeignKey("conversations.id"), nullable=False),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=True),
    Column("role", String(16), nullable=False),  # user | assistant | tool
    Column("message", Text, nullable=False),
    Column("reasoning_content", Text, nullable=True),
    Column("model_name", String(256), nullable=True),
    Column("tool_call_id", String(128), nullable=True),
    Column("tool_name", String(128), nullable=True),
    Column("tool_status", String(16), nullable=True),
    Column("finish_reason", String(16), nullable=True),
    Column("turn_id", String(64), nullable=True),
    Column("parent_message_id", BigId, ForeignKey("conversation_messages.id"), nullable=True),
    Column("is_read", Boolean, nullable=False, default=False),
    Column("attachments", Text, nullable=True),  # JSON array
    Column("metadata", Text, nullable=True),  # JSON object
    Column("tool_calls", Text, nullable=True),  # JSON array; stored, never returned by detail
    Column("active", Boolean, nullable=False, default=True),
    Column("created_at", DateTime(), nullable=False),
    Index("ix_conversation_messages_conv_active_id", "conversation_id", "active", "id"),
    Index("ix_conversation_messages_parent", "conversation_id", "parent_message_id"),
)

conversation_participants = Table(
    "conversation_participants", metadata,
    Column("conversation_id", Integer, ForeignKey("conversations.id"), primary_key=True),
    Column("user_id", Integer, ForeignKey("users.id"), primary_key=True),
    Column("role", String(16), nullable=False),  # owner | admin | member
    Column("joined_at", DateTime(), nullable=False),
    Index("ix_conversation_participants_user", "user_id"),
)

# Sources attached to conversations (issue 6, ingestion). A source is owned by one user and may be
# linked to several conversations; its text chunks carry their embeddings as little-endian float32
# blobs, searched per conversation with numpy (the PostgreSQL server here has no pgvector).
sources = Table(
    "sources", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),  # the owner
    Column("source_type", String(32), nullable=False),  # vectorized | ...
    Column("source_name", String(512), nullable=False),
    Column("source_config", Text, nullable=False),  # JSON object; shown only to the owner
    Column("handler", String(64), nullable=True),
    Column("source_description", Text, nullable=True),
    Column("sha256", String(64), nullable=True),
    Column("metadata", Text, nullable=True),  # JSON object
    Column("host_identifier", String(256), nullable=True),
    Column("source_origin", String(64), nullable=True),
    Column("is_active", Boolean, nullable=False, default=True),
    Column("use_in_tasks", Boolean, nullable=False, default=False),
    Column("created_at", DateTime(), nullable=False),
    Column("updated_at", DateTime(), nullable=True),
    Column("deleted_at", DateTime(), nullable=True),
    Index("ix_sources_user_sha256", "user_id", "sha256"),
)

conversation_sources = Table(
    "conversation_sources", metadata,
    Column("conversation_id", Integer, ForeignKey("conversations.id"), primary_key=True),
    Column("source_id", Integer, ForeignKey("sources.id"), primary_key=True),
    Column("created_at", DateTime(), nullable=False),
    Index("ix_conversation_sources_source", "source_id"),
)

source_chunks = Table(
    "source_chunks", metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("source_id", Integer, ForeignKey("sources.id"), nullable=False),
    Column("ordinal", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("embedding", LargeBinary, nullable=False),  # float32, little-endian, `dim` values
    Column("dim", Integer, nullable=False),
    # Since 0007: the section heading path and the body's span in the extracted text (citations);
    # NULL on older chunks. A keyword index follows `text` (FTS5 table or tsvector column, see 0007).
    Column("heading", Text, nullable=True),
    Column("char_start", Integer, nullable=True),
    Column("char_end", Integer, nullable=True),
    Index("ix_source_chunks_source_ordinal", "source_id", "ordinal"),
)

# --- files and batches (issue 7) ---------------------------------------------------------------

# Uploaded batch input files and the output/error files the worker writes; bytes live on disk
# under the data dir (`path` is relative to it). `expires_at`: when the retention job deletes it.
# `key_id` (since 0006): the access key id that owns the file (the uploader, or the batch's key for
# output/error files); only it and the org's admin keys see the file. NULL: a file uploaded before
# 0006 that no batch names, seen by the org's admin keys only.
files = Table(
    "files", metadata,
    Column("id", String(64), primary_key=True),
    Column("org_id", Integer, nullable=False),
    Column("key_id", String(32), nullable=True),
    Column("filename", String(512), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("purpose", String(32), nullable=False),  # batch | batch_output
    Column("status", String(16), nullable=False),
    Column("path", String(1024), nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Column("expires_at", DateTime(), nullable=True),
    Index("ix_files_org", "org_id"),
    Index("ix_files_expires", "expires_at"),
)

# Since 0017: the bytes of files kept in the database (`[storage] backend = "postgres"`), in chunks of
# 1 MiB numbered from 0, so neither an upload nor a download holds a file whole. A file's row names
# them by `path` `pg:<file id>`; a stored file has at least one chunk (an empty file one empty chunk).
file_chunks = Table(
    "file_chunks", metadata,
    Column("file_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

# `seq` orders listings (newest first) and is the claim order; the worker holds a lease
# (`lease_owner` until `lease_until`) while it runs a batch, and a crashed worker's lease expires.
batches = Table(
    "batches", metadata,
    Column("seq", BigId, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("org_id", Integer, nullable=False),
    Column("key_id", String(32), nullable=False),  # access key id of the creating key (its budget pays)
    Column("input_file_id", String(64), nullable=False),
    Column("endpoint", String(64), nullable=False),
    Column("completion_window", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("validated", Boolean, nullable=False, default=False),  # lines are in batch_lines
    Column("total", Integer, nullable=False, default=0),
    Column("output_file_id", String(64), nullable=True),
    Column("error_file_id", String(64), nullable=True),
    Column("errors", Text, nullable=True),  # JSON
    Column("metadata", Text, nullable=True),  # JSON
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", DateTime(), nullable=True),
    Column("created_at", DateTime(), nullable=False),
    Column("expires_at", DateTime(), nullable=False),
    Column("cancelling_at", DateTime(), nullable=True),
    Column("finished_at", DateTime(), nullable=True),  # when it reached its terminal status
    # Why a batch is `cancelling`/`cancelled` (since 0006): NULL for a cancel request, `key_revoked`
    # when the worker stopped it because its key was revoked; names the unrun lines' error code.
    Column("cancel_reason", String(32), nullable=True),
    Index("ix_batches_org_seq", "org_id", "seq"),
    Index("ix_batches_key_seq", "key_id", "seq"),  # since 0006: an application key's own listing
    Index("ix_batches_status", "status"),
)

# One row per input line; `state` pending | succeeded | failed, and `result` the output/error
# line (JSON) recorded in the same transaction as the line's usage row.
batch_lines = Table(
    "batch_lines", metadata,
    Column("batch_id", String(64), primary_key=True),
    Column("line_no", Integer, primary_key=True),
    Column("custom_id", String(512), nullable=False),
    Column("body", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("result", Text, nullable=True),
    Index("ix_batch_lines_state", "batch_id", "state"),
)

# Usage reporting (migration 0002). Pages of /v1/usage walk one of these in (created_at, id) order.
Index("ix_usage_rows_key_model_created", usage_rows.c.key_id, usage_rows.c.model, usage_rows.c.created_at,
      usage_rows.c.id)
Index("ix_usage_rows_key_workspace_created", usage_rows.c.key_id, usage_rows.c.workspace, usage_rows.c.created_at,
      usage_rows.c.id)


# Per charged key, per UTC hour, day and month, one row per distinct (model, workspace, deployment,
# metadata), kept by the usage writer in its own transaction, so summaries over long windows read
# groups, not calls. `dims` is a short hash of those four values (they can be long, and NULLs
# defeat ON CONFLICT).
usage_rollup = Table(
    "usage_rollup", metadata,
    Column("key_id", String(32), primary_key=True),
    Column("span", String(5), primary_key=True),  # hour | day | month
    Column("period", String(13), primary_key=True),  # YYYY-MM-DDTHH, YYYY-MM-DD or YYYY-MM (UTC)
    Column("dims", String(16), primary_key=True),
    Column("model", String(256), nullable=False),
    Column("workspace", String(32), nullable=False),
    Column("deployment", String(256), nullable=False),
    Column("metadata", Text, nullable=True),
    Column("requests", BigInteger, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("cached_prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("cache_hits", BigInteger, nullable=False, server_default="0"),  # since 0015
    Column("saved_usd", Float, nullable=False, server_default="0"),
    sqlite_with_rowid=False,  # clustered by (key_id, span, period): a window is one contiguous range
)


# Administrative changes (migration 0008): append-only, one row per
# key.create, key.update, key.revoke or org.update. `actor` is the admin key's access key id or
# `cli`; `details` a JSON object that never holds a secret.
audit_log = Table(
    "audit_log", metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False),
    Column("at", DateTime(), nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(256), nullable=False),
    Column("details", Text, nullable=False),
    Index("ix_audit_log_org_id", "org_id", "id"),
)


# Stored responses of the Responses API (migration 0009): per key, kept 30
# days. `input_items` is the turn's input (JSON list), `response` the object sent; since 0011
# `previous_id` is the response it continued (NULL: `input_items` is the whole conversation before
# it), and `deleted_at` hides a deleted response that others still continue (store/responses.py).
responses = Table(
    "responses", metadata,
    Column("id", String(64), primary_key=True),
    Column("key_id", String(32), nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Column("input_items", Text, nullable=False),
    Column("response", Text, nullable=False),
    Column("previous_id", String(64), nullable=True),
    Column("deleted_at", DateTime(), nullable=True),
    Index("ix_responses_created_at", "created_at"),
    Index("ix_responses_previous_id", "previous_id"),
)


# Budget alerts (migration 0013): the durable queue of the webhook, one
# row per crossing of a threshold (50, 80, 100 percent) of a budget in a period; the unique key
# makes replicas that see the same crossing queue it once. `period_start` is '' for `total`.
# `next_attempt_at` is NULL once delivered or given up (the due rows are one index range).
alerts = Table(
    "alerts", metadata,
    Column("id", String(40), primary_key=True),
    Column("scope", String(8), nullable=False),  # key | team | org
    Column("owner", String(128), nullable=False),  # as `spend` names it
    Column("period_start", String(10), nullable=False),
    Column("threshold", Integer, nullable=False),
    Column("payload", Text, nullable=False),  # the JSON body posted
    Column("created_at", DateTime(), nullable=False),
    Column("attempts", Integer, nullable=False, default=0, server_default="0"),
    Column("next_attempt_at", DateTime(), nullable=True),
    Column("claimed_until", DateTime(), nullable=True),  # a replica is delivering it until then
    Column("delivered_at", DateTime(), nullable=True),
    Column("failed_at", DateTime(), nullable=True),
    Column("last_error", String(500), nullable=True),
    UniqueConstraint("scope", "owner", "period_start", "threshold", name="uq_alerts_crossing"),
    Index("ix_alerts_next_attempt", "next_attempt_at"),
)


# The response cache (migration 0015): one stored answer per cache key (cache/key.py), with the
# tokens and cost first billed. `org` is whose entries `DELETE /v1/admin/cache` empties; the oldest
# `created_at` leave first once `[cache] max_entries` is reached.
cache_entries = Table(
    "cache_entries", metadata,
    Column("key", String(64), primary_key=True),
    Column("org", String(128), nullable=False),
    Column("model", String(256), nullable=False),
    Column("reply", Text, nullable=False),  # JSON: the answer as first sent
    Column("prompt_tokens", Integer, nullable=False),
    Column("cached_prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Index("ix_cache_entries_created", "created_at"),
    Index("ix_cache_entries_org", "org"),
)
