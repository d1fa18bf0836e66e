"""Metering: one usage row per metered call, durable before the reply ends, and its spend.

- usage.py: `Usage`, a call's row, priced from the catalogue (`usage_for`, `token_cost`);
- recorder.py: what every writer shares: `UsageRecorder` (what the call stage needs of a writer),
  `MeteredCalls` (the calls under way, counted with `with writer.metered_calls:`) and
  `AfterCommit` (the usage metrics and the spend counters, once rows are durable);
- group_commit.py: the writer of a database without a journal (SQLite in memory): rows committed
  in one transaction per wake-up;
- journal_file.py: the usage journal files (a row durable in one `write`) and SQLite's fold;
- fold_pg.py: the fold of the same files into PostgreSQL, exactly once across replicas;
- journal_sqlite.py, journal_pg.py: the writers that append to the journal and fold it;
- spend.py: the committed spend read back, for the spend counters.

The SQL of a usage write (rows, rollups, spend) is store/usage_write.py's: the batch repository
writes a line's row with its result in the same transaction.
"""
