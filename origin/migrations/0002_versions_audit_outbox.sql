-- Issue 10: row versions, the deleted state, the audit trail and the
-- invalidation outbox. Every statement is safe to run again (a migration
-- interrupted before it was recorded is simply re-run).
--
-- short_code.state gains 4 deleted (for good: never editable, never issued again).
-- state: 0 free, 1 active, 2 reserved (kept out of issue), 3 disabled, 4 deleted.
--
-- version: 0 for a code never issued, 1 at creation, +1 on every change; the
-- Redis record carries it so an older write can never replace a newer one.
-- Links created before this migration keep version 0 until their first
-- change (no backfill: an UPDATE of every issued row would hold a long
-- transaction on a large table for no behavioural gain).
-- updated_at: Unix seconds of the last change (NULL until the first one for
-- links created before this migration; creation sets it).
ALTER TABLE short_code
  ADD COLUMN IF NOT EXISTS version    BIGINT UNSIGNED NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS updated_at BIGINT UNSIGNED NULL;

-- One row per change of a link, written in the change's own transaction
-- (creations inside the group commit). before/after are JSON snapshots of
-- the link (NULL before a creation). History reads by (code, id).
CREATE TABLE IF NOT EXISTS link_audit (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  code        VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  at_ms       BIGINT UNSIGNED NOT NULL,
  actor       VARCHAR(64)  CHARACTER SET utf8mb4 NOT NULL,
  action      VARCHAR(16)  CHARACTER SET ascii NOT NULL,
  version     BIGINT UNSIGNED NOT NULL,
  before_json TEXT CHARACTER SET utf8mb4 NULL,
  after_json  TEXT CHARACTER SET utf8mb4 NULL,
  PRIMARY KEY (id),
  KEY idx_code_id (code, id)
) ENGINE=InnoDB;

-- Changes whose Redis side (record + invalidation message) is still to be
-- applied: inserted in the change's transaction, deleted once applied.
CREATE TABLE IF NOT EXISTS outbox (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  code          VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  version       BIGINT UNSIGNED NOT NULL,
  created_at_ms BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;
