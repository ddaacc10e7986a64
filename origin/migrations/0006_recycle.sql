-- Issue 11, item 2: code recycling (opt-in, `lifecycle.recycle`). Every
-- statement is safe to run again (a migration interrupted before it was
-- recorded is simply re-run).
--
-- ended_at: Unix seconds when the link stopped resolving for good: set when
-- it is deleted or reaped (again on each of these changes), NULL while it is
-- a live link (a renewal clears it). The quarantine counts from here.
-- idx_ended: the recycler reads candidates in (ended_at, id) order from a
-- cursor (meta.recycle_cursor), a range of this index: only deleted and
-- expired rows have an ended_at, so its cost follows the tombstones, never
-- the table.
-- redirect_status: the redirect status the link was served with (the
-- origin's `redirect.status` at creation; a later change under a permanent
-- policy records the permanent one: once 301/308, always). NULL for links
-- created before this migration: unknown, treated as permanent (never
-- recycled); docs/architecture.md says how an operator who knows better
-- sets it.
ALTER TABLE short_code
  ADD COLUMN IF NOT EXISTS ended_at        BIGINT UNSIGNED   NULL,
  ADD COLUMN IF NOT EXISTS redirect_status SMALLINT UNSIGNED NULL,
  ADD INDEX IF NOT EXISTS idx_ended (ended_at);

-- Tombstones from before this migration: their end is when they were
-- reaped, or their last change (a deleted link never changes again, so that
-- is when it was deleted). Touches deleted and expired rows only (through
-- idx_state_created); a re-run finds none left.
UPDATE short_code SET ended_at = COALESCE(reaped_at, updated_at, created_at)
  WHERE state IN (4, 5) AND ended_at IS NULL;

-- Recycled links: the old row of a code appended to the pool again, moved
-- out of short_code in the same transaction (history, never looked up).
-- Same columns as short_code plus archived_at (Unix seconds). An id is
-- archived at most once (ids are never reused), so it stays the key; a code
-- may be archived once per life, so code is not unique. Its audit rows stay
-- in link_audit: those of one archived life are its code's rows up to its
-- `recycle` row (docs/architecture.md, "Recycling").
CREATE TABLE IF NOT EXISTS short_code_archive (
  id              BIGINT UNSIGNED  NOT NULL,
  code            VARCHAR(32)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  state           TINYINT UNSIGNED NOT NULL,
  long_url        VARCHAR(8192)    CHARACTER SET ascii COLLATE ascii_bin NULL,
  domain          VARCHAR(253)     CHARACTER SET ascii COLLATE ascii_general_ci NULL,
  app             VARCHAR(64)      CHARACTER SET utf8mb4 NULL,
  client_app      VARCHAR(64)      CHARACTER SET utf8mb4 NULL,
  client_version  VARCHAR(32)      CHARACTER SET utf8mb4 NULL,
  kdt_id          BIGINT UNSIGNED  NULL,
  created_at      BIGINT UNSIGNED  NULL,
  expires_at      BIGINT UNSIGNED  NULL,
  version         BIGINT UNSIGNED  NOT NULL,
  updated_at      BIGINT UNSIGNED  NULL,
  reaped_at       BIGINT UNSIGNED  NULL,
  ended_at        BIGINT UNSIGNED  NULL,
  redirect_status SMALLINT UNSIGNED NULL,
  archived_at     BIGINT UNSIGNED  NOT NULL,
  PRIMARY KEY (id),
  KEY idx_code (code)
) ENGINE=InnoDB;

-- Codes recycled so far (the status and metrics read it) and the
-- recycler's cursor (`<ended_at>:<id>` of the last row it examined).
-- (`permanent_redirect_until` is created by the first origin that serves
-- with a permanent redirect policy: absent means never.)
INSERT IGNORE INTO meta (name, value) VALUES ('recycled_total', '0');
INSERT IGNORE INTO meta (name, value) VALUES ('recycle_cursor', '0:0');
