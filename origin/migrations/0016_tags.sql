-- Issue 28 item 4: a link's tags (`origin/src/links/tags.rs`): at most 20
-- of at most 50 characters, joined by `,` (a tag has no comma), NULL for
-- none. Compared exactly (binary collation): the search's and the tenant
-- statistics' `tag` filter is FIND_IN_SET on it, a condition on the rows
-- the tenant's index range reads. An instant ADD COLUMN in MariaDB 10.11
-- (no table copy, whatever the number of pre-generated rows). Safe to run
-- again.
ALTER TABLE short_code
  ADD COLUMN IF NOT EXISTS tags VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
